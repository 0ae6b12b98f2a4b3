package provider_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/internal/dialect/classic"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/solver/provider"
	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/streamtest"
)

// TestBreakJSONFundsRunOutMidBurst: a per-solve primary of the JSON
// dialect (the emulator's, 2captcha's profile) runs out of money after 10
// solves of a burst of 40 tasks: once its createTask answers
// ERROR_ZERO_BALANCE (no money in the JSON dialect: anti-captcha.com/
// apidoc/errors, "Account has zero or negative balance") the rest goes
// to the classic fallback; every task is paid once, on one provider, and
// stats' spend is each bill to the cent.
func TestBreakJSONFundsRunOutMidBurst(t *testing.T) {
	t.Parallel()
	api, url := jsonEmulator(t, fakeapi.Config{Service: fakeapi.Service2Captcha, BurstLimit: 1 << 20})
	c := tasksClient(t, url, fakeapi.TestKey)
	primary := service{api: api, member: provider.Member{Client: c, Entry: provider.Entry{Name: "json", Dialect: provider.Tasks,
		BaseURL: url, KeyEnv: "K", Methods: []string{"userrecaptcha", "base64"}, Billing: spareBilling, Role: provider.Primary}}}
	spare := perSolve(t, "spare", provider.Fallback, 2, 5*time.Millisecond)
	set, err := provider.New(provider.Config{Members: []provider.Member{primary.member, spare.member}})
	require.NoError(t, err)
	env := streamtest.Start(t, streamtest.WithWorkers(0))
	env.StartWorker(stream.WorkerConfig{Solver: set, Threads: threads})

	ids := submit(t, env.Client, "crawler", 0, 40)
	require.Eventually(t, func() bool { return api.Stats().Submitted >= 10 }, 30*time.Second, time.Millisecond)
	api.SetFaults(fakeapi.Faults{Rules: []fakeapi.Rule{{Code: classic.CodeZeroBalance}}})
	outs := waitAll(t, env.Client, ids)
	requireBilledOnce(t, env, outs, primary, spare)
	require.Positive(t, spare.api.Stats().Submitted, "the fallback took the rest")
	require.Positive(t, api.Stats().Codes[classic.CodeZeroBalance])
	require.LessOrEqual(t, api.Stats().Codes[classic.CodeZeroBalance], threads, "passed over, not asked once a task")
}
