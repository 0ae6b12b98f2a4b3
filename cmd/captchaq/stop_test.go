package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/broker"
)

// A worker told to stop while its broker is gone stops within a few
// seconds, and says which tasks it could not hand back (they come back to
// a worker after the ack wait once the broker is back).
func TestWorkerStopsPromptlyWithTheBrokerGone(t *testing.T) {
	t.Parallel()
	ns, err := broker.Start(broker.Config{StoreDir: t.TempDir(), Listen: true, Port: -1, LazySync: true, StoreKey: testStoreKey})
	require.NoError(t, err)
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	nc, err := nats.Connect(ns.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, ensureTopology(ctx, nc, stream.Topology{}, -1, false), "as captchaq init")
	client, err := stream.NewClient(ctx, nc, stream.ClientConfig{Name: "stop-test"})
	require.NoError(t, err)

	// Solves that take far longer than the test: both tasks are in the
	// service's hands when the broker goes.
	api := fakeapi.New(fakeapi.Config{BurstLimit: 1 << 20,
		SolveTime: map[string]fakeapi.Range{solver.KindTurnstile: {Min: time.Hour, Median: time.Hour, Max: time.Hour}}})
	submitted := make(chan struct{}, 8)
	emu := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		api.ServeHTTP(w, r)
		if r.URL.Path == "/in.php" {
			submitted <- struct{}{}
		}
	}))
	t.Cleanup(emu.Close)

	w := startProc(t, keyEnv, "worker", "--nats", ns.ClientURL(), "--solver-url", emu.URL, "--threads", "2", "--poll-scale", "0.01")
	w.waitLine("worker started", 30*time.Second)
	for _, id := range []string{"stop-1", "stop-2"} {
		_, err := client.Submit(ctx, stream.Task{ID: id, Method: "turnstile",
			Params: stream.Params{"sitekey": "0x4AAAAAAAB", "pageurl": "https://shop.example/checkout"}})
		require.NoError(t, err)
	}
	for range 2 {
		select {
		case <-submitted: // the attempt is recorded before the service hears of it
		case <-ctx.Done():
			t.Fatal("the tasks never reached the service")
		}
	}

	nc.Close()
	ns.Shutdown()
	ns.WaitForShutdown()
	start := time.Now()
	require.NoError(t, w.cmd.Process.Signal(syscall.SIGTERM))
	w.wait(30 * time.Second)
	took := time.Since(start)
	t.Logf("stopped %s after SIGTERM", took.Round(time.Millisecond))
	require.Less(t, took, 8*time.Second, "a stop with the broker gone ends within a few seconds")
	out := w.output()
	require.Contains(t, out, "could not hand back")
	require.Contains(t, out, "stop-1")
	require.Contains(t, out, "stop-2")
}
