package provider_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/gateway"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
)

// TestReportsGoToTheProviderThatSolved: one task solved on the plan, one
// on the fallback while the plan is out; a reportbad of each, through the
// workers' report service (gateway.ServeReports, as the gateway asks),
// reaches the emulator that solved it, and only that one.
func TestReportsGoToTheProviderThatSolved(t *testing.T) {
	t.Parallel()
	b := startBed(t, 5*time.Millisecond, 5*time.Millisecond)
	env, plan, spare, set := b.env, b.plan, b.spare, b.set
	stop, err := gateway.ServeReports(t.Context(), env.Connect(), env.Topology, set, nil)
	require.NoError(t, err)
	t.Cleanup(stop)

	onPlan := waitAll(t, env.Client, submit(t, env.Client, "crawler", 0, 1))[0]
	plan.api.SetFaults(fakeapi.Faults{Outage: true})
	onSpare := waitAll(t, env.Client, submit(t, env.Client, "crawler", 1, 1))[0]
	plan.api.SetFaults(fakeapi.Faults{})
	require.Equal(t, "plan", onPlan.Provider)
	require.Equal(t, "spare", onSpare.Provider)

	nc := env.Connect()
	report := func(o stream.Outcome) string {
		req, err := json.Marshal(map[string]any{"task": o.ID, "captcha_id": o.CaptchaID, "good": false})
		require.NoError(t, err)
		msg, err := nc.Request(gateway.ReportSubject, req, 10*time.Second)
		require.NoError(t, err)
		return string(msg.Data)
	}
	require.Contains(t, report(onSpare), "OK_REPORT_RECORDED")
	require.Equal(t, 1, spare.api.Stats().ReportsBad, "the fallback solved it")
	require.Zero(t, plan.api.Stats().ReportsBad, "not the plan, which did not")
	require.Contains(t, report(onPlan), "OK_REPORT_RECORDED")
	require.Equal(t, 1, plan.api.Stats().ReportsBad)
	require.Equal(t, 1, spare.api.Stats().ReportsBad)
}
