package stream

import (
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/internal/dialect/classic"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
)

// Two workers on one account, the service telling a plan of 6, one of
// them with its clock 3 minutes off the other's and the broker's (ahead,
// then behind): each holds 3, not one of them the whole plan beside the
// other's share, so the account is never sent more than its 6 and not one
// submission is refused for want of a thread; each task is paid once.
// No server follows the readings: the workers' shares, not a quota,
// bound them.
func TestWorkersOnOneAccountSplitThePlanWhateverTheirClocks(t *testing.T) {
	t.Parallel()
	for _, skew := range []time.Duration{3 * time.Minute, -3 * time.Minute} {
		t.Run(fmt.Sprintf("skew=%v", skew), func(t *testing.T) {
			t.Parallel()
			splitWithSkew(t, skew)
		})
	}
}

func splitWithSkew(t *testing.T, skew time.Duration) {
	b := setup(t, Topology{})
	api := toldAPI(6, "")
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	skewed := func() time.Time { return time.Now().Add(skew) }
	newSolver := func(now func() time.Time) func(bool) (*solver.Client, error) {
		return func(learnPlan bool) (*solver.Client, error) {
			return solver.NewClient(solver.Config{BaseURL: srv.URL, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1,
				Now: now, Timing: toldTiming, LearnPlan: learnPlan, PlanFromService: true})
		}
	}
	w1 := b.startWorker(t, WorkerConfig{Name: "w1", NewSolver: newSolver(time.Now), Threads: 20})
	w2 := b.startWorker(t, WorkerConfig{Name: "w2", NewSolver: newSolver(skewed), Threads: 20, Now: skewed})
	c1, c2 := w1.w.SolverClient(), w2.w.SolverClient()
	require.Eventually(t, func() bool { return c1.PlanTold() && c2.PlanTold() }, 10*time.Second, 5*time.Millisecond, "both read the plan")
	split := assert.Eventually(t, func() bool { return c1.PlanWindow() == 3 && c2.PlanWindow() == 3 }, 5*time.Second, 5*time.Millisecond)
	s1, s2 := c1.PlanWindow(), c2.PlanWindow()
	tasks := pagesBurst("skew", 60)
	solvedEach(t, b, tasks)
	st := api.Stats()
	t.Logf("skew %v: shares w1 %d, w2 %d (after the burst %d, %d); paid %d of %d tasks, refused %d (%s), most at once %d",
		skew, s1, s2, c1.PlanWindow(), c2.PlanWindow(), st.Submitted, len(tasks), st.Codes[classic.CodeZeroBalance], classic.CodeZeroBalance, st.MaxConcurrent)
	assert.True(t, split, "each worker holds 3 of the told 6: w1 %d, w2 %d", s1, s2)
	assert.Zero(t, st.Codes[classic.CodeZeroBalance], "the account was sent more than its plan")
	assert.LessOrEqual(t, st.MaxConcurrent, 6)
	paidOnceAcross(t, len(tasks), st)
}
