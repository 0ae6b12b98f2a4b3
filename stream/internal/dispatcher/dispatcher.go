// Package dispatcher is how a worker with free threads takes tasks: which
// consumer it asks next, when (a publish seen, a task of the lane
// finished, an idle tick), a plan thread before each task when a
// plan-wide quota is set, and the worker threads (slots) the executor
// runs deliveries in.
package dispatcher

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/stream/internal/jscall"
)

// Dispatcher feeds a worker's threads. Set its exported fields, then call
// Pull once.
type Dispatcher struct {
	// Feeds are the workers' consumers, high priority in every lane first.
	Feeds []*Feed
	// Threads is how many tasks the worker solves at once.
	Threads int
	// IdleCheck is how often an idle dispatcher looks for retries that
	// came due.
	IdleCheck time.Duration
	// Now is the worker's clock.
	Now func() time.Time
	// Plan hands out the plan's threads.
	Plan *PlanGate
	// Reach notes whether the stream answers the fetches.
	Reach *jscall.Reach
	// Log receives the dispatcher's problems.
	Log *slog.Logger

	turn int // rotates the lane looked at first, so lanes share fairly
	// wake tells an idle dispatch loop to look for tasks now.
	wake chan struct{}
}

// New is a dispatcher of feeds; set the rest of its fields before Pull.
func New(feeds []*Feed) *Dispatcher {
	return &Dispatcher{Feeds: feeds, wake: make(chan struct{}, 1)}
}

// Pull takes tasks, one per free thread and plan thread, and hands each to
// start with its plan thread and its slot, until ctx ends or fatal says
// the service refuses the worker; it returns that refusal (nil when ctx
// ended). start runs the task in a goroutine of its own, and must End the
// slot and Release the thread when the task ends.
func (dp *Dispatcher) Pull(ctx context.Context, fatal <-chan error, start func(m jetstream.Msg, thread *PlanThread, sl *Slot)) error {
	free := make(chan struct{}, dp.Threads)
	for range dp.Threads {
		free <- struct{}{}
	}
	finishing := make(chan struct{}, FinishingPerThread*dp.Threads)
	idle := time.NewTicker(dp.IdleCheck)
	defer idle.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-fatal:
			return err
		case <-free:
		}
		select {
		case err := <-fatal:
			return err // the service refused us meanwhile: not one more task
		default:
		}
		select {
		case <-idle.C:
			// A worker kept busy by one lane still looks at the others
			// (retries and redeliveries come due without a publish).
			dp.BumpAll()
		default:
		}
		n := 1
	more:
		for n < dp.Threads {
			select {
			case <-free:
				n++
			default:
				break more
			}
		}
		if !dp.AnyNews() {
			// Nothing can be waiting: take no plan thread just to find that out.
			for range n {
				free <- struct{}{}
			}
		} else {
			// A plan thread first (when a plan-wide quota is set), then a task for it.
			threads, err := dp.Plan.Acquire(ctx, n, dp.IdleCheck, dp.Now())
			if err != nil && ctx.Err() == nil {
				dp.Log.Warn("take a plan thread", slog.Any("error", err))
			}
			for range n - len(threads) {
				free <- struct{}{}
			}
			if len(threads) == 0 {
				if err != nil {
					pause(ctx, dp.IdleCheck)
				}
				continue // the quota is in use: acquire waited for a thread already
			}
			select {
			case err := <-fatal:
				// Refused while we waited for a plan thread: not one more task.
				for _, t := range threads {
					t.Release()
					free <- struct{}{}
				}
				return err
			default:
			}
			msgs := dp.Fetch(ctx, len(threads))
			for i, m := range msgs {
				start(m, threads[i], NewSlot(free, finishing))
			}
			for _, t := range threads[len(msgs):] {
				t.Release()
				free <- struct{}{}
			}
			if len(msgs) > 0 {
				continue
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-fatal:
			return err
		case <-dp.wake:
		case <-idle.C:
			// Retries and redeliveries come due without a publish.
			dp.BumpAll()
		}
	}
}

// pause waits for d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
