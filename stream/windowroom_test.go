package stream

import (
	"context"
	"fmt"
	"maps"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
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
	scA, scB := learningClient(t, apiA), learningClient(t, apiB)

	learnOneThread(ctx, t, scA)
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

// Forged task messages end without a solve: their deliveries give the
// room they claimed in a learning worker's plan window back the moment
// they end, so a flood of them under one id does not hold a small window
// (here one thread) for the innocent task behind them. A claim that
// outlived its delivery (one lapsing after 2 s) would hold the window a
// lapse per forged copy: about 100 s behind these 50.
func TestForgedDeliveriesGiveTheirWindowRoomBack(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	api := fakeapi.New(fakeapi.Config{Threads: 1, BurstLimit: 1 << 20,
		SolveTime: map[string]fakeapi.Range{solver.KindTurnstile: fixed(200 * time.Millisecond)}})
	sc := learningClient(t, api)
	learnOneThread(ctx, t, sc)
	warm := api.Stats().Submitted

	const flood = 50
	js, err := jetstream.New(b.nc)
	require.NoError(t, err)
	for i := range flood {
		_, err := js.PublishMsg(ctx, forgedMsg("flood-1", i))
		require.NoError(t, err)
	}
	r, err := b.client.Submit(ctx, turnstileTask("innocent-1"))
	require.NoError(t, err)
	start := time.Now()
	b.startWorker(t, WorkerConfig{Name: "small", Solver: sc, Threads: 4})
	wctx, cancel := context.WithTimeout(ctx, floodBound)
	defer cancel()
	out, err := b.client.Wait(wctx, r.ID)
	require.NoError(t, err, "the innocent task's outcome within %s behind %d forged messages", floodBound, flood)
	require.Equal(t, StatusSolved, out.Status)
	t.Logf("innocent task solved %s after the worker started", time.Since(start).Round(time.Millisecond))
	require.Equal(t, 1, api.Stats().Submitted-warm, "only the innocent task is paid for")
}

// learnOneThread has sc, a learning client of a service with one thread,
// learn a window of one: two captchas at once, the second refused.
func learnOneThread(ctx context.Context, t *testing.T, sc *solver.Client) {
	t.Helper()
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			_, _ = sc.Solve(ctx, solver.Request{Method: "turnstile",
				Params: map[string]string{"sitekey": "0x4AAAAAAAB", "pageurl": fmt.Sprintf("https://warm.example/%d", i)}})
		})
	}
	wg.Wait()
	require.Equal(t, 1, sc.PlanWindow(), "a window of one thread learned")
}

// learningClient is a client of api, served over HTTP until the test ends,
// that learns its plan window (Config.LearnPlan), at time scale 0.01 and
// without in.php spacing.
func learningClient(t *testing.T, api *fakeapi.Server) *solver.Client {
	t.Helper()
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	sc, err := solver.NewClient(solver.Config{BaseURL: srv.URL, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1,
		LearnPlan: true, Timing: solver.Timing{Scale: 0.01}})
	require.NoError(t, err)
	return sc
}
