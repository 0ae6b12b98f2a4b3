// Dispatch: which consumer a worker with free threads asks next, and how
// it learns that one may have a task (a publish seen, a task of the lane
// finished, an idle tick) without asking consumers that have none.

package dispatcher

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/stream/wire"
)

// Fetch pulls up to n tasks without waiting: high priority first, in every
// lane, then normal, except that a normal task waiting behind high ones
// has its share (NormalShare). Exactly one message is pulled per free
// thread, so no task's ack timer starts while it waits in a local buffer.
func (dp *Dispatcher) Fetch(ctx context.Context, n int) []jetstream.Msg {
	var out []jetstream.Msg
	dp.turn++
	order, share := dp.rotated()
	high, normal := 0, 0
	for i, f := range order {
		if len(out) == n || ctx.Err() != nil {
			break
		}
		isHigh := f.Priority == wire.PriorityHigh
		// The share is one normal task, from the normal consumers that
		// come first in a share's order.
		shareLook := share && !isHigh && i < len(order)-len(dp.Feeds)
		if shareLook && normal > 0 {
			continue
		}
		if !isHigh && !share && dp.highRechecking() {
			break // a high-priority task may be about to show: no normal task takes its thread
		}
		seen := f.News.Load()
		if seen == f.EmptyAt.Load() {
			continue // nothing new since it was last found empty
		}
		want := n - len(out)
		if shareLook {
			want = 1
		}
		take := want // tasks for the threads; a drain's batch asks for more
		if dp.Drain != nil {
			want = max(want, int(f.drainWant.Load()))
		}
		var batch jetstream.MessageBatch
		var err error
		if f.Limited {
			batch, want, err = dp.fetchLimited(ctx, f, want)
		} else {
			batch, err = f.Cons.FetchNoWait(want)
		}
		if err != nil {
			dp.Log.Debug("fetch tasks", slog.String("consumer", f.Cons.CachedInfo().Name), slog.Any("error", err))
			dp.Reach.Failed(dp.Log, "fetch tasks", err)
			// Listen again: the wake-ups may have ended while the worker was
			// busy, and the failed look leaves f's news pending, so a task
			// stored from now on wakes the loop to look once more.
			dp.relisten(f, true)
			continue
		}
		if batch == nil {
			f.EmptyAt.Store(seen) // at its lane limit: a task of the lane finishing makes room
			dp.relisten(f, false)
			continue
		}
		got, taken, drained, judged, handed, size := 0, 0, 0, 0, 0, 0
		for m := range batch.Messages() {
			got++
			size += len(m.Data())
			switch {
			case dp.Drain != nil && wire.HeadersForged(m.Subject(), m.Headers()) != nil:
				dp.Drain(m)
				drained++
			case taken < take:
				if dp.Check != nil && NeedsRecords(m) {
					dp.forgetVerified(m)
					judged++ // by its thread, on the records
				}
				out = append(out, m)
				taken++
			case dp.Check != nil && NeedsRecords(m) && !dp.isVerified(m):
				dp.Check(m)
				drained++
			default:
				// Past the threads, in a drain's batch: back to the
				// consumer at once, which hands it out again before any
				// message stored after it.
				_ = m.Nak()
				handed++
			}
		}
		if judged*2 > got {
			// Mostly moved or replay-shaped copies, which a producer may
			// publish as a flood: the next fetches take them in bulk. One
			// among tasks (a scheduled task come due in a backlog) leaves
			// the fetches one per free thread.
			drained += judged
		}
		dp.drainNext(f, drained, got, size)
		if isHigh {
			high += taken
		} else {
			normal += taken
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			dp.Log.Debug("fetch tasks", slog.String("consumer", f.Cons.CachedInfo().Name), slog.Any("error", err))
			dp.Reach.Failed(dp.Log, "fetch tasks", err)
		} else if got > 0 {
			// Only a message fetched proves the round trip: a no-wait
			// fetch that the broker never answers ends after a second
			// without an error, as an empty one does.
			dp.Reach.Answered(dp.Log)
		}
		if got < want {
			f.EmptyAt.Store(seen)
			dp.relisten(f, dp.recheck(f, got == 0))
		}
		if drained > 0 || handed > 0 {
			// More may follow at once, and a task handed back makes no
			// news (no publish stores it again): look again without
			// waiting for news, or it waits for the idle check.
			f.News.Add(1)
			dp.Poke()
		}
	}
	if share {
		dp.highStreak = 0 // the normal consumers had their look, task or not
	} else {
		dp.settle(high, normal)
	}
	return out
}

// storeLag bounds how long after the wake-up subscription sees a publish the
// stream may take to store it: the server hands the message to subscribers
// and to the stream's own queue at once, so a fetch sent on the news can come
// back empty for a task stored a moment later.
const storeLag = 50 * time.Millisecond

