// Package dispatcher is how a worker with free threads takes tasks: which
// consumer it asks next, when (a publish seen, a task of the lane
// finished, an idle tick), a plan thread before each task when a
// plan-wide quota is set, and the worker threads (slots) the executor
// runs deliveries in.
package dispatcher

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/solver"
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
	// Drain ends, beside the worker's threads and without blocking, a task
	// message whose headers show it forged (wire.HeadersForged), which
	// Fetch takes in bulk while a feed serves such messages (DrainBatch).
	// nil: such messages take a thread like any other.
	Drain func(m jetstream.Msg)
	// Check judges, beside the worker's threads and without blocking, a
	// task message whose headers hold but name records (a replay or a
	// moved copy: NeedsRecords), which Fetch takes in bulk as it does
	// forged ones: Check ends it if the records show it forged, or else
	// hands it back to its consumer having called Verified, so that a
	// thread takes it next. nil: such messages take a thread like any
	// other.
	Check func(m jetstream.Msg)
	// Listen starts the wake-up subscription of f: woken is to be called
	// for each task the stream stores on f's subjects, until stop is
	// called. nil: the dispatcher holds no subscriptions, and whoever
	// learns of tasks reports them with News.
	Listen func(f *Feed, woken func()) (stop func(), err error)
	// Room, when set, bounds the tasks taken at once to the room of the
	// solving client's learned plan window: a task the window cannot
	// admit would wait behind this worker's captchas while another worker
	// may have room for it. Each task taken carries its claim in its slot
	// (Slot.Claim), and gives it back when its delivery ends.
	Room WindowRoom

	turn int // rotates the lane looked at first, so lanes share fairly
	// highStreak counts the fetches in a row that took only high-priority
	// tasks while a normal one may have waited (NormalShare).
	highStreak int
	// wake tells an idle dispatch loop to look for tasks now.
	wake chan struct{}
	// free holds a token per idle thread once Pull runs; holding counts
	// the tokens the dispatch loop took to fetch tasks for.
	free    atomic.Pointer[chan struct{}]
	holding atomic.Int32
	// listening is set from ListenAll until QuietAll.
	listening atomic.Bool
	// verified holds the stream sequences of messages Check found
	// genuine, until a thread takes them (guarded by verifiedMu).
	verifiedMu sync.Mutex
	verified   map[uint64]struct{}
	// away counts the tasks that go on after giving their threads back.
	away atomic.Int32
}

// Away is how many tasks go on now after giving their threads back: their
// captchas wait at a per-solve service (Slot.Detach), or the service is
// done with them, or holds them in silence (Slot.Solved). The threads in
// use are the tasks in hand less these.
func (dp *Dispatcher) Away() int { return int(dp.away.Load()) }

// WindowRoom is a solving client's learned plan window (solver.Client).
type WindowRoom interface {
	// ClaimPlanRoom reserves up to n threads of the window for tasks about
	// to be solved and returns the claims.
	ClaimPlanRoom(n int) []*solver.PlanClaim
	// PlanRoomChanged is closed when the window may have room again.
	PlanRoomChanged() <-chan struct{}
}

// New is a dispatcher of feeds; set the rest of its fields before Pull.
func New(feeds []*Feed) *Dispatcher {
	return &Dispatcher{Feeds: feeds, wake: make(chan struct{}, 1)}
}

// Pull takes tasks, one per free thread and plan thread, and hands each to
// start with its plan thread and its slot, until ctx ends or fatal says
// the service refuses the worker; it returns that refusal (nil when ctx
// ended). start runs the task in another goroutine, and must End the slot
// and Release the thread when the task ends.
func (dp *Dispatcher) Pull(ctx context.Context, fatal <-chan error, start func(m jetstream.Msg, thread *PlanThread, sl *Slot)) error {
	free := make(chan struct{}, dp.Threads)
	for range dp.Threads {
		free <- struct{}{}
	}
	dp.free.Store(&free)
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
		var claims []*solver.PlanClaim
		var roomChanged <-chan struct{}
		if dp.Room != nil && dp.AnyNews() {
			// Asked for before the claim, so that room made after it wakes
			// the loop.
			roomChanged = dp.Room.PlanRoomChanged()
			claims = dp.Room.ClaimPlanRoom(n)
			for range n - len(claims) {
				free <- struct{}{}
			}
			n = len(claims)
		}
		dp.holding.Store(int32(n))
		switch {
		case n == 0:
			// The window is full: wait for room in it (or news, which may
			// be of a high-priority task, or a stop) below.
		case !dp.AnyNews():
			// Nothing can be waiting: take no plan thread just to find that out.
			for range n {
				free <- struct{}{}
			}
			dp.holding.Store(0)
		default:
			// A plan thread first (when a plan-wide quota is set), then a task for it.
			threads, err := dp.Plan.Acquire(ctx, n, dp.IdleCheck, dp.Now())
			if err != nil && ctx.Err() == nil {
				dp.Log.Warn("take a plan thread", slog.Any("error", err))
			}
			for range n - len(threads) {
				free <- struct{}{}
			}
			claims = giveBack(claims, len(threads))
			dp.holding.Store(int32(len(threads)))
			if len(threads) == 0 {
				if err != nil {
					Pause(ctx, dp.IdleCheck)
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
				giveBack(claims, 0)
				return err
			default:
			}
			msgs := dp.Fetch(ctx, len(threads))
			for i, m := range msgs {
				dp.holding.Add(-1) // busy from now on
				sl := NewSlot(free, finishing)
				sl.away = &dp.away
				if claims != nil {
					sl.claim = claims[i]
				}
				start(m, threads[i], sl)
			}
			for _, t := range threads[len(msgs):] {
				t.Release()
				free <- struct{}{}
			}
			giveBack(claims, len(msgs))
			dp.holding.Store(0)
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
		case <-roomChanged:
		case <-idle.C:
			// Retries and redeliveries come due without a publish.
			dp.BumpAll()
		}
	}
}

// giveBack releases the claims from keep on, which no task took, and
// returns those before it.
func giveBack(claims []*solver.PlanClaim, keep int) []*solver.PlanClaim {
	if keep >= len(claims) {
		return claims
	}
	for _, c := range claims[keep:] {
		c.Release()
	}
	return claims[:keep]
}

// idle reports whether the worker has a thread without a task: one free,
// or taken by the dispatch loop to fetch a task for. Before Pull runs, every
// thread is idle.
func (dp *Dispatcher) idle() bool {
	free := dp.free.Load()
	return free == nil || len(*free)+int(dp.holding.Load()) > 0
}

// Pause waits for d or until ctx ends: the idle tick of a worker's loops
// (the dispatcher's and the waiting room's), which a stop cuts short.
func Pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
