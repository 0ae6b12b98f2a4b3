package stream

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream/broker"
	"github.com/captchaq/captchaq/stream/wire"
)

// The read path's cost per task. Each benchmark runs on the same embedded
// server (file store, lazy sync); they use only what the package had before
// producers stopped using consumers, so the same file measures both.

// BenchmarkWaitSolved: Wait for a task solved before the call (the read
// path alone: find the generation, read the outcome, read the token).
func BenchmarkWaitSolved(b *testing.B) {
	bd := benchSetup(b, 8)
	ctx := context.Background()
	const tasks = 200
	var receipts []Receipt
	for i := range tasks {
		r, err := bd.client.Submit(ctx, turnstileTask(fmt.Sprintf("ws-%d", i)))
		require.NoError(b, err)
		receipts = append(receipts, r)
	}
	require.NoError(b, bd.client.WaitAll(ctx, receipts, func(o Outcome, err error) { require.NoError(b, err) }))
	requests := countRequests(b, bd)
	b.ResetTimer()
	for i := range b.N {
		_, err := bd.client.Wait(ctx, receipts[i%tasks].ID)
		require.NoError(b, err)
	}
	b.StopTimer()
	requests(b)
}

// countRequests counts the JetStream API requests ($JS.API.>, direct gets
// included) the server receives from now on; the returned function reports
// them per operation.
func countRequests(b *testing.B, bd *bundle) func(*testing.B) {
	nc, err := nats.Connect("", nats.InProcessServer(bd.ns))
	require.NoError(b, err)
	b.Cleanup(nc.Close)
	var n atomic.Int64
	_, err = nc.Subscribe("$JS.API.>", func(*nats.Msg) { n.Add(1) })
	require.NoError(b, err)
	require.NoError(b, nc.Flush())
	return func(b *testing.B) {
		require.NoError(b, nc.Flush())
		b.ReportMetric(float64(n.Load())/float64(b.N), "api-requests/op")
	}
}

// BenchmarkSolveRoundTrip: Solve (submit, a worker solves at once, wait),
// one task at a time.
func BenchmarkSolveRoundTrip(b *testing.B) {
	bd := benchSetup(b, 4)
	ctx := context.Background()
	requests := countRequests(b, bd)
	b.ResetTimer()
	for i := range b.N {
		_, err := bd.client.Solve(ctx, turnstileTask(fmt.Sprintf("rt-%d", i)))
		require.NoError(b, err)
	}
	b.StopTimer()
	requests(b)
}

// BenchmarkTaskOfForgedCancels: TaskOf of an owner's task (Solve's kind)
// whose cancel subject holds 10,000 forged records: it reads the task's
// cancel state as a delivery does.
func BenchmarkTaskOfForgedCancels(b *testing.B) {
	bd := benchSetup(b, 0)
	ctx := context.Background()
	gen := ownersTask(b, bd, "fc-1")
	forgeCancels(b, bd, "fc-1", gen, 10000)
	requests := countRequests(b, bd)
	b.ResetTimer()
	for range b.N {
		ti, err := bd.client.TaskOf(ctx, "fc-1")
		require.NoError(b, err)
		require.False(b, ti.Canceled)
	}
	b.StopTimer()
	requests(b)
}

// ownersTask submits task id as Solve does (its message names a cancel
// secret's hash) and returns its generation.
func ownersTask(t testing.TB, b *bundle, id string) uint64 {
	t.Helper()
	_, hash := wire.NewCancelKey()
	b.client.cancelHashes.Store(id, hash)
	defer b.client.cancelHashes.Delete(id)
	r, err := b.client.Submit(context.Background(), turnstileTask(id))
	require.NoError(t, err)
	return r.Seq
}

// forgeCancels publishes n cancel records with wrong secrets on the owner's
// cancel subject of generation gen of id, asynchronously, and waits until
// all are stored.
func forgeCancels(t testing.TB, b *bundle, id string, gen uint64, n int) {
	t.Helper()
	nc, err := nats.Connect("", nats.InProcessServer(b.ns))
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	require.NoError(t, err)
	settle := func() {
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(2 * time.Minute):
			t.Fatal("forged cancels not stored")
		}
	}
	for i := range n {
		rec, _ := json.Marshal(wire.CancelRecord{ID: id, Gen: gen, By: "forger", Secret: fmt.Sprintf("guess-%d", i)})
		_, err := js.PublishAsync(wire.CancelSubject(id, gen), rec)
		require.NoError(t, err)
		if i%2048 == 2047 {
			settle()
		}
	}
	settle()
}

// benchSetup is setup for a benchmark: an embedded server (file store,
// lazy sync), a producer Client, and optionally a worker pool.
func benchSetup(tb testing.TB, threads int) *bundle {
	tb.Helper()
	ns, err := broker.Start(broker.Config{StoreDir: tb.TempDir(), LazySync: true, StoreKey: testStoreKey})
	require.NoError(tb, err)
	tb.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	bd := &bundle{ns: ns}
	connect := func() *nats.Conn {
		nc, err := nats.Connect("", nats.InProcessServer(ns))
		require.NoError(tb, err)
		tb.Cleanup(nc.Close)
		return nc
	}
	bd.nc = connect()
	ensureAsAdmin(tb, bd.nc, Topology{})
	ctx := context.Background()
	bd.client, err = NewClient(ctx, bd.nc, ClientConfig{Name: "bench-producer"})
	require.NoError(tb, err)
	if threads > 0 {
		w, err := NewWorker(ctx, connect(), WorkerConfig{Solver: tokenSolver(), Threads: threads, IdleCheck: 50 * time.Millisecond})
		require.NoError(tb, err)
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- w.Run(wctx) }()
		tb.Cleanup(func() { cancel(); <-done })
	}
	return bd
}
