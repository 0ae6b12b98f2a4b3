package stream

import (
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/internal/dialect/classic"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
)

// toldBurst runs a burst of n tasks through one worker of 20 threads whose
// client is built as `captchaq worker` builds it (NewSolver), against api,
// and returns the worker's client once every task ended solved.
func toldBurst(t *testing.T, b *bundle, api *fakeapi.Server, n int) *solver.Client {
	t.Helper()
	newSolver := newSolverOf(t, api)
	rw := b.startWorker(t, WorkerConfig{NewSolver: newSolver, Threads: 20})
	burstSolved(t, b, api, pagesBurst("told", n))
	return rw.w.SolverClient()
}

// newSolverOf builds clients of api, served over HTTP until the test
// ends, as `captchaq worker --plan-from-service` builds them
// (WorkerConfig.NewSolver), at time scale 0.01 and without in.php spacing.
func newSolverOf(t *testing.T, api *fakeapi.Server) func(bool) (*solver.Client, error) {
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	return func(learnPlan bool) (*solver.Client, error) {
		return solver.NewClient(solver.Config{BaseURL: srv.URL, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1,
			Timing: toldTiming, LearnPlan: learnPlan, PlanFromService: true})
	}
}

// toldTiming is the timing of the clients these tests build: polls at a
// hundredth of the real ones, and a local deadline no captcha of toldAPI
// reaches however loaded the machine: a captcha held at the emulator
// (fakeapi.Server.Hold) until the pool has its plan at the service, or
// polled late by a starved test process, past a deadline scaled to 1.2 s
// would be given up and submitted again, paid twice.
var toldTiming = solver.Timing{Scale: 0.01, MaxWait: map[string]time.Duration{solver.KindTurnstile: time.Hour}, MaxCalls: 10000}

// pagesBurst is n Turnstile tasks, each of its own page, so that the
// emulator's bill counts each task apart.
func pagesBurst(name string, n int) []Task {
	tasks := make([]Task, n)
	for i := range tasks {
		tasks[i] = turnstileTask(fmt.Sprintf("%s-%d", name, i))
		tasks[i].Params["pageurl"] = fmt.Sprintf("https://shop.example/%s/%d", name, i)
	}
	return tasks
}

func toldAPI(threads int, threadsInfo string) *fakeapi.Server {
	return fakeapi.New(fakeapi.Config{Threads: threads, BurstLimit: 1 << 20, ThreadsInfoCode: threadsInfo,
		SolveTime: map[string]fakeapi.Range{solver.KindTurnstile: {Min: 100 * time.Millisecond, Median: 200 * time.Millisecond, Max: 400 * time.Millisecond}}})
}

// With no plan told by the operator, a worker on CaptchaAI holds the
// plan the service tells (threadsinfo) from the first task: never more
// captchas at the service than its threads, so not one capacity refusal
// in a burst five times the plan, and nothing learned from refusals.
func TestServiceToldPlanHoldsFromTheFirstTask(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	api := toldAPI(6, "")
	sc := toldBurst(t, b, api, 30)
	st := api.Stats()
	require.Zero(t, st.Codes[classic.CodeZeroBalance], "no capacity refusal")
	require.LessOrEqual(t, st.MaxConcurrent, 6, "never more than the told plan at the service")
	require.True(t, sc.PlanTold(), "the plan is the service's")
	require.Equal(t, 6, sc.PlanWindow())
	ps, err := b.client.Stats(testContext(t), time.Hour)
	require.NoError(t, err)
	require.Equal(t, 6, ps.ToldPlan, "stats say the plan the service told")
	require.Zero(t, ps.LearnedPlan, "and nothing learned")
}

// A service that tells nothing (an error code, or a reply that is no
// threads) leaves the worker learning the plan from refusals.
func TestServiceTellingNothingLeavesLearningOn(t *testing.T) {
	t.Parallel()
	for _, reply := range []string{classic.CodeBadParameters, "OK|6"} {
		t.Run(reply, func(t *testing.T) {
			t.Parallel()
			b := setup(t, Topology{})
			api := toldAPI(3, reply)
			sc := toldBurst(t, b, api, 30)
			require.False(t, sc.PlanTold())
			require.True(t, sc.PlanReached(), "the window learned from refusals")
			require.Positive(t, api.Stats().Codes[classic.CodeZeroBalance], "learning finds the plan by refusals")
			ps, err := b.client.Stats(testContext(t), time.Hour)
			require.NoError(t, err)
			require.Zero(t, ps.ToldPlan)
		})
	}
}

// A plan the operator told (SetPlan) wins over the service's: the worker
// holds the operator's quota. Its client reads the service's plan all the
// same, bounded by the quota instead, so that removing the operator's
// quota hands the plan back to it (TestAQuotaRemovedLeavesTheWorkerBoundedByItsPlan).
func TestOperatorPlanWinsOverTheService(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	require.NoError(t, SetPlan(testContext(t), b.nc, b.top, 2))
	api := toldAPI(6, "")
	sc := toldBurst(t, b, api, 12)
	require.Equal(t, 6, sc.PlanToldThreads(), "the client read the service's plan")
	require.LessOrEqual(t, api.Stats().MaxConcurrent, 2, "the operator's quota holds")
}

// Workers on one account each read the whole plan: they split it, so that
// together they hold the plan, not the plan each, from before the burst
// (each follows the others' window reports as they land): not one
// capacity refusal.
// Both ways of giving a worker its client: built by the worker
// (NewSolver, as `captchaq worker` does) or given (Solver, as the bench
// does).
func TestWorkersSplitThePlanTheServiceTells(t *testing.T) {
	t.Parallel()
	for _, given := range []bool{false, true} {
		t.Run(fmt.Sprintf("given=%v", given), func(t *testing.T) {
			t.Parallel()
			workersSplitThePlan(t, given)
		})
	}
}

func workersSplitThePlan(t *testing.T, given bool) {
	b := setup(t, Topology{})
	ctx := testContext(t)
	api := toldAPI(6, "")
	newSolver := newSolverOf(t, api)
	var c1, c2 *solver.Client
	if given {
		var err error
		c1, err = newSolver(true)
		require.NoError(t, err)
		c2, err = newSolver(true)
		require.NoError(t, err)
		b.startWorker(t, WorkerConfig{Name: "w1", Solver: c1, Threads: 20})
		b.startWorker(t, WorkerConfig{Name: "w2", Solver: c2, Threads: 20})
	} else {
		w1 := b.startWorker(t, WorkerConfig{Name: "w1", NewSolver: newSolver, Threads: 20})
		w2 := b.startWorker(t, WorkerConfig{Name: "w2", NewSolver: newSolver, Threads: 20})
		c1, c2 = w1.w.SolverClient(), w2.w.SolverClient()
	}
	require.Eventually(t, func() bool { return c1.PlanWindow()+c2.PlanWindow() <= 6 }, 10*time.Second, 10*time.Millisecond,
		"the workers split the told plan")
	burstSolved(t, b, api, pagesBurst("split", 60))
	st := api.Stats()
	require.Zero(t, st.Codes[classic.CodeZeroBalance], "split before the burst: no capacity refusal")
	require.True(t, c1.PlanTold() && c2.PlanTold())
	require.LessOrEqual(t, c1.PlanWindow()+c2.PlanWindow(), 6)
	ps, err := b.client.Stats(ctx, time.Hour)
	require.NoError(t, err)
	require.Equal(t, 6, ps.ToldPlan)
}
