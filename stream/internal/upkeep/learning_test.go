package upkeep

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream/broker"
	"github.com/captchaq/captchaq/stream/internal/pool"
	"github.com/captchaq/captchaq/stream/internal/topology"
)

// learner is a Learner that learns one turnstile answer before each share
// and keeps a plan window of 3, a plan size once reached is set.
type learner struct {
	mu      sync.Mutex
	shares  int
	reached bool
}

func (l *learner) ShareTimings(ctx context.Context, store solver.TimingStore) error {
	l.mu.Lock()
	l.shares++
	l.mu.Unlock()
	_, err := store.MergeTimings(ctx, map[string]solver.Learned{solver.KindTurnstile: {Median: 4 * time.Second, Sigma: 0.3, N: 1, At: time.Now()}})
	return err
}
func (l *learner) PlanWindow() int { return 3 }
func (l *learner) PlanReached() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.reached
}
func (l *learner) ShareSoon() <-chan struct{}             { return nil }
func (l *learner) AdoptTimings(map[string]solver.Learned) {}
func (l *learner) JoinPool(solver.Pool)                   {}

func (l *learner) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.shares
}

// Learning shares once as it starts, before any task, and once more as it
// stops, though its periodic share is an hour away: what a worker learned
// reaches the pool's bucket then. A plan window is shared only once the
// service refused for want of plan threads (a plan size learned).
func TestLearningSharesAtStartAndAtStop(t *testing.T) {
	t.Parallel()
	nc, js, store := timingsBroker(t)
	ctx := t.Context()
	learned := func() int {
		held, err := store.Load(ctx)
		require.NoError(t, err)
		return held[solver.KindTurnstile].N
	}
	windows := func() map[string]pool.PlanWindow {
		ws, err := store.Windows(ctx, time.Now())
		require.NoError(t, err)
		return ws
	}

	le := &learner{}
	l := &Learning{Learner: le, Name: "w1", Now: time.Now, Every: time.Hour, NC: nc, JS: js, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	require.NoError(t, l.Start(ctx))
	require.Equal(t, 1, le.count(), "shared before the first task")
	require.Equal(t, 1, learned())
	require.Empty(t, windows(), "a window never refused for is no plan size")
	le.mu.Lock()
	le.reached = true
	le.mu.Unlock()
	l.Stop()
	require.Equal(t, 2, le.count(), "shared once more as it stopped")
	require.Equal(t, 2, learned())
	require.Equal(t, 3, windows()["w1"].Limit, "the plan size learned")
	l.Stop()
	require.Equal(t, 2, le.count(), "a second Stop does nothing")
}

// Stop returns only once the service's goroutine has ended: what it does
// last (a last heartbeat) is done when Stop returns.
func TestStopWaitsForTheService(t *testing.T) {
	t.Parallel()
	var ended atomic.Bool
	l := Loop(func(ctx context.Context) {
		<-ctx.Done()
		ended.Store(true)
	})
	require.NoError(t, l.Start(t.Context()))
	l.Stop()
	require.True(t, ended.Load(), "Stop returned before the service ended")
}

// timingsBroker starts a broker with the pool's timings bucket, and
// returns a connection to it and the bucket's store.
func timingsBroker(t *testing.T) (*nats.Conn, jetstream.JetStream, *pool.Timings) {
	t.Helper()
	nc, js := startBroker(t, broker.Config{StoreDir: t.TempDir(), LazySync: true})
	_, err := topology.EnsureTimings(t.Context(), js, topology.Spec{})
	require.NoError(t, err)
	store, err := pool.OpenTimings(t.Context(), js, "")
	require.NoError(t, err)
	return nc, js, store
}

// startBroker starts a broker of cfg for the test and connects to it.
func startBroker(t *testing.T, cfg broker.Config) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	ns, err := broker.Start(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return nc, js
}

// A worker shares its account's told plan only with the workers on that
// account (PlanWindow.Account): another account's workers hold another plan.
func TestToldShareIsOfTheWorkersAccount(t *testing.T) {
	ws := map[string]pool.PlanWindow{
		"a1": {Told: 6, Account: "a"}, "a2": {Told: 6, Account: "a"}, "b1": {Told: 10, Account: "b"},
	}
	if got := toldShare(ws, "a1", "a", 6); got != 3 {
		t.Fatalf("a1's share of a's 6: %d, want 3", got)
	}
	if got := toldShare(ws, "b1", "b", 10); got != 10 {
		t.Fatalf("b1's share of b's 10: %d, want 10", got)
	}
}
