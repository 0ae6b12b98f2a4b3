package stream

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/internal/logbuf"
	"github.com/captchaq/captchaq/stream/broker"
	"github.com/captchaq/captchaq/stream/internal/dispatcher"
	"github.com/captchaq/captchaq/stream/internal/pool"
)

// The broker restarted on the same store while the server follows the
// service's plan: the follower's connection comes back and the next
// reading (a plan of 8 after 6) still sets the quota.
func TestTheFollowerFollowsOnAfterTheBrokerRestarts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ns, err := broker.Start(broker.Config{StoreDir: dir, Listen: true, Port: -1, LazySync: true})
	require.NoError(t, err)
	port := ns.Addr().(*net.TCPAddr).Port
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	url := ns.ClientURL()
	conn := func(name string) *nats.Conn {
		nc, err := nats.Connect(url, nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		return nc
	}
	anc, wnc := conn("admin"), conn("worker")
	ensureAsAdmin(t, anc, Topology{})
	b := &bundle{ns: ns, nc: anc}
	var logs logbuf.Buffer
	adm, err := NewAdmin(anc, AdminConfig{})
	require.NoError(t, err)
	fctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	require.NoError(t, adm.FollowServicePlan(fctx, slog.New(slog.NewTextHandler(&logs, nil))))
	ctx := testContext(t)
	store, err := OpenTimings(ctx, wnc, Topology{})
	require.NoError(t, err)
	t0 := time.Now()
	require.NoError(t, store.PutPlanWindow(ctx, "w1", pool.PlanWindow{Limit: 6, Told: 6, ToldAt: t0, At: time.Now()}))
	require.Eventually(t, func() bool { return planHeld(t, b, dispatcher.Plan{Threads: 6, FromService: true}) }, 10*time.Second, 5*time.Millisecond)

	ns.Shutdown()
	ns.WaitForShutdown()
	ns, err = broker.Start(broker.Config{StoreDir: dir, Listen: true, Port: port, LazySync: true})
	require.NoError(t, err)
	b.ns = ns
	require.Eventually(t, func() bool { return anc.IsConnected() && wnc.IsConnected() }, 10*time.Second, 10*time.Millisecond, "reconnected")
	require.Eventually(t, func() bool {
		return store.PutPlanWindow(ctx, "w1", pool.PlanWindow{Limit: 8, Told: 8, ToldAt: t0.Add(time.Minute), At: time.Now()}) == nil
	}, 10*time.Second, 50*time.Millisecond, "the reading written after the restart")
	if !assert.Eventually(t, func() bool { return planHeld(t, b, dispatcher.Plan{Threads: 8, FromService: true}) }, 15*time.Second, 20*time.Millisecond) {
		t.Fatalf("the quota did not follow the reading of 8 after the broker's restart: %s; follower's log: %s", planNow(t, b), logs.String())
	}
}
