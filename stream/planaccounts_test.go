package stream

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/internal/dialect/classic"
	"github.com/captchaq/captchaq/internal/logbuf"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream/internal/dispatcher"
	"github.com/captchaq/captchaq/stream/internal/pool"
)

// Two accounts' keys, each of fakeapi.KeyLength characters.
const (
	keyA = "aaaaaaaaaaaaaaaa0123456789abcdef"
	keyB = "bbbbbbbbbbbbbbbb0123456789abcdef"
)

// accountSolver builds clients of an emulated CaptchaAI account of
// threads whose only key is key, as newSolverOf does.
func accountSolver(t *testing.T, key string, threads int) (*fakeapi.Server, func(bool) (*solver.Client, error)) {
	api := fakeapi.New(fakeapi.Config{Keys: []string{key}, Threads: threads, BurstLimit: 1 << 20,
		SolveTime: map[string]fakeapi.Range{solver.KindTurnstile: {Min: 100 * time.Millisecond, Median: 200 * time.Millisecond, Max: 400 * time.Millisecond}}})
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	return api, func(learnPlan bool) (*solver.Client, error) {
		return solver.NewClient(solver.Config{BaseURL: srv.URL, APIKey: key, MinSubmitInterval: -1, SubmitBurst: -1,
			Timing: toldTiming, LearnPlan: learnPlan, PlanFromService: true})
	}
}

// A pool whose workers are on two accounts (two keys, plans of 6 and 10
// threads) gets no plan-wide quota from the service: one account's plan
// bounds nothing of the other's. Each worker holds its own account's plan
// (its share of it among the workers on that account), so neither
// account is sent more than its plan: not one capacity refusal at
// either, each task paid once. Before, the quota was whichever account
// read last: 10, here (B's worker starts last), shared with A's worker,
// which sent A more than its 6 and was refused for it.
func TestTwoAccountsSetNoServiceQuota(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	followServicePlan(t, b)
	apiA, solverA := accountSolver(t, keyA, 6)
	apiB, solverB := accountSolver(t, keyB, 10)
	wa := b.startWorker(t, WorkerConfig{Name: "wa", NewSolver: solverA, Threads: 20})
	wb := b.startWorker(t, WorkerConfig{Name: "wb", NewSolver: solverB, Threads: 2})
	ctx := testContext(t)
	tasks := pagesBurst("accounts", 60)
	rs, err := b.client.SubmitAll(ctx, tasks)
	require.NoError(t, err)
	require.NoError(t, b.client.WaitAll(ctx, rs, func(o Outcome, err error) {
		assert.NoError(t, err)
		assert.Equal(t, StatusSolved, o.Status)
	}))
	sa, sb := apiA.Stats(), apiB.Stats()
	t.Logf("account A (6): accepted %d, refused %d, most at once %d; account B (10): accepted %d, refused %d, most at once %d; quota %+v",
		sa.Submitted, sa.Codes[classic.CodeZeroBalance], sa.MaxConcurrent, sb.Submitted, sb.Codes[classic.CodeZeroBalance], sb.MaxConcurrent, readPlan(t, b))
	paidOnceAcross(t, len(tasks), sa, sb)
	assert.Zero(t, sa.Codes[classic.CodeZeroBalance], "account A was sent more than its plan of 6")
	assert.Zero(t, sb.Codes[classic.CodeZeroBalance], "account B was sent more than its plan of 10")
	assert.Zero(t, readPlan(t, b).Threads, "no quota from readings of two accounts")
	assert.Equal(t, 6, sa.MaxConcurrent, "A's worker holds all of A's plan: B's worker, on another account, takes no share of it")
	assert.Positive(t, sb.Submitted, "B's worker took tasks too: it was not held to a quota gone")
	assert.Equal(t, 6, wa.w.SolverClient().PlanToldThreads())
	assert.Equal(t, 10, wb.w.SolverClient().PlanToldThreads())
	ps, err := b.client.Stats(ctx, time.Hour)
	require.NoError(t, err)
	assert.Equal(t, 2, ps.ToldAccounts, "stats say the readings are of two accounts")
	assert.Equal(t, 16, ps.ToldPlan, "the two accounts' plans")
}

// Readings of two accounts, as two workers write them every 5 minutes,
// set no quota and remove the one the service's readings set: before,
// the quota flipped to whichever account read last, each flip purging
// and refilling the plan's threads. Once one account's readings are
// alone again (the other's worker gone), the quota is that account's.
func TestReadingsOfTwoAccountsRemoveTheServiceQuota(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	adm, err := NewAdmin(b.nc, AdminConfig{Topology: b.top})
	require.NoError(t, err)
	var logs logbuf.Buffer
	fctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	require.NoError(t, adm.FollowServicePlan(fctx, slog.New(slog.NewTextHandler(&logs, nil))))
	store, err := OpenTimings(ctx, b.nc, b.top)
	require.NoError(t, err)
	t0 := time.Now()
	read := func(worker, account string, told int, at time.Time) {
		t.Helper()
		require.NoError(t, store.PutPlanWindow(ctx, worker, pool.PlanWindow{Limit: told, Told: told, ToldAt: at, Account: account, At: at}))
	}
	quota := func(want int) {
		t.Helper()
		held := func() bool { return planHeld(t, b, dispatcher.Plan{Threads: want, FromService: true}) }
		if want == 0 {
			held = func() bool { return readPlan(t, b) == dispatcher.Plan{} }
		}
		if !assert.Eventually(t, held, 10*time.Second, 5*time.Millisecond) {
			t.Fatalf("want quota %d: %s", want, planNow(t, b))
		}
	}
	read("wa", "aaaa", 6, t0)
	quota(6)
	read("wb", "bbbb", 10, t0.Add(time.Second))
	quota(0)
	read("wa", "aaaa", 6, t0.Add(2*time.Second)) // A's next reading: no flip back
	read("wb", "bbbb", 10, t0.Add(3*time.Second))
	quota(0)
	ws, err := store.Windows(ctx, time.Now())
	require.NoError(t, err)
	told, accounts := pool.ServiceReading(ws)
	require.Equal(t, 0, told)
	require.Equal(t, 2, accounts)
	warns := strings.Count(logs.String(), "level=WARN")
	require.Equal(t, 1, warns, "said once while the readings are of two accounts: %s", logs.String())
	require.Contains(t, logs.String(), "accounts=2")
	require.NotContains(t, logs.String(), "aaaa", "no account's fingerprint in the log")
	// wb gone (its window stale): A's readings alone set A's plan.
	read("wb", "bbbb", 10, t0.Add(-time.Hour))
	read("wa", "aaaa", 6, time.Now())
	quota(6)
}

// paidOnceAcross asks that tasks captchas were paid, each task once, at
// the accounts whose bills are sts.
func paidOnceAcross(t *testing.T, tasks int, sts ...fakeapi.Stats) {
	t.Helper()
	paid := 0
	for _, st := range sts {
		paid += st.Submitted
		for k, n := range st.PerTask {
			require.Equal(t, 1, n, "task %s paid once", k)
		}
	}
	require.Equal(t, tasks, paid, "each task paid once")
}
