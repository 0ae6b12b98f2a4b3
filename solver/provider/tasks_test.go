package provider_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/gateway"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/solver/provider"
	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/streamtest"
)

// jsonProvider is a provider of the JSON task dialect: a whole captchaq
// of its own (embedded JetStream, its emulator, a worker) behind its
// gateway, which serves createTask/getTaskResult; and its member, a
// TasksClient with the gateway's key.
func jsonProvider(t *testing.T, role provider.Role) (*streamtest.Env, provider.Member) {
	t.Helper()
	env := streamtest.Start(t)
	key := gateway.Key{Key: "provider-key-0123456789abcdef", Producer: "upstream"}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	gw, err := gateway.New(ctx, gateway.Config{Conn: env.Connect(nats.Name("gateway")), Topology: env.Topology,
		Keys: []gateway.Key{key}, Now: env.Now})
	require.NoError(t, err)
	t.Cleanup(gw.Close)
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	c, err := provider.NewTasksClient(provider.TasksConfig{BaseURL: srv.URL, APIKey: key.Key, Scale: 0.001})
	require.NoError(t, err)
	return env, provider.Member{Client: c, Entry: provider.Entry{Name: "json", Dialect: provider.Tasks, BaseURL: srv.URL,
		KeyEnv: "K", Methods: []string{"userrecaptcha", "base64"}, Billing: spareBilling, Role: role}}
}

// TestJSONProviderTakesOverThePlan: the plan's service is down, and the
// fallback is a provider of the JSON dialect (captchaq's own gateway in
// front of its own emulator): every task is solved there, paid once, at
// its stated price, and the trail names it.
func TestJSONProviderTakesOverThePlan(t *testing.T) {
	t.Parallel()
	upstream, member := jsonProvider(t, provider.Fallback)
	plan := startService(t, provider.Entry{Name: "plan", Dialect: provider.Classic, BaseURL: "http://x", KeyEnv: "K",
		Billing: provider.Billing{Threads: 5}, Role: provider.Primary}, 1, 5*time.Millisecond)
	plan.api.SetFaults(fakeapi.Faults{Outage: true})
	set, err := provider.New(provider.Config{Members: []provider.Member{plan.member, member}})
	require.NoError(t, err)
	env := streamtest.Start(t, streamtest.WithWorkers(0))
	env.StartWorker(stream.WorkerConfig{Solver: set, Threads: 4})

	const n = 8
	ids := submit(t, env.Client, "crawler", 0, n)
	outs := waitAll(t, env.Client, ids)
	for _, o := range outs {
		require.Equal(t, stream.StatusSolved, o.Status)
		require.Equal(t, "json", o.Provider)
		require.InDelta(t, 2.99/1000, o.Cost, 1e-12)
		require.NotEmpty(t, o.Solution)
		require.True(t, hasStep(t, env, o.ID, "accepted", "json"), "the trail names the provider")
	}
	us := upstream.Emulator.Stats()
	require.Equal(t, n, us.Submitted, "paid once each, upstream")
	require.Empty(t, us.Repeated())
	require.Zero(t, plan.api.Stats().Submitted)
}

// TestJSONProviderOutOfReach: a JSON primary that refuses connections
// sends the task to the classic fallback, nothing paid twice, and says
// since when it is out.
func TestJSONProviderOutOfReach(t *testing.T) {
	t.Parallel()
	gone := httptest.NewServer(nil)
	gone.Close() // its port refuses connections now
	c, err := provider.NewTasksClient(provider.TasksConfig{BaseURL: gone.URL, APIKey: "a-key-0123456789", Scale: 0.001})
	require.NoError(t, err)
	primary := provider.Member{Client: c, Entry: provider.Entry{Name: "json", Dialect: provider.Tasks, BaseURL: gone.URL,
		KeyEnv: "K", Methods: []string{"userrecaptcha", "base64"}, Billing: spareBilling, Role: provider.Primary}}
	spare := startBed(t, 5*time.Millisecond, 5*time.Millisecond, bedNoWorker()).spare
	set, err := provider.New(provider.Config{Members: []provider.Member{primary, spare.member}})
	require.NoError(t, err)
	ans, err := set.Solve(t.Context(), solver.Request{Method: "userrecaptcha", Params: taskParams(1)})
	require.NoError(t, err)
	require.Equal(t, "spare", ans.Provider)
	require.Equal(t, 1, spare.api.Stats().Submitted)
	since, why := c.Unreachable()
	require.False(t, since.IsZero())
	require.ErrorContains(t, why, "connect")
	require.NotContains(t, why.Error(), "a-key-0123456789")
}
