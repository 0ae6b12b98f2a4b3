package main

import (
	"strings"
	"testing"
	"text/tabwriter"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream"
)

// TestPrintSpend prints a row per provider and producer and a total per
// provider.
func TestPrintSpend(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	printSpend(tw, stream.Stats{Spend: []stream.SpendStats{
		{Provider: "plan", Producer: "crawler", Solves: 20, PlanSolves: 20},
		{Provider: "spare", Producer: "", Solves: 3, Cost: 0.00897},
		{Provider: "spare", Producer: "checkout", Solves: 10, Cost: 0.0299},
	}, SpendByMethod: []stream.SpendStats{
		{Provider: "plan", Method: "userrecaptcha", Solves: 20, PlanSolves: 20},
		{Provider: "spare", Method: "base64", Solves: 3, Cost: 0.003},
		{Provider: "spare", Method: "userrecaptcha", Solves: 10, Cost: 0.03587},
	}})
	require.NoError(t, tw.Flush())
	out := b.String()
	require.Regexp(t, `plan\s+crawler\s+20\s+20\s+0\n`, out)
	require.Regexp(t, `spare\s+\(unnamed\)\s+3\s+0\s+0\.00897\n`, out)
	require.Regexp(t, `spare\s+total\s+13\s+0\s+0\.03887\n`, out)
	require.Regexp(t, `PROVIDER\s+METHOD\s+SOLVED\s+ON PLAN\s+COST\n`, out)
	require.Regexp(t, `spare\s+base64\s+3\s+0\s+0\.003\n`, out)
	b.Reset()
	printSpend(tw, stream.Stats{})
	require.Empty(t, b.String(), "no table without providers")
}

// TestPrintStatsSaysBudgetExceeded: tasks ended by a budget get a line of
// their own below the reasons, within permanent.
func TestPrintStatsSaysBudgetExceeded(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	printStats(&b, stream.Stats{Dead: 3, ByReason: map[string]int{"permanent": 3}, DeadOverBudget: 2})
	require.Regexp(t, `dead permanent: 3\n\s+of them over a budget \(BUDGET_EXCEEDED\): 2\n`, b.String())
	b.Reset()
	printStats(&b, stream.Stats{Dead: 1, ByReason: map[string]int{"permanent": 1}})
	require.NotContains(t, b.String(), "BUDGET_EXCEEDED", "no line when no budget refused a task")
}

// TestPrintStatsSaysWhyNoQuotaForSeveralAccounts: readings of several
// accounts set no quota, and stats say why, with the sum of their plans.
func TestPrintStatsSaysWhyNoQuotaForSeveralAccounts(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	printStats(&b, stream.Stats{Solving: 4, ToldPlan: 16, ToldAccounts: 2})
	require.Contains(t, b.String(), "4 of 16 plan threads (25%), told by the service for 2 accounts (threadsinfo): no plan-wide quota", b.String())
	b.Reset()
	printStats(&b, stream.Stats{Solving: 4, ToldPlan: 6})
	require.Contains(t, b.String(), "4 of 6 plan threads (67%), told by the service (threadsinfo;", b.String())
}
