package stream

import (
	"context"
	"fmt"
	"maps"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
)

// A worker whose learned plan window is small does not take more tasks
// than the window admits: the rest stay in the stream for a worker with
// room, instead of queueing behind one thread while the other worker has
// nothing to fetch (a burst's untold tail). Worker A's service has one
// thread and its window learned 1; worker B's has ten. B starts once A
// is busy, and solves most of the burst.
func TestSmallWindowLeavesTasksForAWorkerWithRoom(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	solve := map[string]fakeapi.Range{solver.KindTurnstile: fixed(400 * time.Millisecond)}
	apiA := fakeapi.New(fakeapi.Config{Threads: 1, BurstLimit: 1 << 20, SolveTime: solve})
	apiB := fakeapi.New(fakeapi.Config{Threads: 10, BurstLimit: 1 << 20, SolveTime: solve})
	srvA, srvB := httptest.NewServer(apiA), httptest.NewServer(apiB)
	t.Cleanup(srvA.Close)
	t.Cleanup(srvB.Close)
	client := func(url string) *solver.Client {
		sc, err := solver.NewClient(solver.Config{BaseURL: url, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1,
			LearnPlan: true, Timing: solver.Timing{Scale: 0.01}})
		require.NoError(t, err)
		return sc
	}
	scA, scB := client(srvA.URL), client(srvB.URL)

	// A learns its window: two captchas at once on one thread, the second
	// refused.
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			_, _ = scA.Solve(ctx, solver.Request{Method: "turnstile",
				Params: map[string]string{"sitekey": "0x4AAAAAAAB", "pageurl": fmt.Sprintf("https://warm.example/%d", i)}})
		})
	}
	wg.Wait()
	require.Equal(t, 1, scA.PlanWindow(), "A learned a window of one thread")
	warm := apiA.Stats().Submitted

	b.startWorker(t, WorkerConfig{Name: "small", Solver: scA, Threads: 8})
	tasks := make([]Task, 8)
	for i := range tasks {
		tasks[i] = turnstileTask(fmt.Sprintf("burst-%d", i))
		tasks[i].Params["pageurl"] = fmt.Sprintf("https://shop.example/burst/%d", i)
	}
	receipts, err := b.client.SubmitAll(ctx, tasks)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return apiA.Stats().Submitted > warm }, 10*time.Second, 5*time.Millisecond,
		"A submits the burst's first task")
	b.startWorker(t, WorkerConfig{Name: "roomy", Solver: scB, Threads: 8})

	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	solved := 0
	require.NoError(t, b.client.WaitAll(wctx, receipts, func(o Outcome, err error) {
		require.NoError(t, err)
		solved++
	}))
	require.Equal(t, len(tasks), solved)

	stA, stB := apiA.Stats(), apiB.Stats()
	t.Logf("A paid %d of the burst, B %d", stA.Submitted-warm, stB.Submitted)
	require.GreaterOrEqual(t, stB.Submitted, len(tasks)/2, "the worker with room solves most of the burst")
	require.Equal(t, len(tasks), stA.Submitted-warm+stB.Submitted, "each task paid once")
	paid := maps.Clone(stA.PerTask)
	for k, n := range stB.PerTask {
		paid[k] += n
	}
	for k, n := range paid {
		require.Equal(t, 1, n, "task %s paid once", k)
	}
}
