package stream

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream/internal/topology"
	"github.com/captchaq/captchaq/stream/wire"
)

// TestLaneAtItsLimitTakesTheNextTaskOnTheAck: with a lane held to one task
// in solving and a thread idle, the lane's next task starts as soon as the
// one before it is recorded (its ack makes the room), not at the idle check
// (an hour here). The solve frees its thread before it is recorded, so the
// idle thread has looked at the lane, found it at its limit, and is
// waiting when the room comes.
func TestLaneAtItsLimitTakesTheNextTaskOnTheAck(t *testing.T) {
	t.Parallel()
	t.Run("encrypted store", func(t *testing.T) {
		t.Parallel()
		laneLimitNextTask(t, setup)
	})
	// On a plaintext store the ack comes after the erasure, in the
	// background, after the task's thread and its lane were given back.
	t.Run("plaintext store", func(t *testing.T) {
		t.Parallel()
		laneLimitNextTask(t, setupPlaintext)
	})
}

func laneLimitNextTask(t *testing.T, setup func(*testing.T, Topology) *bundle) {
	top := Topology{LaneLimits: map[Lane]int{LaneSlow: 1}}
	b := setup(t, top)
	ctx := testContext(t)
	b.startWorker(t, WorkerConfig{Solver: tokenSolver(), Threads: 2, IdleCheck: time.Hour})
	tasks := make([]Task, 4)
	for i := range tasks {
		tasks[i] = recaptchaTask(fmt.Sprintf("limited-%d", i))
	}
	receipts, err := b.client.SubmitAll(ctx, tasks)
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, b.client.WaitAll(wctx, receipts, func(o Outcome, err error) {
		require.NoError(t, err, "a task of a lane at its limit waited for the idle check after the lane had room")
		require.Equal(t, StatusSolved, o.Status, o.ID)
	}))
}

// TestBusyWorkerTakesOtherFeedsTasksWhenFree: a worker with its one thread
// busy, told of a high-priority task and of another lane's task while
// busy (one wake-up each, then no more), takes the high-priority task as
// soon as the thread is free, then the other lane's, then one more task
// of that lane published after its wake-ups were ended; the idle check is
// an hour, so none of them waits for it.
func TestBusyWorkerTakesOtherFeedsTasksWhenFree(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	gate := make(chan struct{})
	entered := make(chan struct{}, 1)
	order := make(chan string, 8)
	rw := b.startWorker(t, WorkerConfig{Threads: 1, IdleCheck: time.Hour, Solver: solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
		if req.Params["pageurl"] == "https://shop.example/busy" {
			entered <- struct{}{}
			select {
			case <-gate:
			case <-ctx.Done():
			}
		}
		order <- req.Params["pageurl"]
		return tokenSolver().Solve(ctx, req)
	})})
	busy := turnstileTask("busy")
	busy.Params["pageurl"] = "https://shop.example/busy"
	r0, err := b.client.Submit(ctx, busy)
	require.NoError(t, err)
	<-entered

	high := turnstileTask("high")
	high.Priority = "high"
	high.Params["pageurl"] = "https://shop.example/high"
	slow := recaptchaTask("slow")
	slow.Params["pageurl"] = "https://shop.example/slow"
	rs, err := b.client.SubmitAll(ctx, []Task{slow, high})
	require.NoError(t, err)
	for _, sub := range []string{wire.StoredSubject(wire.TaskFilter(LaneFast, wire.PriorityHigh)), wire.StoredSubject(wire.TaskFilter(LaneSlow, wire.PriorityNormal))} {
		require.Eventually(t, func() bool { return !hasWakeSub(wakeSubs(t, b.ns, rw.w.nc), sub) }, 5*time.Second, time.Millisecond,
			"the busy worker still listens on %s", sub)
	}
	later := recaptchaTask("slow-later")
	later.Params["pageurl"] = "https://shop.example/slow-later"
	rl, err := b.client.Submit(ctx, later)
	require.NoError(t, err)

	close(gate)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, b.client.WaitAll(wctx, append([]Receipt{r0, rl}, rs...), func(o Outcome, err error) {
		require.NoError(t, err, "a task waited for the idle check")
		require.Equal(t, StatusSolved, o.Status, o.ID)
	}))
	got := []string{<-order, <-order, <-order, <-order}
	require.Equal(t, []string{"https://shop.example/busy", "https://shop.example/high", "https://shop.example/slow", "https://shop.example/slow-later"}, got,
		"the high-priority task goes first once the thread is free")
}

