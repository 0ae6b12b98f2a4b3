package stream

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/internal/dialect/classic"
	"github.com/captchaq/captchaq/stream/internal/dispatcher"
)

// An operator sets the quota twice in a row (2, then 4) while the server
// follows the service's plan of 6 and two workers of 20 threads run: the
// second stands, and a burst holds at most 4 at the service, with no
// capacity refusal. Before a change kept the threads workers hold
// (topology.EnsurePlan), each change emptied the plan stream while idle
// workers' waiting pulls could hold a thread of the quota of 2, and their
// captchas went beside the 4 new threads: 6 at once in 1 of 24 runs beside
// a CI run, 5 in CI preview 3.
func TestAQuotaSetTwiceQuicklyWhileTheServerFollowsHoldsTheSecond(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	followServicePlan(t, b)
	api := toldAPI(6, "")
	newSolver := newSolverOf(t, api)
	b.startWorker(t, WorkerConfig{Name: "w1", NewSolver: newSolver, Threads: 20, ShareTimingsEvery: 200 * time.Millisecond})
	b.startWorker(t, WorkerConfig{Name: "w2", NewSolver: newSolver, Threads: 20, ShareTimingsEvery: 200 * time.Millisecond})
	require.Eventually(t, func() bool { return planHeld(t, b, dispatcher.Plan{Threads: 6, FromService: true}) }, 10*time.Second, 5*time.Millisecond)
	ctx := testContext(t)
	require.NoError(t, SetPlan(ctx, b.nc, b.top, 2))
	require.NoError(t, SetPlan(ctx, b.nc, b.top, 4))
	burstSolvedAtOnce(t, b, api, pagesBurst("twice", 40), 4)
	st := api.Stats()
	t.Logf("paid %d, refused %d, most at once %d; quota %s", st.Submitted, st.Codes[classic.CodeZeroBalance], st.MaxConcurrent, planNow(t, b))
	assert.True(t, planHeld(t, b, dispatcher.Plan{Threads: 4}), "the second quota stands: %s", planNow(t, b))
	assert.LessOrEqual(t, st.MaxConcurrent, 4, "the quota of 4, no holder of the quota of 2 beside it")
	assert.Zero(t, st.Codes[classic.CodeZeroBalance])
}

// A worker restarted in the middle of a burst, the server following the
// service's plan of 6: the pool never holds more than 6 at the service
// and each task is paid once.
func TestAWorkerRestartedMidBurstKeepsThePoolInThePlan(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	followServicePlan(t, b)
	api := toldAPI(6, "")
	newSolver := newSolverOf(t, api)
	cfg := WorkerConfig{Name: "w1", NewSolver: newSolver, Threads: 20, ShareTimingsEvery: 200 * time.Millisecond}
	w1 := b.startWorker(t, cfg)
	b.startWorker(t, WorkerConfig{Name: "w2", NewSolver: newSolver, Threads: 20, ShareTimingsEvery: 200 * time.Millisecond})
	ctx := testContext(t)
	tasks := pagesBurst("restart", 80)
	rs, err := b.client.SubmitAll(ctx, tasks)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return api.Stats().Submitted >= 25 }, 30*time.Second, 5*time.Millisecond)
	w1.stop()
	<-w1.done
	w1.done <- nil // for the cleanup's wait
	b.startWorker(t, cfg)
	require.NoError(t, b.client.WaitAll(ctx, rs, func(o Outcome, err error) {
		assert.NoError(t, err)
		assert.Equal(t, StatusSolved, o.Status)
	}))
	st := api.Stats()
	t.Logf("paid %d of %d, refused %d, most at once %d; quota %s", st.Submitted, len(tasks), st.Codes[classic.CodeZeroBalance], st.MaxConcurrent, planNow(t, b))
	paidOnceAcross(t, len(tasks), st)
	assert.LessOrEqual(t, st.MaxConcurrent, 6)
	assert.Zero(t, st.Codes[classic.CodeZeroBalance])
}
