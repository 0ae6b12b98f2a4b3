package stream

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/internal/dialect/classic"
	"github.com/captchaq/captchaq/stream/internal/dispatcher"
	"github.com/captchaq/captchaq/stream/internal/pool"
)

// The plan shrinks from 10 threads to 3 in the middle of a burst, as
// another worker of the account reads it: the quota follows, the
// captchas already at the service end as they would, and once they have,
// the service holds no more than the 3 of the new quota. Each task is
// paid once.
func TestAPlanShrunkMidBurstHoldsTheNewQuota(t *testing.T) {
	t.Parallel()
	b, store := followedStore(t, Topology{})
	ctx := testContext(t)
	api := toldAPI(10, "")
	rw := b.startWorker(t, WorkerConfig{Name: "w1", NewSolver: newSolverOf(t, api), Threads: 20})
	require.Eventually(t, func() bool { return planHeld(t, b, dispatcher.Plan{Threads: 10, FromService: true}) }, 10*time.Second, 5*time.Millisecond)
	tasks := pagesBurst("shrink", 80)
	rs, err := b.client.SubmitAll(ctx, tasks)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return api.Stats().Concurrent >= 8 }, 10*time.Second, time.Millisecond, "the burst under way")
	account := rw.w.SolverClient().PlanAccount()
	now := time.Now().Add(time.Second)
	require.NoError(t, store.PutPlanWindow(ctx, "w0", pool.PlanWindow{Limit: 3, Told: 3, ToldAt: now, Account: account, At: now}))
	require.Eventually(t, func() bool { return planHeld(t, b, dispatcher.Plan{Threads: 3, FromService: true}) }, 10*time.Second, time.Millisecond)
	shrunk := time.Now()
	// Solve times are at most 400 ms here: past them, the captchas taken
	// under the old quota have ended.
	sctx, stop := context.WithCancel(ctx)
	after := make(chan int, 1)
	go func() {
		most := 0
		for sctx.Err() == nil {
			if time.Since(shrunk) > time.Second {
				most = max(most, api.Stats().Concurrent)
			}
			time.Sleep(time.Millisecond)
		}
		after <- most
	}()
	require.NoError(t, b.client.WaitAll(ctx, rs, func(o Outcome, err error) {
		assert.NoError(t, err)
		assert.Equal(t, StatusSolved, o.Status)
	}))
	stop()
	most := <-after
	st := api.Stats()
	t.Logf("accepted %d, refused %d, most at once %d, most at once from 1 s after the shrink %d (took %s after it)",
		st.Submitted, st.Codes[classic.CodeZeroBalance], st.MaxConcurrent, most, time.Since(shrunk).Round(time.Millisecond))
	require.Equal(t, len(tasks), st.Submitted, "each task paid once")
	for k, n := range st.PerTask {
		require.Equal(t, 1, n, "task %s paid once", k)
	}
	assert.LessOrEqual(t, most, 3, "the new quota holds once the old captchas ended")
}
