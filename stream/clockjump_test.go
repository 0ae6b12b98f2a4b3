package stream

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream/wire"
)

// The worker's clock (its own and its solving client's) jumps 10 minutes
// forward while the service refuses connections and 4 captchas it accepted
// are held, then back (a machine's clock stepped and corrected), and the
// service comes back. Each task has the default 10-minute deadline, which
// the jump passes on the worker's clock only: each is solved on its first
// attempt, its one outcome, its captcha paid once. The clock comes back
// before the service does, 3 s after it, or the moment it does after a
// heartbeat read the broker's clock with the clock ahead: the solves then
// end before the next heartbeat reads it again (this case stamped every
// token 10 minutes early, expired before it was read, until the broker
// clock's reading noticed the local clock set back).
func TestWorkerClockJumpDuringOutagePaysOnce(t *testing.T) {
	t.Parallel()
	for name, back := range map[string]clockBack{"back-before-the-service": backBefore, "back-after-the-service": backAfter,
		"back-with-the-service": backWith} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			clockJumpDuringOutage(t, back)
		})
	}
}

// clockBack is when the clock comes back in clockJumpDuringOutage.
type clockBack int

const (
	backBefore clockBack = iota // a second before the service answers
	backAfter                   // 3 s after it answers
	backWith                    // as it answers, a heartbeat after the jump
)

// clockJumpDuringOutage runs TestWorkerClockJumpDuringOutagePaysOnce.
func clockJumpDuringOutage(t *testing.T, back clockBack) {
	b := setup(t, Topology{})
	ctx := testContext(t)
	const n = 4
	api, proxy := refusableAPI(t, 3*time.Second)
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	log := debugLog(t)
	sc, err := solver.NewClient(solver.Config{BaseURL: "http://" + proxy.Addr, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1,
		Timing: solver.Timing{Scale: 0.1, Fixed: true}, Logger: log, Now: now})
	require.NoError(t, err)
	b.startWorker(t, WorkerConfig{Solver: sc, Threads: n, Logger: log, Now: now})

	_, receipts := b.submitHeld(t, api, "jump", n)

	proxy.Refuse()
	time.Sleep(time.Second) //nolint:forbidigo // the outage, then the jumps, are the scenario
	offset.Store(int64(10 * time.Minute))
	ahead := 2 * time.Second
	if back == backWith {
		ahead = wire.HeartbeatEvery + time.Second // a heartbeat reads the broker's clock 10 minutes behind
	}
	time.Sleep(ahead) //nolint:forbidigo // refused with the clock ahead
	switch back {
	case backBefore:
		offset.Store(0)
		time.Sleep(time.Second) //nolint:forbidigo // refused with the clock back
		require.NoError(t, proxy.Listen())
	case backWith:
		offset.Store(0)
		require.NoError(t, proxy.Listen())
	case backAfter:
		require.NoError(t, proxy.Listen())
		time.Sleep(3 * time.Second) //nolint:forbidigo // answered with the clock ahead
		offset.Store(0)
	}

	solved := 0
	require.NoError(t, b.client.WaitAll(ctx, receipts, func(o Outcome, err error) {
		require.NoError(t, err)
		require.Equal(t, StatusSolved, o.Status, "%+v", o)
		require.Equal(t, 1, o.Attempts, "neither the outage nor the jumps spent an attempt: %+v", o)
		solved++
	}))
	require.Equal(t, n, solved)
	st := api.Stats()
	require.Equal(t, n, st.Submitted, "each task's captcha is paid once")
}

// submitHeld submits n turnstile tasks (ids prefix0, prefix1, …, each with
// a sitekey of its own) and waits until the service accepted each captcha
// and was polled about it: the worker has every id (an in.php reply cut
// by an outage is the one case no one can know).
func (b *bundle) submitHeld(t *testing.T, api *fakeapi.Server, prefix string, n int) ([]Task, []Receipt) {
	t.Helper()
	tasks := make([]Task, n)
	for i := range tasks {
		tasks[i] = turnstileTask(fmt.Sprintf("%s%d", prefix, i))
		tasks[i].Params = Params{"sitekey": fmt.Sprintf("0x4AAAAAAAB%d", i), "pageurl": "https://shop.example/checkout/123"}
	}
	receipts, err := b.client.SubmitAll(testContext(t), tasks)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		st := api.Stats()
		return st.Submitted == n && len(st.ResCallsPerCaptcha) == n
	}, 20*time.Second, 10*time.Millisecond, "the service never accepted and was polled about the %d captchas", n)
	return tasks, receipts
}
