package provider_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/provider"
	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/streamtest"
)

// ledger is a spend ledger of env's pool on a connection of its own, as
// each worker process has.
func ledger(t *testing.T, env *streamtest.Env) *stream.Ledger {
	l, err := stream.OpenLedger(t.Context(), env.Connect(), env.Topology)
	require.NoError(t, err)
	return l
}

// TestBudgetExceededEndsDeadUnpaid: a producer whose cap of the day is
// two solves' price on the per-solve provider: its first two tasks are
// solved, the third ends dead with BUDGET_EXCEEDED and the provider is
// not asked for it (its bill: two captchas); another producer's task is
// solved. A worker started afterwards (a new Set, a new connection,
// nothing in memory) still refuses the capped producer's task unpaid: the
// spend is the pool's, read from the bucket.
func TestBudgetExceededEndsDeadUnpaid(t *testing.T) {
	t.Parallel()
	main := perSolve(t, "main", provider.Primary, 1, 5*time.Millisecond)
	env := streamtest.Start(t, streamtest.WithWorkers(0))
	caps := map[string]float64{"streamtest-producer": 2.5 * spareBilling.Per1000["userrecaptcha"] / 1000}
	set, err := provider.New(provider.Config{Members: []provider.Member{main.member}, Ledger: ledger(t, env), ProducerBudgetsPerDay: caps})
	require.NoError(t, err)
	env.StartWorker(stream.WorkerConfig{Solver: set, Threads: threads})

	var outs []stream.Outcome
	for i := range 3 { // one at a time: a cap holds for the tasks it sees paid
		id := submit(t, env.Client, "crawler", i, 1)[0]
		o, err := env.Client.Wait(t.Context(), id)
		require.Equal(t, id, o.ID, "task %s ends: %v", id, err)
		outs = append(outs, o)
	}
	for _, o := range outs[:2] {
		require.Equal(t, stream.StatusSolved, o.Status, "%s: %s %s", o.ID, o.Error, o.Detail)
	}
	dead := outs[2]
	require.Equal(t, stream.StatusDead, dead.Status)
	require.Equal(t, provider.CodeBudgetExceeded, dead.Error, dead.Detail)
	t.Logf("dead: %s", dead.Detail)
	bill := main.api.Stats()
	require.Equal(t, 2, bill.Submitted, "the task past its budget was not paid")
	require.Equal(t, 2, bill.InCalls, "nor sent")

	checkout, err := stream.NewClient(t.Context(), env.Connect(), stream.ClientConfig{Topology: env.Topology, Name: "checkout", Now: env.Now})
	require.NoError(t, err)
	o := waitAll(t, env.Client, submit(t, checkout, "checkout", 10, 1))[0]
	require.Equal(t, stream.StatusSolved, o.Status, "another producer: %s %s", o.Error, o.Detail)

	restarted, err := provider.New(provider.Config{Members: []provider.Member{ownClient(t, main)}, Ledger: ledger(t, env), ProducerBudgetsPerDay: caps})
	require.NoError(t, err)
	_, err = restarted.Solve(t.Context(), solver.Request{Method: "userrecaptcha", Params: taskParams(20), Producer: "streamtest-producer"})
	require.Equal(t, provider.CodeBudgetExceeded, solver.CodeOf(err), "%v", err)
	require.Equal(t, 3, main.api.Stats().Submitted, "two of the capped producer, one of checkout")

	st, err := env.Client.Stats(t.Context(), 0)
	require.NoError(t, err)
	spend := map[string]float64{}
	for _, r := range st.Spend {
		spend[r.Producer] += r.Cost
	}
	require.Equal(t, cents(main.api.Stats().Spent), cents(spend["streamtest-producer"]+spend["checkout"]), "stats' spend is the bill")
	// stats says so: the task refused by a budget is dead under reason
	// permanent, and counted on a line of its own.
	require.Equal(t, 1, st.ByReason["permanent"])
	require.Equal(t, 1, st.DeadOverBudget, "the task past its budget")
}

// TestProviderBudgetPassesOver: a per-solve primary capped at two
// solves' price a day: the third task goes to the fallback, as if the
// primary were out; with the fallback capped too, the fourth ends
// BUDGET_EXCEEDED, unpaid anywhere.
func TestProviderBudgetPassesOver(t *testing.T) {
	t.Parallel()
	price := spareBilling.Per1000["userrecaptcha"] / 1000
	b := startBed(t, 5*time.Millisecond, 5*time.Millisecond, bedPerSolvePrimary(), bedNoWorker(), bedLedger(), bedMembers(func(b *bed) {
		b.plan.member.Entry.BudgetPerDay = 2.5 * price
		b.spare.member.Entry.BudgetPerDay = 1.5 * price
	}))
	main, spare, set := b.plan, b.spare, b.set
	var on []string
	for i := range 3 {
		ans, err := set.Solve(t.Context(), solver.Request{Method: "userrecaptcha", Params: taskParams(i), Producer: "p"})
		require.NoError(t, err)
		on = append(on, ans.Provider)
	}
	require.Equal(t, []string{"main", "main", "spare"}, on)
	_, err := set.Solve(t.Context(), solver.Request{Method: "userrecaptcha", Params: taskParams(3), Producer: "p"})
	require.Equal(t, provider.CodeBudgetExceeded, solver.CodeOf(err), "%v", err)
	require.Equal(t, 2, main.api.Stats().Submitted)
	require.Equal(t, 1, spare.api.Stats().Submitted)
}

// TestBudgetsInTheFile: the caps are read from the providers file, and
// each one out of range is refused naming its entry or producer.
func TestBudgetsInTheFile(t *testing.T) {
	t.Parallel()
	plan := `{"name": "plan", "dialect": "classic", "base_url": "https://ocr.captchaai.com", "key_env": "PLAN_KEY", "billing": {"threads": 5}, "role": "primary"}`
	spare := func(budget string) string {
		return `{"name": "spare", "dialect": "classic", "base_url": "https://2captcha.com", "key_env": "K", "methods": ["base64"],
		"billing": {"per_1000": {"base64": 1}}, "role": "fallback", "budget_per_day": ` + budget + `}`
	}
	f, err := provider.Parse([]byte(`{"providers": [` + plan + `, ` + spare("5") + `], "producer_budgets_per_day": {"crawler": 1.5, "*": 10}}`))
	require.NoError(t, err)
	require.Equal(t, 5.0, f.Providers[1].BudgetPerDay)
	require.Equal(t, map[string]float64{"crawler": 1.5, "*": 10}, f.ProducerBudgetsPerDay)

	for _, tc := range []struct{ file, want string }{
		{`{"providers": [` + plan + `, ` + spare("-1") + `]}`, `providers[1] (spare): budget_per_day -1: want a cap of 0 (none) or more`},
		{`{"providers": [` + plan + `, ` + spare(`"5"`) + `]}`, `providers[1] (spare): json: cannot unmarshal string`},
		{`{"providers": [` + plan + `], "producer_budgets_per_day": {"crawler": -2}}`, `producer_budgets_per_day["crawler"] -2: want a cap of 0 (none) or more`},
		{`{"providers": [` + plan + `], "producer_budgets_per_day": {"": 2}}`, `producer_budgets_per_day[""]: a producer's name`},
		{`{"providers": [` + plan + `], "producer_budgets": {"crawler": 2}}`, `unknown field "producer_budgets"`},
	} {
		_, err := provider.Parse([]byte(tc.file))
		require.ErrorContains(t, err, tc.want)
	}
}
