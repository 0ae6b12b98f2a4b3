package stream

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream/internal/dispatcher"
)

// A quota of 4 shrinks to 2 while the service holds 4 captchas: no held
// thread is removed (the service still has its captcha), 2 of them are
// marked retiring, and their holders remove them as their captchas end.
// From the moment both are gone, the service never holds more than 2, the plan stream ends with exactly 2 threads, and each task is
// paid once.
func TestAQuotaShrunkWhileEveryThreadIsHeldRetiresThemAsTheirCaptchasEnd(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{Memory: underRace})
	ctx := testContext(t)
	api, sc := emulator(t, fakeapi.Config{SolveTime: map[string]fakeapi.Range{solver.KindTurnstile: fixed(100 * time.Millisecond)}}, 0.01)
	admin, err := NewAdmin(b.connect(t), AdminConfig{Topology: b.top})
	require.NoError(t, err)
	require.NoError(t, admin.SetPlan(ctx, 4))
	b.startWorker(t, WorkerConfig{Solver: sc, Threads: 30})
	release := api.Hold()
	defer release()
	const tasks = 30
	rs, err := b.client.SubmitAll(ctx, pagesBurst("retire", tasks))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return api.Stats().Concurrent >= 4 }, 30*time.Second, 5*time.Millisecond)

	require.NoError(t, admin.SetPlan(ctx, 2))
	js, err := jetStreamOf(b.nc, b.top)
	require.NoError(t, err)
	ps, err := js.Stream(ctx, dispatcher.PlanStream)
	require.NoError(t, err)
	info := ps.CachedInfo()
	require.Equal(t, uint64(4), info.State.Msgs, "no held thread removed")
	require.Len(t, dispatcher.ParseRetiring(info.Config.Metadata), 2, "two held threads retiring")
	require.Equal(t, 4, api.Stats().Concurrent)

	release()
	sctx, stop := context.WithCancel(ctx)
	after := make(chan int, 1)
	go func() {
		most, drained := 0, false
		for sctx.Err() == nil {
			if drained {
				most = max(most, api.Stats().Concurrent)
			} else if s, err := js.Stream(sctx, dispatcher.PlanStream); err == nil && s.CachedInfo().State.Msgs == 2 {
				drained = true // both retiring threads removed: their captchas ended
			}
			time.Sleep(time.Millisecond)
		}
		after <- most
	}()
	require.NoError(t, b.client.WaitAll(ctx, rs, func(o Outcome, err error) {}))
	stop()
	most := <-after
	ps, err = js.Stream(ctx, dispatcher.PlanStream)
	require.NoError(t, err)
	st := api.Stats()
	t.Logf("quota 4 -> 2 with 4 held: most at once %d, after the old captchas ended %d; plan stream %d threads; paid %d",
		st.MaxConcurrent, most, ps.CachedInfo().State.Msgs, st.Submitted)
	paidOnceAcross(t, tasks, st)
	require.Equal(t, 4, st.MaxConcurrent)
	require.LessOrEqual(t, most, 2, "the smaller quota holds once the captchas of the larger ended")
	require.Equal(t, uint64(2), ps.CachedInfo().State.Msgs, "the retiring threads left the plan")
	n, err := admin.PlanThreads(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n)
}
