package stream

import (
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
)

// A worker built from NewSolver is told to learn the plan's window only
// where no plan-wide quota bounds it, and shares what its client learned
// with the pool (TimingsBucket) when it stops: what cmd/captchaq's worker
// did for itself, every worker now does.
func TestWorkerComposesPlanCheckAndSharing(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	srv := httptest.NewServer(fakeapi.New(fakeapi.Config{TimeScale: 0.001, BurstLimit: 1 << 20}))
	t.Cleanup(srv.Close)
	var learn []bool
	newSolver := func(learnPlan bool) (*solver.Client, error) {
		learn = append(learn, learnPlan)
		return solver.NewClient(solver.Config{BaseURL: srv.URL, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1,
			Timing: solver.Timing{Scale: 0.001}, LearnPlan: learnPlan})
	}

	rw := b.startWorker(t, WorkerConfig{NewSolver: newSolver})
	require.Equal(t, []bool{true}, learn, "no plan-wide quota: the client learns the plan's window")
	require.NotNil(t, rw.w.SolverClient())
	tasks := make([]Task, 8)
	for i := range tasks {
		tasks[i] = turnstileTask(fmt.Sprintf("learn-%d", i))
	}
	rs, err := b.client.SubmitAll(ctx, tasks)
	require.NoError(t, err)
	require.NoError(t, b.client.WaitAll(ctx, rs, func(_ Outcome, err error) { require.NoError(t, err) }))
	rw.stop()
	require.NoError(t, <-rw.done)
	rw.done <- nil // for the test's cleanup
	store, err := OpenTimings(ctx, b.nc, b.top)
	require.NoError(t, err)
	held, err := store.Load(ctx)
	require.NoError(t, err)
	require.Contains(t, held, solver.KindTurnstile, "the worker shared what its client learned")

	require.NoError(t, SetPlan(ctx, b.nc, b.top, 2))
	_, err = NewWorker(ctx, b.nc, WorkerConfig{NewSolver: newSolver, Topology: b.top, IdleCheck: 50 * time.Millisecond})
	require.NoError(t, err)
	require.Equal(t, []bool{true, false}, learn, "a plan-wide quota bounds the threads: nothing to learn")
}
