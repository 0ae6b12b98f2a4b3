package provider_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/streamtest"
)

// unsolvable is the classic dialect's code for a captcha its workers could not solve.
const unsolvable = "ERROR_CAPTCHA_UNSOLVABLE"

// TestUnsolvableRetriedOnAnotherProvider: the plan calls a task's captcha
// unsolvable (its pages, on that service alone): the task's next attempt
// goes to the fallback, which solves it, though the plan is up. The trace
// names both providers, the retry with the plan's code; each emulator
// accepted the task's captcha once and the fallback alone was paid for it
// (the plan's refunded as unsolvable),
// and a task the plan solves stays there.
func TestUnsolvableRetriedOnAnotherProvider(t *testing.T) {
	t.Parallel()
	b := startBed(t, 5*time.Millisecond, 5*time.Millisecond, bedEnv(streamtest.WithMaxAttempts(3)), bedMembers(func(b *bed) {
		b.plan.api.SetFaults(fakeapi.Faults{Rules: []fakeapi.Rule{{Param: "pageurl", Contains: "/p/0", Code: unsolvable, OnPoll: true}}})
	}))
	env, plan, spare := b.env, b.plan, b.spare

	outs := waitAll(t, env.Client, submit(t, env.Client, "crawler", 0, 2))
	for _, o := range outs {
		require.Equal(t, stream.StatusSolved, o.Status, "%s: %s %s", o.ID, o.Error, o.Detail)
	}
	require.Equal(t, "spare", outs[0].Provider, "the plan called it unsolvable")
	require.Equal(t, 2, outs[0].Attempts)
	require.Equal(t, "plan", outs[1].Provider, "a task the plan solves stays there")

	trace, err := env.Client.Trace(t.Context(), outs[0].ID)
	require.NoError(t, err)
	var retried, accepted []string
	for _, e := range trace {
		switch e.Kind {
		case "retry":
			retried = append(retried, e.Provider+" "+e.Code)
		case "accepted":
			accepted = append(accepted, e.Provider)
		}
	}
	require.Equal(t, []string{"plan " + unsolvable}, retried)
	require.Equal(t, []string{"plan", "spare"}, accepted)

	ps, ss := plan.api.Stats(), spare.api.Stats()
	key := fakeapi.TaskKey("userrecaptcha", taskParams(0), nil)
	require.Zero(t, ps.PerTask[key], "the plan was not paid for it (refunded)")
	require.Equal(t, 1, ss.PerTask[key], "the fallback was paid once")
	require.Equal(t, 2, ps.Submitted)
	require.Equal(t, 1, ss.Submitted)
	require.Equal(t, 1, ps.Refunded, "the plan's unsolvable captcha is not charged")
}
