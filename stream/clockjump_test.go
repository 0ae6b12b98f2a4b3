package stream

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
)

// The worker's clock (its own and its solving client's) jumps 10 minutes
// forward while the service refuses connections and 4 captchas it accepted
// are held, then back (a machine's clock stepped and corrected), and the
// service comes back. Each task has the default 10-minute deadline, which
// the jump passes on the worker's clock only: each is solved on its first
// attempt, its one outcome, its captcha paid once. The clock comes back
// before the service does, or 3 s after it.
func TestWorkerClockJumpDuringOutagePaysOnce(t *testing.T) {
	t.Parallel()
	for name, backFirst := range map[string]bool{"back-before-the-service": true, "back-after-the-service": false} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			clockJumpDuringOutage(t, backFirst)
		})
	}
}

// clockJumpDuringOutage runs TestWorkerClockJumpDuringOutagePaysOnce: the
// clock comes back before the service does, or 3 s after.
func clockJumpDuringOutage(t *testing.T, backFirst bool) {
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
	time.Sleep(2 * time.Second) //nolint:forbidigo // refused with the clock ahead
	if backFirst {
		offset.Store(0)
		time.Sleep(time.Second) //nolint:forbidigo // refused with the clock back
	}
	require.NoError(t, proxy.Listen())
	if !backFirst {
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
