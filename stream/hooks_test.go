package stream

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
)

// TestRetryComesBackBeforeTheIdleCheck: a task handed back after a
// transient error, with a 50-ms backoff, is taken again when its delay
// ends, not at the idle check (an hour): the executor tells the
// dispatcher to look at its lane again (Hooks.LookAgainAfter). Its
// observations name the service's code, and a dead task's observation
// its reason as well: what a metrics observer labels them with.
func TestRetryComesBackBeforeTheIdleCheck(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	var (
		mu    sync.Mutex
		tried = map[string]int{}
		obs   []Observation
	)
	b.startWorker(t, WorkerConfig{Threads: 1, IdleCheck: time.Hour,
		Policy: retry.Policy{MaxAttempts: 3, InitialInterval: 50 * time.Millisecond, MaxInterval: 50 * time.Millisecond, NoJitter: true},
		Observer: ObserverFunc(func(o Observation) {
			mu.Lock()
			defer mu.Unlock()
			obs = append(obs, o)
		}),
		Solver: solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
			mu.Lock()
			tried[req.Params["pageurl"]]++
			n := tried[req.Params["pageurl"]]
			mu.Unlock()
			if req.Params["pageurl"] == "https://shop.example/broken" {
				return solver.Answer{}, apiErr("ERROR_PAGEURL", retry.Permanent)
			}
			if n == 1 {
				return solver.Answer{}, apiErr("ERROR_SERVER_ERROR", retry.Transient)
			}
			return tokenSolver().Solve(ctx, req)
		})})

	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := b.client.Solve(wctx, turnstileTask("comes-back"))
	require.NoError(t, err, "the retried task waited for the idle check")
	require.Equal(t, StatusSolved, out.Status)

	broken := turnstileTask("broken")
	broken.Params["pageurl"] = "https://shop.example/broken"
	dead, err := b.client.Solve(wctx, broken)
	require.ErrorIs(t, err, ErrNotSolved)
	require.NotEmpty(t, dead.Reason)

	mu.Lock()
	defer mu.Unlock()
	var retried, died bool
	for _, o := range obs {
		switch o.Kind {
		case EventRetry:
			retried = true
			require.Equal(t, "ERROR_SERVER_ERROR", o.Code, "%+v", o)
			require.Empty(t, o.Reason, "%+v", o)
		case EventDead:
			died = true
			require.Equal(t, "ERROR_PAGEURL", o.Code, "%+v", o)
			require.Equal(t, dead.Reason, o.Reason, "%+v", o)
		}
	}
	require.True(t, retried && died, "observations: %+v", obs)
}
