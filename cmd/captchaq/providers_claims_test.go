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

// Two worker processes with a providers file, one thread each, on one
// provider that answers the second worker's submission with the id of the
// captcha the first polls (a broken service): the second task is not
// handed the first's answer; its attempt fails REUSED_CAPTCHA_ID (the
// pool's claim, in the timings bucket, is the first worker's) and its
// next attempt gets a captcha of its own. The bill: three captchas, the
// second task's twice (charged for the reused id), the first's once.
func TestReusedCaptchaIDAcrossWorkerProcesses(t *testing.T) {
	t.Parallel()
	solve := map[string]fakeapi.Range{solver.KindTurnstile: {Min: 3 * time.Second, Median: 3 * time.Second, Max: 3 * time.Second}}
	plan, planURL := emulatorURL(t, fakeapi.Config{SolveTime: solve, Seed: 1})
	pb := startProviders(t, stream.Topology{}, []string{"PLAN_KEY"}, []string{"--poll-scale", "0.1", "--threads", "1"},
		fmt.Sprintf(`{"name": "plan", "dialect": "classic", "base_url": %q, "service": "captchaai", "key_env": "PLAN_KEY",
  "billing": {"threads": 5}, "role": "primary"}`, planURL))
	client := pb.client
	pb.worker("claims-first")
	pb.worker("claims-second")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	tasks := checkoutTasks("claims", 2)
	first, err := client.SubmitAll(ctx, tasks[:1])
	require.NoError(t, err)
	require.Eventually(t, func() bool { st := plan.Stats(); return st.Submitted == 1 && len(st.ResCallsPerCaptcha) == 1 },
		30*time.Second, time.Millisecond, "the first captcha accepted and polled (claimed before its first poll)")
	plan.SetFaults(fakeapi.Faults{ReuseID: true})
	second, err := client.SubmitAll(ctx, tasks[1:])
	require.NoError(t, err)
	require.Eventually(t, func() bool { return plan.Stats().Submitted == 2 }, 30*time.Second, time.Millisecond,
		"the other worker (the first's one thread is busy) submitted the second task")
	plan.SetFaults(fakeapi.Faults{})

	var outs []stream.Outcome
	require.NoError(t, client.WaitAll(ctx, append(first, second...), func(o stream.Outcome, err error) {
		require.NoError(t, err)
		outs = append(outs, o)
	}))
	require.Len(t, outs, 2)
	require.NotEqual(t, outs[0].CaptchaID, outs[1].CaptchaID, "one captcha, and its answer, for two tasks")
	tr, err := client.Trace(ctx, "claims-1")
	require.NoError(t, err)
	reused := false
	for _, e := range tr {
		reused = reused || e.Code == provider.CodeReusedID
	}
	require.True(t, reused, "the second task's trace says the id was another's: %+v", tr)
	bill := plan.Stats()
	require.Equal(t, 3, bill.Submitted)
	require.Len(t, bill.Repeated(), 1, "only the second task paid twice (the reused id's charge): %v", bill.Repeated())
}