// recheckDelays are the waits before looking at a consumer again after a
// Fetch on fresh news found it short: 2, 6 and 18 ms after that fetch.
var recheckDelays = [...]time.Duration{2 * time.Millisecond, 6 * time.Millisecond, 18 * time.Millisecond}

// recheck looks at f again shortly after a fetch found it short, when the
// last publish seen for it came within storeLag: a task may not be stored,
// or not yet counted by the consumer (the producer's acknowledgement can come
// first). At most len(recheckDelays) times per publish, so a lane that other
// workers keep empty costs at most three extra fetches per publish. When the
// Fetch found nothing (empty), until the first of them has looked fetch takes
// no normal task if f is a high-priority consumer: a freshly published
// high-priority task is not to lose the thread to a normal one; that holds
// normal tasks back at most 2 ms per high-priority publish this worker found
// empty. Only after an empty fetch: holding them after short fetches too
// would starve the normal backlog under steady high-priority traffic. It
// reports whether it will look again.
func (dp *Dispatcher) recheck(f *Feed, empty bool) bool {
	at := f.newsAt.Load()
	if time.Duration(time.Now().UnixNano()-at) > storeLag {
		return false
	}
	f.mu.Lock()
	if f.recheckFor != at {
		f.recheckFor, f.rechecks = at, 0
	}
	if f.rechecks == len(recheckDelays) {
		f.mu.Unlock()
		return false
	}
	d, hold := recheckDelays[f.rechecks], empty && f.rechecks == 0
	f.rechecks++
	f.mu.Unlock()
	if hold {
		f.rechecking.Add(1)
	}
	time.AfterFunc(d, func() {
		f.News.Add(1)
		if hold {
			f.rechecking.Add(-1)
		}
		dp.Poke()
	})
	return true
}

// highRechecking reports whether a high-priority consumer is to be looked at
// again in a moment (recheck's first look).
func (dp *Dispatcher) highRechecking() bool {
	for _, f := range dp.Feeds {
		if f.Priority == wire.PriorityHigh && f.rechecking.Load() > 0 {
			return true
		}
	}
	return false
}

// Feed is one of the workers' consumers, with what this worker knows of it:
// News counts events that may have put a task there (a publish seen on the
// wake-up subscription, a task of its lane finished here, an idle tick), and
// emptyAt is the value news had when a fetch last came back short. A feed
// with no news since it was found empty is not asked: no empty round trips.
type Feed struct {
	Cons     jetstream.Consumer
	Lane     wire.Lane
	Priority wire.Priority
	// Limited is set when the consumer's MaxAckPending is a lane limit.
	Limited bool
	News    atomic.Uint64
	EmptyAt atomic.Uint64
	// newsAt is when the wake-up subscription last saw a publish for it
	// (Unix ns); rechecks counts the rechecks made for the publish seen at
	// recheckFor.
	newsAt     atomic.Int64
	rechecking atomic.Int32 // first rechecks after an empty fetch, scheduled and not yet made
	// drainWant is how many messages the next fetch asks for at least
	// while forged ones come (drainNext); 0 otherwise.
	drainWant atomic.Int32
	// freed is set when this worker acked a task of a limited feed's lane
	// and no fetch of the feed has looked since (LaneFreed).
	freed      atomic.Bool
	mu         sync.Mutex
	recheckFor int64
	rechecks   int
	// listener is the feed's wake-up subscription, nil while it has none
	// (guarded by mu).
	listener *listener
}

// listener is one wake-up subscription of a feed.
type listener struct{ stop func() }

// News notes a task published on subject (captcha.tasks.<lane>.<priority>.<id>).
func (dp *Dispatcher) News(subject string) {
	rest, ok := strings.CutPrefix(subject, wire.SubjectTasks+".")
	if !ok {
		return
	}
	lane, rest, _ := strings.Cut(rest, ".")
	priority, _, _ := strings.Cut(rest, ".")
	for _, f := range dp.Feeds {
		if string(f.Lane) == lane && string(f.Priority) == priority {
			f.newsAt.Store(time.Now().UnixNano())
			f.News.Add(1)
		}
	}
}

// Wake-ups come only while they can tell the worker something. A feed is
// listened to (Listen) unless it is known to have news: then the next free
// thread asks it anyway, and a wake-up per task stored on it meanwhile would
// say nothing new. So a wake-up that comes while every thread is busy ends
// the feed's subscription (the wake-up itself is the news), and a fetch that
// finds the feed short starts it again, then has the feed asked once more,
// so that a task stored between that fetch and the subscription is not left
// for the idle check. Under a backlog the workers' connections receive no
// wake-up per task; an idle worker is woken by every task as before; and a
// task of another lane or priority still wakes a busy worker once, so that
// its next free thread takes it in its turn.

