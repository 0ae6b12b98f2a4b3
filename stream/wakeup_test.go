package stream

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream/wire"
)

// wakeSubs returns the wake-up subscriptions nc holds at the server (on
// captcha.stored.tasks.…), keyed by subject and subscription id, each with
// the number of messages the server delivered to it.
func wakeSubs(t *testing.T, ns *server.Server, nc *nats.Conn) map[string]int64 {
	t.Helper()
	cid, err := nc.GetClientID()
	require.NoError(t, err)
	cz, err := ns.Connz(&server.ConnzOptions{CID: cid, SubscriptionsDetail: true})
	require.NoError(t, err)
	require.Len(t, cz.Conns, 1)
	out := map[string]int64{}
	for _, sd := range cz.Conns[0].SubsDetail {
		if strings.HasPrefix(sd.Subject, wire.StoredSubject(wire.SubjectTasks)+".") {
			out[sd.Subject+" sid "+sd.Sid] = sd.Msgs
		}
	}
	return out
}

// hasWakeSub reports whether subs holds a subscription on subject.
func hasWakeSub(subs map[string]int64, subject string) bool {
	for k := range subs {
		if strings.HasPrefix(k, subject+" ") {
			return true
		}
	}
	return false
}

// TestBusyWorkerGetsNoWakeUps: a worker whose every thread is busy takes no
// wake-up per task stored for it. The first one tells it the consumer has
// tasks, and it stops listening there; the tasks stored meanwhile reach its
// connection not at all (counted by the server, per subscription), while
// it still listens to the consumers it knows nothing of. With room again,
// it drains them, listens again, and an idle thread picks up the next task
// at once (the idle check is an hour).
func TestBusyWorkerGetsNoWakeUps(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	entered := make(chan struct{}, 200)
	gate := make(chan struct{})
	var release sync.Once
	open := func() { release.Do(func() { close(gate) }) }
	rw := b.startWorker(t, WorkerConfig{Threads: 2, IdleCheck: time.Hour, Solver: solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
		entered <- struct{}{}
		select {
		case <-gate:
		case <-ctx.Done():
		}
		return tokenSolver().Solve(ctx, req)
	})})
	t.Cleanup(open) // before the worker stops
	wnc := rw.w.nc
	busy := wire.StoredSubject(wire.TaskFilter(LaneFast, wire.PriorityNormal))
	require.Eventually(t, func() bool { return len(wakeSubs(t, b.ns, wnc)) == 4 }, 5*time.Second, time.Millisecond,
		"a started worker listens to the wake-ups of its four consumers")

	var receipts []Receipt
	submit := func(ids ...string) {
		tasks := make([]Task, len(ids))
		for i, id := range ids {
			tasks[i] = turnstileTask(id)
		}
		rs, err := b.client.SubmitAll(ctx, tasks)
		require.NoError(t, err)
		receipts = append(receipts, rs...)
	}
	submit("busy-0", "busy-1")
	<-entered
	<-entered // both threads busy
	submit("first-while-busy")
	require.Eventually(t, func() bool { return !hasWakeSub(wakeSubs(t, b.ns, wnc), busy) }, 5*time.Second, time.Millisecond,
		"a worker with every thread busy still listens to the wake-ups of a consumer it knows has tasks")

	before := wakeSubs(t, b.ns, wnc)
	require.Len(t, before, 3, "the consumers it knows nothing of still wake it")
	const n = 100
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("backlog-%03d", i)
	}
	// The server hands a task's republished headers to subscribers before
	// it sends the producer's acknowledgement (one queue, in order): once
	// SubmitAll returns, every wake-up these tasks caused is counted.
	submit(ids...)
	require.Equal(t, before, wakeSubs(t, b.ns, wnc), "%d tasks stored for a busy worker reached its wake-up subscriptions", n)

	open()
	require.NoError(t, b.client.WaitAll(ctx, receipts, func(o Outcome, err error) {
		require.NoError(t, err)
		require.Equal(t, StatusSolved, o.Status, o.ID)
	}))
	require.Eventually(t, func() bool { return hasWakeSub(wakeSubs(t, b.ns, wnc), busy) }, 5*time.Second, time.Millisecond,
		"a worker that drained the backlog listens to its wake-ups again")
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r, err := b.client.Submit(wctx, turnstileTask("after-backlog"))
	require.NoError(t, err)
	o, err := b.client.Wait(wctx, r.ID)
	require.NoError(t, err, "the task after the backlog waited for the idle check")
	require.Equal(t, StatusSolved, o.Status)
}

// TestPanickingSolveLeavesTheWorkerRunning: a task whose handling panics is
// logged and handed back; the goroutine it ran on goes on to the next task
// (tasks run on goroutines kept between tasks), and the thread is free
// again: with one thread, the next task is solved.
func TestPanickingSolveLeavesTheWorkerRunning(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	b.startWorker(t, WorkerConfig{Threads: 1, Solver: solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
		if strings.Contains(req.Params["pageurl"], "/boom") {
			panic("a bug met on one message")
		}
		return tokenSolver().Solve(ctx, req)
	})})
	boom := turnstileTask("boom")
	boom.Params["pageurl"] = "https://shop.example/boom"
	_, err := b.client.Submit(ctx, boom)
	require.NoError(t, err)
	for i := range 3 {
		r, err := b.client.Submit(ctx, turnstileTask(fmt.Sprintf("after-%d", i)))
		require.NoError(t, err)
		o, err := b.client.Wait(ctx, r.ID)
		require.NoError(t, err)
		require.Equal(t, StatusSolved, o.Status)
	}
}
