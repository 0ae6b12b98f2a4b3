package provider_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver/provider"
	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/streamtest"
)

// TestWeightsShareTheTasks: two per-solve primaries weighted 3 and 1 take
// about three quarters and one quarter of 200 tasks (the draw's spread is
// about 6 tasks; the test allows 30), each task paid once, on one of
// them (a weighted primary that is out passes its task on as any
// primary does: the next in the task's drawn order).
func TestWeightsShareTheTasks(t *testing.T) {
	t.Parallel()
	a := perSolve(t, "a", provider.Primary, 1, 2*time.Millisecond)
	b := perSolve(t, "b", provider.Primary, 2, 2*time.Millisecond)
	a.member.Entry.Weight, b.member.Entry.Weight = 3, 1
	set, err := provider.New(provider.Config{Members: []provider.Member{a.member, b.member}})
	require.NoError(t, err)
	env := streamtest.Start(t, streamtest.WithWorkers(0))
	env.StartWorker(stream.WorkerConfig{Solver: set, Threads: threads})

	const n = 200
	outs := waitAll(t, env.Client, submit(t, env.Client, "crawler", 0, n))
	requireBilledOnce(t, env, outs, a, b)
	ta, tb := a.api.Stats().Submitted, b.api.Stats().Submitted
	t.Logf("weight 3: %d tasks, weight 1: %d", ta, tb)
	require.InDelta(t, 3*n/4, ta, 30)
	require.InDelta(t, n/4, tb, 30)
}

// TestWeightOnlyOnPrimaries: a weight is a share among primaries; on
// another role, or out of range, the file is refused naming the entry.
func TestWeightOnlyOnPrimaries(t *testing.T) {
	t.Parallel()
	plan := `{"name": "plan", "dialect": "classic", "base_url": "https://ocr.captchaai.com", "key_env": "PLAN_KEY", "billing": {"threads": 5}, "role": "primary", "weight": 2}`
	spare := func(role, weight string) string {
		return `{"name": "spare", "dialect": "classic", "base_url": "https://2captcha.com", "key_env": "K", "methods": ["base64"],
		"billing": {"per_1000": {"base64": 1}}, "role": "` + role + `", "weight": ` + weight + `}`
	}
	_, err := provider.Parse([]byte(`{"providers": [` + plan + `, ` + spare("primary", "1") + `]}`))
	require.NoError(t, err)
	_, err = provider.Parse([]byte(`{"providers": [` + plan + `, ` + spare("fallback", "1") + `]}`))
	require.ErrorContains(t, err, "providers[1] (spare): weight 1: a share of the tasks among primaries")
	_, err = provider.Parse([]byte(`{"providers": [` + plan + `, ` + spare("primary", "1001") + `]}`))
	require.ErrorContains(t, err, "providers[1] (spare): weight 1001: want 1 to 1000")
	_, err = provider.Parse([]byte(`{"providers": [` + plan + `, ` + spare("primary", "-1") + `]}`))
	require.ErrorContains(t, err, "providers[1] (spare): weight -1")
}