// TestNoTaskWaitsForTheIdleCheckUnderChurn: two workers of two threads,
// whose idle check is an hour, take tasks of both lanes and priorities
// submitted in bursts while they solve (a solve takes a moment), so that
// their wake-up subscriptions end and start again many times. Every task
// is solved: a wake-up lost while a thread was idle would leave its task
// for the hour.
func TestNoTaskWaitsForTheIdleCheckUnderChurn(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	var solves atomic.Int64
	sv := solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
		// A solve holds its thread for a moment: 0–2 ms.
		select {
		case <-time.After(time.Duration(solves.Add(1)%3) * time.Millisecond):
		case <-ctx.Done():
		}
		return tokenSolver().Solve(ctx, req)
	})
	for range 2 {
		b.startWorker(t, WorkerConfig{Threads: 2, IdleCheck: time.Hour, Solver: sv})
	}
	// Under a minute of the hour-long idle check: a lost wake-up shows.
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var receipts []Receipt
	for burst := range 30 {
		tasks := make([]Task, 1+burst%7)
		for i := range tasks {
			id := fmt.Sprintf("churn-%02d-%d", burst, i)
			if (burst+i)%2 == 0 {
				tasks[i] = turnstileTask(id)
			} else {
				tasks[i] = recaptchaTask(id)
			}
			if (burst*7+i)%3 == 0 {
				tasks[i].Priority = "high"
			}
		}
		rs, err := b.client.SubmitAll(ctx, tasks)
		require.NoError(t, err)
		receipts = append(receipts, rs...)
		if burst%5 == 4 {
			// Let the workers run dry now and then: the next burst finds them idle.
			require.NoError(t, b.client.WaitAll(wctx, receipts[len(receipts)-len(rs):], func(o Outcome, err error) {
				require.NoError(t, err, "a task waited for the idle check")
			}))
		}
	}
	require.NoError(t, b.client.WaitAll(wctx, receipts, func(o Outcome, err error) {
		require.NoError(t, err, "a task waited for the idle check")
		require.Equal(t, StatusSolved, o.Status, o.ID)
	}))
}

// TestLimitedFeedListensAgainAfterAFailedLook: a lane-limited consumer
// whose wake-ups the worker ended while busy, and whose next look fails
// (here its consumer is gone for a moment, as while an operator recreates
// it), is listened to again: a task stored once it is back reaches the
// idle thread at once, not at the idle check (an hour).
func TestLimitedFeedListensAgainAfterAFailedLook(t *testing.T) {
	t.Parallel()
	top := Topology{LaneLimits: map[Lane]int{LaneSlow: 2}}
	b := setup(t, top)
	ctx := testContext(t)
	gate := make(chan struct{})
	entered := make(chan struct{}, 1)
	rw := b.startWorker(t, WorkerConfig{Threads: 1, IdleCheck: time.Hour, Solver: solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
		if req.Params["pageurl"] == "https://shop.example/busy" {
			entered <- struct{}{}
			select {
			case <-gate:
			case <-ctx.Done():
			}
		}
		return tokenSolver().Solve(ctx, req)
	})})
	busy := turnstileTask("busy")
	busy.Params["pageurl"] = "https://shop.example/busy"
	r0, err := b.client.Submit(ctx, busy)
	require.NoError(t, err)
	<-entered
	first, err := b.client.Submit(ctx, recaptchaTask("slow-first"))
	require.NoError(t, err)
	slowSub := wire.StoredSubject(wire.TaskFilter(LaneSlow, wire.PriorityNormal))
	require.Eventually(t, func() bool { return !hasWakeSub(wakeSubs(t, b.ns, rw.w.nc), slowSub) }, 5*time.Second, time.Millisecond,
		"the busy worker still listens on %s", slowSub)

	name := topology.ConsumerName(LaneSlow, wire.PriorityNormal)
	cfg, err := b.client.s.Consumer(ctx, name)
	require.NoError(t, err)
	saved := cfg.CachedInfo().Config
	require.NoError(t, b.client.s.DeleteConsumer(ctx, name))
	close(gate)
	require.NoError(t, b.client.WaitAll(ctx, []Receipt{r0}, func(o Outcome, err error) { require.NoError(t, err) }))
	// The freed thread looked at the slow lane and failed; then the
	// consumer is back (it starts again from the stream's first task).
	require.Eventually(t, func() bool { return hasWakeSub(wakeSubs(t, b.ns, rw.w.nc), slowSub) }, 5*time.Second, time.Millisecond,
		"the worker does not listen to %s again after its look failed", slowSub)
	_, err = b.client.s.CreateConsumer(ctx, saved)
	require.NoError(t, err)

	later, err := b.client.Submit(ctx, recaptchaTask("slow-later"))
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, b.client.WaitAll(wctx, []Receipt{first, later}, func(o Outcome, err error) {
		require.NoError(t, err, "a task waited for the idle check")
		require.Equal(t, StatusSolved, o.Status, o.ID)
	}))
}
