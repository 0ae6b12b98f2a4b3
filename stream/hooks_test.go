package stream

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream/broker"
)

// TestRetryComesBackBeforeTheIdleCheck: a task handed back after a
// transient error, with a 50-ms backoff, is taken again when its delay
// ends, not at the idle check (an hour): the executor tells the
// dispatcher to look at its lane again (Hooks.LookAgainAfter). Its
// observations name the service's code, and a dead task's observation
// its reason as well: what a metrics observer labels them with.
func TestRetryComesBackBeforeTheIdleCheck(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	var (
		mu    sync.Mutex
		tried = map[string]int{}
		obs   []Observation
	)
	b.startWorker(t, WorkerConfig{Threads: 1, IdleCheck: time.Hour,
		Policy: retry.Policy{MaxAttempts: 3, InitialInterval: 50 * time.Millisecond, MaxInterval: 50 * time.Millisecond, NoJitter: true},
		Observer: ObserverFunc(func(o Observation) {
			mu.Lock()
			defer mu.Unlock()
			obs = append(obs, o)
		}),
		Solver: solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
			mu.Lock()
			tried[req.Params["pageurl"]]++
			n := tried[req.Params["pageurl"]]
			mu.Unlock()
			if req.Params["pageurl"] == "https://shop.example/broken" {
				return solver.Answer{}, apiErr("ERROR_PAGEURL", retry.Permanent)
			}
			if n == 1 {
				return solver.Answer{}, apiErr("ERROR_SERVER_ERROR", retry.Transient)
			}
			return tokenSolver().Solve(ctx, req)
		})})

	// Far below the hour of the idle check, and far above what a loaded
	// race run takes (CI's preview, at a load of 10 on 2 cores, lost the
	// test at 10 s).
	wctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	out, err := b.client.Solve(wctx, turnstileTask("comes-back"))
	require.NoError(t, err, "the retried task waited for the idle check")
	require.Equal(t, StatusSolved, out.Status)

	broken := turnstileTask("broken")
	broken.Params["pageurl"] = "https://shop.example/broken"
	dead, err := b.client.Solve(wctx, broken)
	require.ErrorIs(t, err, ErrNotSolved)
	require.NotEmpty(t, dead.Reason)

	mu.Lock()
	defer mu.Unlock()
	var retried, died bool
	for _, o := range obs {
		switch o.Kind {
		case EventRetry:
			retried = true
			require.Equal(t, "ERROR_SERVER_ERROR", o.Code, "%+v", o)
			require.Empty(t, o.Reason, "%+v", o)
		case EventDead:
			died = true
			require.Equal(t, "ERROR_PAGEURL", o.Code, "%+v", o)
			require.Equal(t, dead.Reason, o.Reason, "%+v", o)
		}
	}
	require.True(t, retried && died, "observations: %+v", obs)
}

// TestStopWithTheBrokerGoneDoesNotWaitForIt: a worker stopped while the
// broker is down, holding an answer it cannot store, returns from Run
// (the stop abandons the writes, Hooks.Abandon) instead of waiting for
// the broker to come back (a write left to time out takes seconds: the
// bound is 5 s, under an ack wait of 30 s).
func TestStopWithTheBrokerGoneDoesNotWaitForIt(t *testing.T) {
	t.Parallel()
	top := Topology{AckWait: 30 * time.Second}
	ns, err := broker.Start(broker.Config{StoreDir: t.TempDir(), StoreKey: testStoreKey, Listen: true, Port: -1})
	require.NoError(t, err)
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	connect := func() *nats.Conn {
		nc, err := nats.Connect(ns.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.ReconnectBufSize(-1))
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		return nc
	}
	ctx, cancelCtx := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancelCtx)
	ensureAsAdmin(t, connect(), top)
	client, err := NewClient(ctx, connect(), ClientConfig{Topology: top, Name: "test-producer"})
	require.NoError(t, err)
	answered, resume := make(chan struct{}), make(chan struct{})
	w, err := NewWorker(ctx, connect(), WorkerConfig{Topology: top, Threads: 1, IdleCheck: 50 * time.Millisecond, ShutdownGrace: 20 * time.Second,
		Solver: solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
			close(answered)
			<-resume
			return tokenSolver().Solve(ctx, req)
		})})
	require.NoError(t, err)
	wctx, stopWorker := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	t.Cleanup(stopWorker)

	_, err = client.Submit(ctx, turnstileTask("gone"))
	require.NoError(t, err)
	select {
	case <-answered:
	case <-ctx.Done():
		t.Fatal("the task never reached the solver")
	}
	ns.Shutdown()
	ns.WaitForShutdown()
	close(resume)
	stopWorker()
	stopped := time.Now()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run waited for the broker to come back")
	}
	t.Logf("Run returned %s after the stop", time.Since(stopped))
}
