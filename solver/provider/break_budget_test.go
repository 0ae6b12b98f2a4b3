package provider_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/solver/provider"
	"github.com/captchaq/captchaq/stream/streamtest"
)

// cappedSet is a Set of one per-solve provider (2captcha's profile, its
// captchas solved in solve) capped at 2.5 solves' price a day, with the
// pool's ledger; maxWait, if not 0, is how long its client polls a
// captcha before giving up on it (LOCAL_TIMEOUT), unscaled.
func cappedSet(t *testing.T, solve, maxWait time.Duration) (*provider.Set, service, float64) {
	t.Helper()
	main := perSolve(t, "main", provider.Primary, 1, solve)
	price := spareBilling.Per1000["userrecaptcha"] / 1000
	main.member.Entry.BudgetPerDay = 2.5 * price
	if maxWait > 0 {
		cfg := main.cfg
		cfg.Timing.FirstPoll, cfg.Timing.MaxWait = map[string]time.Duration{}, map[string]time.Duration{}
		for _, k := range solver.Kinds() {
			cfg.Timing.FirstPoll[k] = 10 * time.Second // scaled ×0.01: 100 ms
			cfg.Timing.MaxWait[k] = maxWait * 100
		}
		c, err := solver.NewClient(cfg)
		require.NoError(t, err)
		main.member.Client = c
	}
	env := streamtest.Start(t, streamtest.WithWorkers(0))
	set, err := provider.New(provider.Config{Members: []provider.Member{main.member}, Ledger: ledger(t, env)})
	require.NoError(t, err)
	return set, main, price
}

// TestBreakBudgetCountsCaptchasGivenUp: a per-solve provider capped at
// 2.5 solves a day, whose captchas take longer than the worker polls them
// (each attempt ends LOCAL_TIMEOUT and the task is retried): the provider
// bills every captcha it accepted, answered or not (2captcha charges a
// captcha when in.php accepts it, and the emulator with it), so the third
// submission of the day would pass the cap and must end BUDGET_EXCEEDED
// unsent. The ledger counted only captchas whose answer was read: every
// attempt saw a spend of 0 and the bill grew without end.
func TestBreakBudgetCountsCaptchasGivenUp(t *testing.T) {
	t.Parallel()
	set, main, price := cappedSet(t, 5*time.Second, 300*time.Millisecond)
	var codes []string
	for i := range 5 {
		_, err := set.Solve(t.Context(), solver.Request{Method: "userrecaptcha", Params: taskParams(i), Producer: "p"})
		require.Error(t, err)
		codes = append(codes, solver.CodeOf(err))
	}
	bill := main.api.Stats()
	t.Logf("codes %v; bill: %d captchas, %.5f", codes, bill.Submitted, bill.Spent)
	require.Equal(t, []string{solver.CodeTimeout, solver.CodeTimeout, provider.CodeBudgetExceeded,
		provider.CodeBudgetExceeded, provider.CodeBudgetExceeded}, codes)
	require.Equal(t, 2, bill.Submitted, "the cap is 2.5 solves: two captchas billed")
	require.LessOrEqual(t, bill.Spent, 2.5*price)
}

// TestBreakBudgetUnderABurst: 8 tasks at once against a cap of 2.5
// solves a day: each thread read the day's spend before any was paid,
// and all 8 were sent (the docs' "passed by the price of the solves in
// flight": 3.2 times the cap). The bill must stay within the cap: two
// solved, six BUDGET_EXCEEDED unsent.
func TestBreakBudgetUnderABurst(t *testing.T) {
	t.Parallel()
	set, main, price := cappedSet(t, 50*time.Millisecond, 0)
	const n = 8
	codes := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, err := set.Solve(t.Context(), solver.Request{Method: "userrecaptcha", Params: taskParams(i), Producer: "p"})
			codes[i] = solver.CodeOf(err)
		})
	}
	wg.Wait()
	bill := main.api.Stats()
	t.Logf("codes %q; bill: %d captchas, %.5f against a cap of %.5f", codes, bill.Submitted, bill.Spent, 2.5*price)
	exceeded := 0
	for _, c := range codes {
		if c == provider.CodeBudgetExceeded {
			exceeded++
		}
	}
	require.Equal(t, 2, bill.Submitted, "the cap is 2.5 solves")
	require.Equal(t, n-2, exceeded)
	require.Empty(t, bill.Repeated())
}

