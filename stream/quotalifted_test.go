package stream

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/internal/dialect/classic"
	"github.com/captchaq/captchaq/internal/logbuf"
	"github.com/captchaq/captchaq/stream/internal/dispatcher"
)

// An operator removes the quota they set (`captchaq init --plan-threads
// 0`) while the server follows the service's plan: the workers, which the
// quota bounded instead of their plan window, must not be bounded by
// nothing but their threads, and the plan goes back to the service's
// reading (docs/time-to-token.md). Here a worker of 20 threads on an
// account of 6, started under the operator's quota of 4, holds it; the
// quota is removed, one task runs (the worker's gate finds the quota
// gone), the server sets the service's quota of 6 from the worker's
// reading, the worker holds it, and a burst of 60 follows: no capacity
// refusal in it, each task paid once.
func TestAQuotaRemovedLeavesTheWorkerBoundedByItsPlan(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	require.NoError(t, SetPlan(ctx, b.nc, b.top, 4))
	var followed logbuf.Buffer
	followLogged(t, b, &followed)
	api := toldAPI(6, "")
	var logs logbuf.Buffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the plan at the failure: %s\nthe follower's log:\n%s\nthe worker's log:\n%s", planState(b), followed.String(), logs.String())
		}
	})
	b.startWorker(t, WorkerConfig{Name: "w1", NewSolver: newSolverOf(t, api), Threads: 20, ShareTimingsEvery: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	burstSolved(t, b, api, pagesBurst("held", 8))
	require.Zero(t, api.Stats().Codes[classic.CodeZeroBalance])
	require.LessOrEqual(t, api.Stats().MaxConcurrent, 4, "the operator's quota holds")

	require.NoError(t, SetPlan(ctx, b.nc, b.top, 0))
	solvedEach(t, b, pagesBurst("lift", 1)) // the worker's gate finds the quota gone
	handed := assert.Eventually(t, func() bool { return planHeld(t, b, dispatcher.Plan{Threads: 6, FromService: true}) },
		5*time.Second, 5*time.Millisecond, "the plan handed back to the service's reading")
	// The worker holds the service's quota before the burst: one that
	// switches to it with captchas of its own in flight holds them beside
	// the quota's threads until they end (Admin.FollowServicePlan), and
	// the service may refuse a few meanwhile.
	assert.Eventually(t, func() bool {
		return strings.Contains(logs.String(), "holding the plan-wide quota set from the plan the service told")
	},
		5*time.Second, 5*time.Millisecond, "the worker holds the service's quota")
	before := api.Stats().Codes[classic.CodeZeroBalance]
	solvedEach(t, b, pagesBurst("lifted", 60))
	st := api.Stats()
	t.Logf("accepted %d, refused %d in the burst (%d before it), most at once %d; quota %+v, handed back before the burst: %v",
		st.Submitted, st.Codes[classic.CodeZeroBalance]-before, before, st.MaxConcurrent, readPlan(t, b), handed)
	require.Equal(t, 69, st.Submitted, "each task paid once")
	for k, n := range st.PerTask {
		require.Equal(t, 1, n, "task %s paid once", k)
	}
	assert.Zero(t, st.Codes[classic.CodeZeroBalance]-before, "the account of 6 was sent more than its plan")
	assert.LessOrEqual(t, st.MaxConcurrent, 6)
}

// solvedEach submits tasks and waits for every one of them solved.
func solvedEach(t *testing.T, b *bundle, tasks []Task) {
	t.Helper()
	ctx := testContext(t)
	rs, err := b.client.SubmitAll(ctx, tasks)
	require.NoError(t, err)
	require.NoError(t, b.client.WaitAll(ctx, rs, func(o Outcome, err error) {
		assert.NoError(t, err)
		assert.Equal(t, StatusSolved, o.Status)
	}))
}
