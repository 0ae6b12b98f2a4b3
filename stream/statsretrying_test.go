package stream

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream/wire"
)

// TestStatsCountsRetryingTasksInTheirQueue: two tasks waiting out an
// minute-long retry delay are counted retrying, in the stats and in their
// queue's Retrying column, not its Solving one.
func TestStatsCountsRetryingTasksInTheirQueue(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	failed := make(chan string, 4)
	b.startWorker(t, WorkerConfig{Threads: 2, Policy: retry.Policy{InitialInterval: time.Minute, MaxInterval: time.Minute, NoJitter: true},
		Solver: solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
			failed <- req.Params["sitekey"]
			return solver.Answer{}, &solver.Error{Code: "ERROR_CAPTCHA_UNSOLVABLE", Class: retry.Transient, Op: "res.php"}
		})})
	_, err := b.client.SubmitAll(ctx, []Task{turnstileTask("rt1"), turnstileTask("rt2")})
	require.NoError(t, err)
	<-failed
	<-failed
	var st Stats
	require.Eventually(t, func() bool {
		st, err = b.client.Stats(ctx, time.Hour)
		require.NoError(t, err)
		return st.Retrying == 2
	}, 10*time.Second, 10*time.Millisecond, "the retries were never counted")
	require.Zero(t, st.Solving)
	for _, q := range st.Queues {
		if q.Lane == LaneFast && q.Priority == wire.PriorityNormal {
			require.Equal(t, 2, q.Retrying, "%+v", q)
			require.Zero(t, q.Solving, "%+v", q)
		} else {
			require.Zero(t, q.Retrying+q.Solving, "%+v", q)
		}
	}
}