// TestBudgetGivesBackRefunds: captchas the provider answers
// ERROR_CAPTCHA_UNSOLVABLE are refunded (2captcha: "The captcha price is
// automatically returned to your balance", and the emulator with it):
// four of them leave a cap of 2.5 solves whole, and two tasks are then
// solved within it, the third refused.
func TestBudgetGivesBackRefunds(t *testing.T) {
	t.Parallel()
	set, main, _ := cappedSet(t, 5*time.Millisecond, 0)
	main.api.SetFaults(fakeapi.Faults{Unsolvable: 1})
	for i := range 4 {
		_, err := set.Solve(t.Context(), solver.Request{Method: "userrecaptcha", Params: taskParams(i), Producer: "p"})
		require.Equal(t, "ERROR_CAPTCHA_UNSOLVABLE", solver.CodeOf(err), "%v", err)
	}
	main.api.SetFaults(fakeapi.Faults{})
	for i := range 2 {
		_, err := set.Solve(t.Context(), solver.Request{Method: "userrecaptcha", Params: taskParams(10 + i), Producer: "p"})
		require.NoError(t, err)
	}
	_, err := set.Solve(t.Context(), solver.Request{Method: "userrecaptcha", Params: taskParams(20), Producer: "p"})
	require.Equal(t, provider.CodeBudgetExceeded, solver.CodeOf(err), "%v", err)
	bill := main.api.Stats()
	t.Logf("bill: %d captchas, %d refunded, %.5f", bill.Submitted, bill.Refunded, bill.Spent)
	require.Equal(t, 6, bill.Submitted)
	require.Equal(t, 4, bill.Refunded)
}

// TestBreakBudgetHugeFigures: figures past what the ledger's millionths
// hold in 64 bits. A provider that reports a cost of 1e300 for a solve
// (garbage, but a finite number above 0) took the day's spend past any
// cap: the next task must end BUDGET_EXCEEDED, unsent (the sum wrapped
// below 0, and the cap never held again that day). An operator's cap of
// 1e13 a day ("no real cap") must let tasks through (its millionths
// wrapped below 0 and every task ended BUDGET_EXCEEDED).
func TestBreakBudgetHugeFigures(t *testing.T) {
	t.Parallel()
	p := startCostlyProvider(t, 0.002, map[string]string{taskParams(1)["pageurl"]: `"1e300"`})
	c, err := provider.NewTasksClient(provider.TasksConfig{BaseURL: p.srv.URL, APIKey: "a-key-0123456789", Scale: 0.001})
	require.NoError(t, err)
	env := streamtest.Start(t, streamtest.WithWorkers(0))
	set, err := provider.New(provider.Config{Ledger: ledger(t, env), Members: []provider.Member{{Client: c, Entry: provider.Entry{
		Name: "json", Dialect: provider.Tasks, BaseURL: p.srv.URL, KeyEnv: "K", Methods: []string{"userrecaptcha"},
		Billing: provider.Billing{Per1000: map[string]float64{"userrecaptcha": 2}}, Role: provider.Primary, BudgetPerDay: 1}}}})
	require.NoError(t, err)
	ans, err := set.Solve(t.Context(), solver.Request{Method: "userrecaptcha", Params: taskParams(1), Producer: "p"})
	require.NoError(t, err)
	require.Equal(t, 1e300, ans.Cost)
	_, err = set.Solve(t.Context(), solver.Request{Method: "userrecaptcha", Params: taskParams(2), Producer: "p"})
	created, _ := p.bill()
	t.Logf("second task: %v; the provider created %d", err, created)
	require.Equal(t, provider.CodeBudgetExceeded, solver.CodeOf(err), "%v", err)
	require.Equal(t, 1, created)

	main := perSolve(t, "main", provider.Primary, 1, 5*time.Millisecond)
	main.member.Entry.BudgetPerDay = 1e13
	set, err = provider.New(provider.Config{Members: []provider.Member{main.member}, Ledger: ledger(t, env)})
	require.NoError(t, err)
	_, err = set.Solve(t.Context(), solver.Request{Method: "userrecaptcha", Params: taskParams(3), Producer: "q"})
	require.NoError(t, err, "a cap of 1e13 a day")
	require.Equal(t, 1, main.api.Stats().Submitted)
}

