package stream

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/internal/dialect/classic"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream/internal/dispatcher"
	"github.com/captchaq/captchaq/stream/internal/pool"
)

// A worker on a second account whose clock runs 3 minutes ahead of the
// server's is still a worker on a second account: readings of two
// accounts set no quota. Its window, dated beyond the server's clock by
// more than WindowFresh, is no reading to follow (a false one could pin
// the quota), but it must not make the readings look like one account's:
// the quota set from B's plan of 10 would then bound A's workers too,
// and A's account, of a plan of 6, be sent 10.
func TestAWorkerAheadOfTheServersClockStillCountsAsAnAccount(t *testing.T) {
	t.Parallel()
	b, store := followedStore(t, Topology{})
	ctx := testContext(t)
	now := time.Now()
	read := func(worker, account string, told int, at time.Time) {
		t.Helper()
		assert.NoError(t, store.PutPlanWindow(ctx, worker, pool.PlanWindow{Limit: told, Told: told, ToldAt: at, Account: account, At: at}))
	}
	read("wb", "bbbb", 10, now)
	if !assert.Eventually(t, func() bool { return planHeld(t, b, dispatcher.Plan{Threads: 10, FromService: true}) }, 10*time.Second, 5*time.Millisecond) {
		t.Fatalf("B's reading alone sets no quota: %s", planNow(t, b))
	}
	ahead := 3 * time.Minute
	read("wa", "aaaa", 6, now.Add(ahead)) // A's worker, its clock ahead
	read("wb", "bbbb", 10, time.Now())    // B's next share
	read("wa", "aaaa", 6, time.Now().Add(ahead))
	if !assert.Eventually(t, func() bool { return readPlan(t, b) == dispatcher.Plan{} }, 3*time.Second, 5*time.Millisecond) {
		ws, _ := store.Windows(ctx, time.Now())
		t.Fatalf("readings of two accounts (A's worker 3 min ahead) left the quota %s; windows stored %v", planNow(t, b), names(ws))
	}
}

func names(ws map[string]pool.PlanWindow) []string {
	var out []string
	for n := range ws {
		out = append(out, n)
	}
	return out
}

// The same, end to end: A's worker (plan of 6), its clock 3 minutes
// ahead, beside B's (plan of 10). Every task is paid once, and A's
// account is sent no more than its plan: no capacity refusal.
func TestAWorkerAheadOnAnotherAccountIsNotHeldToItsQuota(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	followServicePlan(t, b)
	ahead := func() time.Time { return time.Now().Add(3 * time.Minute) }
	apiA := fakeapi.New(fakeapi.Config{Keys: []string{keyA}, Threads: 6, BurstLimit: 1 << 20,
		SolveTime: map[string]fakeapi.Range{solver.KindTurnstile: {Min: 100 * time.Millisecond, Median: 200 * time.Millisecond, Max: 400 * time.Millisecond}}})
	srvA := httptest.NewServer(apiA)
	t.Cleanup(srvA.Close)
	solverA := func(learnPlan bool) (*solver.Client, error) {
		return solver.NewClient(solver.Config{BaseURL: srvA.URL, APIKey: keyA, MinSubmitInterval: -1, SubmitBurst: -1, Now: ahead,
			Timing: solver.Timing{Scale: 0.01}, LearnPlan: learnPlan, PlanFromService: true})
	}
	apiB, solverB := accountSolver(t, keyB, 10)
	b.startWorker(t, WorkerConfig{Name: "wb", NewSolver: solverB, Threads: 2})
	require.Eventually(t, func() bool { return readPlan(t, b).Threads == 10 }, 10*time.Second, 5*time.Millisecond, "B's quota")
	b.startWorker(t, WorkerConfig{Name: "wa", NewSolver: solverA, Threads: 20, Now: ahead})
	ctx := testContext(t)
	tasks := pagesBurst("ahead", 60)
	rs, err := b.client.SubmitAll(ctx, tasks)
	require.NoError(t, err)
	require.NoError(t, b.client.WaitAll(ctx, rs, func(o Outcome, err error) {
		assert.NoError(t, err)
		assert.Equal(t, StatusSolved, o.Status)
	}))
	sa, sb := apiA.Stats(), apiB.Stats()
	t.Logf("A (6, clock ahead): accepted %d, refused %d, most at once %d; B (10): accepted %d, refused %d, most at once %d; quota %+v",
		sa.Submitted, sa.Codes[classic.CodeZeroBalance], sa.MaxConcurrent, sb.Submitted, sb.Codes[classic.CodeZeroBalance], sb.MaxConcurrent, readPlan(t, b))
	paidOnceAcross(t, len(tasks), sa, sb)
	assert.Zero(t, sa.Codes[classic.CodeZeroBalance], "A's account was sent more than its plan of 6")
	assert.LessOrEqual(t, sa.MaxConcurrent, 6)
	assert.Zero(t, readPlan(t, b).Threads, "no quota from readings of two accounts")
}
