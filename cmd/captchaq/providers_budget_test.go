package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/solver/provider"
	"github.com/captchaq/captchaq/stream"
)

// TestBudgetAcrossWorkerProcesses: two worker processes with a providers
// file, four threads each, on one per-solve provider (2captcha's profile)
// capped at 2.5 solves a day; 8 tasks at once. The cap holds across the
// processes: the emulator bills 2 captchas, the other 6 tasks end dead
// BUDGET_EXCEEDED, sent nowhere. Before the price was counted when sent
// (each worker read the day's spend before any solve was answered) the
// emulator billed all 8, 3.2 times the cap.
func TestBudgetAcrossWorkerProcesses(t *testing.T) {
	t.Parallel()
	solve := map[string]fakeapi.Range{solver.KindTurnstile: {Min: time.Second, Median: time.Second, Max: time.Second}}
	api, apiURL := emulatorURL(t, fakeapi.Config{SolveTime: solve, Seed: 1, Service: fakeapi.Service2Captcha,
		Price: map[string]float64{"turnstile": 2}, Balance: 100})
	pb := startProviders(t, stream.Topology{}, []string{"SPARE_KEY"}, []string{"--poll-scale", "0.1", "--threads", "4"},
		fmt.Sprintf(`{"name": "spare", "dialect": "classic", "base_url": %q, "service": "2captcha", "key_env": "SPARE_KEY",
  "methods": ["turnstile"], "billing": {"per_1000": {"turnstile": 2}}, "role": "primary", "budget_per_day": 0.005}`, apiURL))
	client := pb.client
	pb.worker("budget-first")
	pb.worker("budget-second")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	receipts, err := client.SubmitAll(ctx, checkoutTasks("budget", 8))
	require.NoError(t, err)
	solved, exceeded := 0, 0
	require.NoError(t, client.WaitAll(ctx, receipts, func(o stream.Outcome, err error) {
		switch { // err says a task was not solved; its outcome says why
		case o.Status == stream.StatusSolved:
			solved++
		case o.Error == provider.CodeBudgetExceeded:
			exceeded++
		default:
			t.Errorf("task %s: %s %s %s (%v)", o.ID, o.Status, o.Error, o.Detail, err)
		}
	}))
	bill := api.Stats()
	t.Logf("solved %d, BUDGET_EXCEEDED %d; bill: %d captchas, %.4f against a cap of 0.005", solved, exceeded, bill.Submitted, bill.Spent)
	require.Equal(t, 2, bill.Submitted, "the cap is 2.5 solves, across both workers")
	require.LessOrEqual(t, bill.Spent, 0.005)
	require.Empty(t, bill.Repeated())
	require.Equal(t, 2, solved)
	require.Equal(t, 6, exceeded)
}
