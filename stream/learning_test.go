package stream

import (
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream/internal/pool"
)

// A worker built from NewSolver is told to learn the plan's window, a
// plan-wide quota set or not, and shares what its client learned
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
	require.Equal(t, []bool{true, true}, learn, "under a plan-wide quota too: the quota bounds the client while it is set, the window once it is removed")
}

// Two workers share a kind's timings from its first answers: once the
// pool has seen enough answers of a kind to plan it, both workers' clients
// plan it within about a second, though neither shares periodically for an
// hour and at least one of them saw too few answers of its own.
func TestWorkersShareFirstAnswers(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	srv := httptest.NewServer(fakeapi.New(fakeapi.Config{TimeScale: 0.01, BurstLimit: 1 << 20}))
	t.Cleanup(srv.Close)
	clients := make([]*solver.Client, 2)
	for i := range clients {
		c, err := solver.NewClient(solver.Config{BaseURL: srv.URL, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1,
			Timing: solver.Timing{Scale: 0.01, NoBatch: true}})
		require.NoError(t, err)
		clients[i] = c
		b.startWorker(t, WorkerConfig{Solver: c, Threads: 3, ShareTimingsEvery: time.Hour, Name: fmt.Sprintf("share-%d", i)})
	}
	tasks := make([]Task, 12)
	for i := range tasks {
		tasks[i] = turnstileTask(fmt.Sprintf("first-%d", i))
	}
	rs, err := b.client.SubmitAll(ctx, tasks)
	require.NoError(t, err)
	require.NoError(t, b.client.WaitAll(ctx, rs, func(_ Outcome, err error) { require.NoError(t, err) }))
	solved := time.Now()
	require.Eventually(t, func() bool {
		return clients[0].Knows(solver.KindTurnstile) && clients[1].Knows(solver.KindTurnstile)
	}, 1500*time.Millisecond, 10*time.Millisecond, "a worker still polls turnstile on the fixed schedule: the pool's answers did not reach it")
	t.Logf("both workers plan turnstile %v after the 12th answer", time.Since(solved).Round(time.Millisecond))
}

// The occupancy reports: a worker's pool holds the others' latest
// estimates, not its own, not a report of nothing in flight, and not a
// message it cannot read.
func TestOccupancyReportsReachThePool(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	a, stopA, err := pool.JoinOccupancy(b.connect(t), "a")
	require.NoError(t, err)
	t.Cleanup(stopA)
	other := b.connect(t)
	p, stopB, err := pool.JoinOccupancy(other, "b")
	require.NoError(t, err)
	t.Cleanup(stopB)
	require.NoError(t, other.Flush())
	fromA := solver.Occupancy{V: 2.5, Free: -0.75}
	a.Report(fromA)
	p.Report(solver.Occupancy{V: 7, Free: 1.5}) // its own: not among the others
	require.Eventually(t, func() bool { o := p.Others(); return len(o) == 1 && o[0] == fromA }, 2*time.Second, 5*time.Millisecond)
	for _, bad := range []string{`{`, `{"worker":"c","v":-1}`, `{"worker":"c","v":1e300}`, `{"worker":"c","v":1,"free":-1e300}`, `{"v":3}`} {
		require.NoError(t, other.Publish(OccupancySubject, []byte(bad)))
	}
	a.Report(solver.Occupancy{})
	require.Eventually(t, func() bool { return len(p.Others()) == 0 }, 2*time.Second, 5*time.Millisecond)
	require.Equal(t, []solver.Occupancy{{V: 7, Free: 1.5}}, a.Others(), "a holds b's report")
}
