package stream

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream/internal/dispatcher"
)

// Two operators race SetPlan(2) and SetPlan(4), or call them one after
// the other, while the pool holds the whole quota of 4 at the service
// (the emulator holds every captcha). A change never takes a thread from
// a captcha at the service (topology.EnsurePlan): 2 retires two held
// threads, 4 takes them back, so the service never holds more than the
// largest quota, 4, however many changes. Each task is paid once.
func TestBreakRacingOperatorsPileThreadsAtTheService(t *testing.T) {
	t.Parallel()
	for _, racing := range []bool{true, false} {
		t.Run(fmt.Sprintf("racing=%v", racing), func(t *testing.T) {
			t.Parallel()
			pileThreads(t, racing)
		})
	}
}

// pileThreads runs TestBreakRacingOperatorsPileThreadsAtTheService's
// rounds, the two calls at once when racing, else one after the other.
func pileThreads(t *testing.T, racing bool) {
	b := setup(t, Topology{Memory: underRace})
	ctx := testContext(t)
	api, sc := emulator(t, fakeapi.Config{SolveTime: map[string]fakeapi.Range{solver.KindTurnstile: fixed(100 * time.Millisecond)}}, 0.01)
	var admins [2]*Admin
	for i := range admins {
		var err error
		admins[i], err = NewAdmin(b.connect(t), AdminConfig{Topology: b.top})
		require.NoError(t, err)
	}
	require.NoError(t, admins[0].SetPlan(ctx, 4))
	for range 2 {
		b.startWorker(t, WorkerConfig{Solver: sc, Threads: 30})
	}
	release := api.Hold()
	defer release()
	rs, err := b.client.SubmitAll(ctx, pagesBurst("pile", 60))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return api.Stats().Concurrent >= 4 }, 30*time.Second, 5*time.Millisecond)
	const rounds = 5
	for range rounds {
		if !racing {
			require.NoError(t, admins[0].SetPlan(ctx, 2))
			require.NoError(t, admins[1].SetPlan(ctx, 4))
			continue
		}
		errs := make(chan error, 2)
		for j, n := range []int{2, 4} {
			go func() { errs <- admins[j].SetPlan(ctx, n) }()
		}
		for range 2 {
			require.NoError(t, <-errs)
		}
	}
	require.NoError(t, admins[0].SetPlan(ctx, 4))
	// Held: the count at the service only grows. Once no thread is left
	// to hand out and each one handed out has its captcha there, no more
	// captchas can go.
	js, err := jetStreamOf(b.nc, b.top)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		c, err := js.Consumer(ctx, dispatcher.PlanStream, dispatcher.PlanConsumer)
		if err != nil {
			return false
		}
		ci := c.CachedInfo()
		return ci.NumPending == 0 && api.Stats().Concurrent >= ci.NumAckPending
	}, 10*time.Second, 5*time.Millisecond)
	st := api.Stats()
	release()
	require.NoError(t, b.client.WaitAll(ctx, rs, func(o Outcome, err error) {}))
	t.Logf("quota 4 (no early hand-back) after %d rounds of 2 and 4: %d captchas at the service at once (paid %d then, %d in all for 60 tasks)",
		rounds, st.MaxConcurrent, st.Submitted, api.Stats().Submitted)
	paidOnceAcross(t, 60, api.Stats())
	require.LessOrEqual(t, st.MaxConcurrent, 4, "no more than the largest quota set")
	require.LessOrEqual(t, api.Stats().MaxConcurrent, 4, "nor once the captchas ended and the pool took the rest")
}
