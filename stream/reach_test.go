package stream

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/internal/faultproxy"
	"github.com/captchaq/captchaq/internal/logbuf"
	"github.com/captchaq/captchaq/stream/broker"
)

// A worker with work whose broker freezes (connections open, nothing
// answered, as a SIGSTOPped nats-server): it says once that the stream
// does not answer, and says it answers again only once a request has
// made the round trip, after the thaw, not while the broker is still
// frozen.
func TestStreamAnswersAgainOnlyAfterARoundTrip(t *testing.T) {
	t.Parallel()
	ns, err := broker.Start(broker.Config{StoreDir: t.TempDir(), LazySync: true, StoreKey: testStoreKey, Listen: true, Port: -1})
	require.NoError(t, err)
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	u, err := url.Parse(ns.ClientURL())
	require.NoError(t, err)
	proxy, err := faultproxy.Start(u.Host)
	require.NoError(t, err)
	t.Cleanup(proxy.Close)

	b := &bundle{ns: ns}
	b.nc = b.connect(t)
	ensureAsAdmin(t, b.nc, b.top)
	ctx := testContext(t)
	b.client, err = NewClient(ctx, b.nc, ClientConfig{Name: "test-producer"})
	require.NoError(t, err)

	// The worker reaches the broker through the proxy only.
	wnc, err := nats.Connect("nats://"+proxy.Addr(), nats.MaxReconnects(-1))
	require.NoError(t, err)
	t.Cleanup(wnc.Close)
	var logs logbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	w, err := NewWorker(ctx, wnc, WorkerConfig{Solver: tokenSolver(), Threads: 4, Logger: log, IdleCheck: 50 * time.Millisecond})
	require.NoError(t, err)
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	t.Cleanup(func() { stop(); <-done })

	// Work that keeps the worker fetching: a steady trickle of tasks.
	var rs []Receipt
	for i := range 20 {
		r, err := b.client.Submit(ctx, turnstileTask(fmt.Sprintf("reach%02d", i)))
		require.NoError(t, err)
		rs = append(rs, r)
	}
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), `msg=solved`) }, 20*time.Second, 20*time.Millisecond)
	proxy.Freeze()
	for i := range 40 {
		_, err := b.client.Submit(ctx, turnstileTask(fmt.Sprintf("frozen%02d", i)))
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "the stream does not answer") },
		20*time.Second, 20*time.Millisecond, "%s", logs.String())
	// Frozen for longer than a heartbeat's period and several fetches'
	// expiry: no return is told meanwhile.
	require.Never(t, func() bool { return strings.Contains(logs.String(), "the stream answers again") },
		8*time.Second, 20*time.Millisecond, "told while the broker is frozen:\n%s", logs.String())
	require.NoError(t, proxy.Restore())
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "the stream answers again") },
		30*time.Second, 20*time.Millisecond, "%s", logs.String())
	require.NoError(t, b.client.WaitAll(ctx, rs, func(o Outcome, err error) {
		require.NoError(t, err)
		require.Equal(t, StatusSolved, o.Status)
	}))
}
