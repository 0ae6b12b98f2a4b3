package provider_test

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
	"github.com/captchaq/captchaq/stream/streamtest"
)

// planAndOverflow starts a primary with a plan of planThreads threads
// solving in 1–2 s and a per-solve overflow solving in 5–10 ms, and
// a worker of 8 threads that solves through the two with policy.
func planAndOverflow(t *testing.T, planThreads int, policy provider.OverflowPolicy) (env *streamtest.Env, plan, over service) {
	t.Helper()
	plan = startService(t, provider.Entry{Name: "plan", Dialect: provider.Classic, BaseURL: "http://x", KeyEnv: "K",
		Billing: provider.Billing{Threads: planThreads}, Role: provider.Primary}, 1, time.Second)
	over = startService(t, provider.Entry{Name: "over", Dialect: provider.Classic, BaseURL: "http://x", KeyEnv: "K",
		Service: fakeapi.Service2Captcha, Methods: []string{"userrecaptcha", "base64"}, Billing: spareBilling,
		Role: provider.Overflow}, 2, 5*time.Millisecond)
	set, err := provider.New(provider.Config{Members: []provider.Member{plan.member, over.member}, Overflow: policy})
	require.NoError(t, err)
	env = streamtest.Start(t, streamtest.WithWorkers(0))
	env.StartWorker(stream.WorkerConfig{Solver: set, Threads: 8})
	return env, plan, over
}

// submitBy submits n reCAPTCHA tasks named name-i, from i = from, each due
// within deadline.
func submitBy(t *testing.T, c *stream.Client, name string, from, n int, deadline time.Duration) []string {
	t.Helper()
	var ids []string
	for i := from; i < from+n; i++ {
		r, err := c.Submit(t.Context(), stream.Task{ID: fmt.Sprintf("%s-%d", name, i), Method: "userrecaptcha",
			Params: taskParams(i), Deadline: time.Now().Add(deadline)})
		require.NoError(t, err)
		ids = append(ids, r.ID)
	}
	return ids
}

// TestOverflowOnlyWhatTheDeadlineNeeds fills a 2-thread plan with tasks
// due in two minutes, then sends tasks due within 3 s, less than waiting
// for a plan thread takes (provider.WaitForPlan): those go to
// the overflow and are solved in time; the tasks that can wait are never
// paid there. Every task is paid once.
func TestOverflowOnlyWhatTheDeadlineNeeds(t *testing.T) {
	t.Parallel()
	env, plan, over := planAndOverflow(t, 2, provider.OverflowAtDeadline)
	relaxed := submitBy(t, env.Client, "relaxed", 0, 6, 2*time.Minute)
	require.Eventually(t, func() bool { return plan.api.Stats().Concurrent == 2 }, 30*time.Second, time.Millisecond,
		"the plan is full")
	require.Less(t, 3*time.Second, provider.WaitForPlan(plan.member.Client, solver.KindRecaptcha), "a thread is further than the urgent deadline")
	urgent := submitBy(t, env.Client, "urgent", 6, 6, 3*time.Second)
	for _, o := range waitAll(t, env.Client, append(relaxed, urgent...)) {
		require.Equal(t, stream.StatusSolved, o.Status, "%s: %s %s", o.ID, o.Error, o.Detail)
	}
	ps, os := plan.api.Stats(), over.api.Stats()
	t.Logf("plan: %d accepted, at most %d at once; overflow: %d accepted", ps.Submitted, ps.MaxConcurrent, os.Submitted)
	require.Equal(t, 12, ps.Submitted+os.Submitted, "each task paid once")
	require.Empty(t, ps.Repeated())
	require.Empty(t, os.Repeated())
	for i := range 6 {
		require.Zero(t, os.PerTask[fakeapi.TaskKey("userrecaptcha", taskParams(i), nil)], "relaxed-%d paid on the overflow", i)
	}
	require.Positive(t, os.Submitted, "the urgent tasks overflowed")
	require.LessOrEqual(t, ps.MaxConcurrent, 2)
}

// TestOverflowNeverAndAlways: with the overflow off the urgent tasks wait
// for the plan, nothing is paid past it; with it always on, tasks that
// could wait are paid there too.
func TestOverflowNeverAndAlways(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		policy   provider.OverflowPolicy
		overflow func(t require.TestingT, n int)
	}{
		{provider.OverflowNever, func(t require.TestingT, n int) { require.Zero(t, n) }},
		{provider.OverflowAlways, func(t require.TestingT, n int) { require.Greater(t, n, 4) }},
	} {
		t.Run(string(tc.policy), func(t *testing.T) {
			t.Parallel()
			env, plan, over := planAndOverflow(t, 2, tc.policy)
			ids := submitBy(t, env.Client, "relaxed", 0, 8, 2*time.Minute)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			for _, id := range ids {
				_, err := env.Client.Wait(ctx, id)
				require.NoError(t, err)
			}
			require.Equal(t, 8, plan.api.Stats().Submitted+over.api.Stats().Submitted)
			tc.overflow(t, over.api.Stats().Submitted)
		})
	}
}