// TestBreakBudgetOnAPlan: a budget_per_day on a thread-plan provider,
// whose solves cost nothing each (the plan is paid by the month), capped
// nothing: every solve passed it, whatever the figure. The file refuses
// it, naming the entry and the field.
func TestBreakBudgetOnAPlan(t *testing.T) {
	t.Parallel()
	_, err := provider.Parse([]byte(`{"providers": [{"name": "plan", "dialect": "classic", "base_url": "https://ocr.captchaai.com",
		"key_env": "PLAN_KEY", "billing": {"threads": 5}, "role": "primary", "budget_per_day": 1}]}`))
	require.ErrorContains(t, err, `providers[0] (plan): budget_per_day 1: a thread plan is paid by the month`)
}

// TestBreakBudgetedFallbackDuringAnOutage: the thread plan (free, never
// over a budget) is out for a moment while the per-solve fallback has
// spent its day's budget. A task arriving then waits for the plan, as it
// would with no fallback at all: it is not ended BUDGET_EXCEEDED, since a
// provider that is only out may take it within every cap once it
// answers. Nothing is paid on the fallback; the task is solved on the plan
// when it returns.
//
// Failed before: the fallback's budget refusal, asked last, was the
// answer: the task ended dead for good (permanent) during a blip of the
// plan.
func TestBreakBudgetedFallbackDuringAnOutage(t *testing.T) {
	t.Parallel()
	// The plan's client on a clock of the test's, moved past its probe
	// schedule's first probe (a second into the outage) once the plan is back.
	var skew atomic.Int64
	var pc *solver.Client
	b := startBed(t, 5*time.Millisecond, 5*time.Millisecond, bedNoWorker(), bedLedger(), bedMembers(func(b *bed) {
		b.spare.member.Entry.BudgetPerDay = 0.5 * spareBilling.Per1000["userrecaptcha"] / 1000 // less than one solve
		cfg := b.plan.cfg
		cfg.Now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
		var err error
		pc, err = solver.NewClient(cfg)
		require.NoError(t, err)
		b.plan.member.Client = pc
	}))
	plan, spare, set := b.plan, b.spare, b.set

	plan.api.SetFaults(fakeapi.Faults{Outage: true})
	// The task's attempts during the outage: the first in.php 500 may
	// have been paid (the plan keeps the task), the next ones find the
	// plan out.
	for i := range 4 {
		_, err := set.Solve(t.Context(), solver.Request{Method: "userrecaptcha", Params: taskParams(1), Producer: "p"})
		t.Logf("attempt %d during the plan's outage: %v", i, err)
		require.Error(t, err)
		require.NotEqual(t, provider.CodeBudgetExceeded, solver.CodeOf(err), "the plan is out, not over a budget: %v", err)
		require.NotEqual(t, retry.Permanent, solver.ClassOf(err), "a task the plan may take once it answers does not end: %v", err)
	}

	plan.api.SetFaults(fakeapi.Faults{})
	skew.Store(int64(2 * time.Second))
	require.True(t, pc.Probe(t.Context()), "the plan answers again") // as a worker's probe schedule does
	ans, err := set.Solve(t.Context(), solver.Request{Method: "userrecaptcha", Params: taskParams(1), Producer: "p"})
	require.NoError(t, err)
	require.Equal(t, "plan", ans.Provider)
	require.Zero(t, spare.api.Stats().InCalls, "the fallback over its budget was not sent anything")
	require.Equal(t, 1, plan.api.Stats().Submitted)
}