// woken notes a wake-up of f, from its subscription l: a task stored for it.
// With no idle thread, or while f is drained of forged messages (which
// looks at it again after each fetch on its own, and leaves the threads
// idle), l ends first (before the news is noted, so whoever sees the news
// knows the subscription was ended): a flood does not cost the worker a
// wake-up per message.
func (dp *Dispatcher) woken(f *Feed, l *listener) {
	if !dp.idle() || f.drainWant.Load() > 0 {
		f.mu.Lock()
		if f.listener == l {
			l.stop()
			f.listener = nil
		}
		f.mu.Unlock()
	}
	f.newsAt.Store(time.Now().UnixNano())
	f.News.Add(1)
	dp.Poke()
}

// listen starts f's wake-up subscription unless it has one, and reports
// whether it started one.
func (dp *Dispatcher) listen(f *Feed) (bool, error) {
	if dp.Listen == nil {
		return false, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.listener != nil || !dp.listening.Load() {
		return false, nil
	}
	l := &listener{}
	stop, err := dp.Listen(f, func() { dp.woken(f, l) })
	if err != nil {
		return false, err
	}
	l.stop, f.listener = stop, l
	return true, nil
}

// relisten starts f's wake-up subscription again after a fetch found f
// short (or failed), and has f asked once more, unless a recheck will or
// its news is still pending (looking): a task
// stored after that fetch and before the subscription would have no
// wake-up. That look counts as fresh news (recheck), because the consumer
// may count a task stored just before the subscription a moment late.
// Without a subscription (it could not be made: the connection is closing)
// f is asked again at the idle check.
func (dp *Dispatcher) relisten(f *Feed, looking bool) {
	started, err := dp.listen(f)
	if err != nil {
		dp.Log.Warn("listen for new tasks", slog.String("consumer", f.Cons.CachedInfo().Name), slog.Any("error", err))
		return
	}
	if started && !looking {
		f.newsAt.Store(time.Now().UnixNano())
		f.News.Add(1)
		dp.Poke()
	}
}

// ListenAll starts the wake-up subscription of every feed (Listen), and
// has the dispatcher keep them as the feeds need them until QuietAll.
func (dp *Dispatcher) ListenAll() error {
	dp.listening.Store(true)
	for _, f := range dp.Feeds {
		if _, err := dp.listen(f); err != nil {
			return err
		}
	}
	return nil
}

// QuietAll ends the wake-up subscription of every feed.
func (dp *Dispatcher) QuietAll() {
	dp.listening.Store(false)
	for _, f := range dp.Feeds {
		f.mu.Lock()
		if f.listener != nil {
			f.listener.stop()
			f.listener = nil
		}
		f.mu.Unlock()
	}
}

// AnyNews reports whether some consumer may have a task for this worker.
func (dp *Dispatcher) AnyNews() bool {
	for _, f := range dp.Feeds {
		if f.News.Load() != f.EmptyAt.Load() {
			return true
		}
	}
	return false
}

// BumpAll marks every consumer as worth asking again.
func (dp *Dispatcher) BumpAll() {
	for _, f := range dp.Feeds {
		f.News.Add(1)
	}
}

// Poke wakes the dispatch loop if it is idle.
func (dp *Dispatcher) Poke() {
	select {
	case dp.wake <- struct{}{}:
	default:
	}
}

// LookAgainAfter makes the worker look at lane's consumers when a task it
// handed back with delay d comes due, when that is sooner than the idle
// check would.
func (dp *Dispatcher) LookAgainAfter(d time.Duration, lane wire.Lane) {
	if d >= dp.IdleCheck {
		return
	}
	time.AfterFunc(d+10*time.Millisecond, func() {
		dp.LaneFreed(lane)
		dp.Poke()
	})
}

// LaneFreed notes that a task of lane finished here: a lane held at its
// limit may hand out another one now. It wakes the dispatch loop when the
// lane has a limit: the task's thread went back before its ack made the
// room (Slot.Solved), so an idle thread may have found the lane full and
// be waiting for news.
func (dp *Dispatcher) LaneFreed(lane wire.Lane) {
	for _, f := range dp.Feeds {
		if f.Lane == lane {
			f.News.Add(1)
		}
	}
	dp.LaneAcked(lane)
}

// LaneAcked notes that a task of lane was acked here, when the ack comes
// after the task ended (LaneFreed): a lane held at its limit has room from
// then on, and the dispatch loop is woken to use it.
func (dp *Dispatcher) LaneAcked(lane wire.Lane) {
	limited := false
	for _, f := range dp.Feeds {
		if f.Lane == lane && f.Limited {
			f.freed.Store(true)
			f.News.Add(1)
			limited = true
		}
	}
	if limited {
		dp.Poke()
	}
}
