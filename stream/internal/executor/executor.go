package executor

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream/internal/jscall"
	"github.com/captchaq/captchaq/stream/internal/taskstore"
	"github.com/captchaq/captchaq/stream/wire"
)

// Executor takes deliveries of task messages to their next step, one at a
// time each (Execute). Its fields are set once, before the first Execute;
// every one is required unless it says otherwise.
type Executor struct {
	// Hooks is what the executor asks of the worker that runs it: its
	// clock, its lease, its dispatcher and its stop. Its methods are
	// called as the executor's own (x.Now()).
	Hooks
	// Name is the worker's name in the audit trail.
	Name string
	// Policy decides retries, snoozes and dead letters.
	Policy retry.Policy
	// Solver solves the captchas.
	Solver solver.Solver
	// TokenLifetimes is how long a solution stays usable, by method.
	TokenLifetimes map[string]time.Duration
	// DefaultDeadline applies to tasks that carry none: publish time plus
	// this.
	DefaultDeadline time.Duration
	// AckWait is the topology's ack wait: how long a write that records
	// what the service did may wait for the broker.
	AckWait time.Duration
	// Log receives one line per outcome and per problem.
	Log *slog.Logger

	// Store reads and writes the task's records.
	Store taskstore.Store
	// Completer finishes a delivery whose outcome is stored.
	Completer Completer
	// Room keeps attempts from starting that a full stream could not
	// record.
	Room Room
	// Held are the task generations whose attempt this worker recorded
	// and has not ended, for its heartbeats.
	Held *Held
	// Clock reads the broker's clock: token expiry and deadlines are on it.
	Clock *jscall.BrokerClock
	// Reach says how long ago the stream came back within this worker's
	// reach.
	Reach interface{ Settled(time.Duration) bool }
	// ScheduleCheck bounds how long a task that is not due waits between
	// deliveries, so that a cancel of it ends it within that time.
	ScheduleCheck time.Duration
	// Mover moves tasks that are not due to the waiting room and back, and
	// checks the copies it makes (optional: without it a task that is not
	// due waits on its lane's consumer, where the consumer counts it as
	// pending, and a moved copy is checked by the Store, when it can).
	Mover Mover
	// Forged decides which forged task messages (their envelope does not
	// hold together) are recorded, and which end without a record
	// (optional: without it every one is recorded).
	Forged *ForgedBudget
	// FreeHeld frees a delivery's worker thread and plan thread for the
	// next task once the service holds its captcha (solver.WithHeld: its
	// polls fail), as when the service is done with it, for a Solver that
	// sends the next task to another service while this one is silent
	// (package provider). The delivery goes on polling its captcha.
	FreeHeld bool
	// Retention is how long the stream keeps a task (its MaxAge; 0: no
	// limit): a task naming a use_at or not_before further from its store
	// time would wait until the stream drops it, without an outcome, so it
	// ends as invalid at once.
	Retention time.Duration
}

// Hooks is what an executor asks of the worker that runs it. Every method
// may be called from many deliveries at once.
type Hooks interface {
	// Now is the clock of what is recorded and decided on.
	Now() time.Time
	// Lease is how often a held task's lease is renewed.
	Lease() time.Duration
	// Observe receives every recorded step with its task.
	Observe(ev wire.Event, t wire.Task)
	// EarlyRelease is ctx with the plan thread given back once the service
	// probably solved the captcha, when the plan says so.
	EarlyRelease(ctx context.Context, t Thread) context.Context
	// LookAgainAfter makes the dispatcher look at lane's consumers when a
	// task handed back with delay d comes due, when that is sooner than
	// its idle check would (dispatcher.Dispatcher.LookAgainAfter): a hint,
	// which a restart may forget, since the stream keeps the task.
	LookAgainAfter(d time.Duration, lane wire.Lane)
	// StopWith notes that the worker stops because the service refuses it
	// (code): what is handed back from then on says so. StopCause is that
	// code, "" until then. Refused then tells the worker to stop taking
	// tasks.
	StopWith(code string)
	StopCause() string
	Refused(code string)
	// Abandon ends when the worker stops with the broker out of reach:
	// writes still to make give up then.
	Abandon() context.Context
	// Lead is how long before a task's use_at its solve starts: the
	// kind's solve time at a high quantile as the worker knows it.
	Lead(method string, params wire.Params) time.Duration
}

// Mover moves a task between its task subject and the waiting room
// (wire.SubjectLater).
type Mover interface {
	// Move publishes a moved copy of a task (taskstore.MovedCopy), once per
	// message it moves.
	Move(ctx context.Context, msg *nats.Msg) error
	// VerifyMoved checks that a scheduled event of generation gen of task
	// id names digest; an error wrapping taskstore.ErrForged says none
	// does, any other a failed read.
	VerifyMoved(ctx context.Context, id string, gen uint64, digest string) error
}

// Thread is the plan thread a delivery holds while the service works on
// its captcha. A nil *T of an implementation must be usable (no quota).
type Thread interface {
	// Release gives the thread back; it is safe to call more than once.
	Release()
	// AckWait is how long the thread is held without KeepAlive; 0: no
	// limit.
	AckWait() time.Duration
	// KeepAlive renews the hold.
	KeepAlive()
}

// Slot is the worker thread a delivery holds.
type Slot interface {
	// Solved frees the thread for the next task once the service is done,
	// when there is room for one more task recording its outcome; a
	// second call does nothing.
	Solved()
	// Detach frees the thread for the next task while the task goes on
	// (solver.WithDetach); Solved then does nothing.
	Detach()
}

// Room reserves the room an attempt's records take in the stream.
type Room interface {
	// Take reserves room for one attempt; false means no room (or the
	// size could not be read).
	Take(ctx context.Context, now time.Time) bool
	// Give returns the room of an attempt that ended.
	Give()
}

// Completer finishes a delivery whose outcome is stored: it acks the task
// message and erases it. How it batches that is its own affair.
type Completer interface {
	// Complete finishes the delivery m of the message at sequence seq
	// (its generation's, or a moved copy's); log is the delivery's.
	Complete(m jetstream.Msg, seq uint64, log *slog.Logger)
}

// Execute takes one delivered task message to its next step. It never
// panics on a bad message, never starts a solve whose attempt is not
// recorded, and never acks before the outcome is stored.
func (x *Executor) Execute(ctx context.Context, m jetstream.Msg, thread Thread, sl Slot) {
	if d, ok := x.opened(ctx, m); ok {
		x.run(ctx, d, thread, sl)
	}
}

// EndIfForged ends m as Execute does, holding no thread, if the task's
// records show it is not a submission of its id, and reports whether it
// did (or left m to lapse because the records could not be read); false:
// m is genuine and untouched, for a thread to Execute.
func (x *Executor) EndIfForged(ctx context.Context, m jetstream.Msg, thread Thread, sl Slot) bool {
	d, ok := x.opened(ctx, m)
	if !ok {
		return true
	}
	if !d.forged {
		return false
	}
	x.run(ctx, d, thread, sl)
	return true
}

// opened is open, with a read that failed left to lapse.
func (x *Executor) opened(ctx context.Context, m jetstream.Msg) (*delivery, bool) {
	d, err := x.open(ctx, m)
	if err != nil {
		// Leave it to lapse: open already retried for a while. A worker
		// that is stopping says nothing: every task it held comes back
		// the same way, and its stop has been said.
		if ctx.Err() == nil {
			x.Log.Warn("cannot read task state; it comes back after the ack wait", slog.Any("error", err))
		}
		return nil, false
	}
	return d, true
}

// run carries the opened delivery d to its end.
func (x *Executor) run(ctx context.Context, d *delivery, thread Thread, sl Slot) {
	if d.unrecorded {
		d.endForged()
		return
	}
	d.thread = thread
	if d.resume(ctx) {
		return
	}
	base, crashed, ok := d.admit(ctx)
	if !ok {
		return
	}
	d.attempt(ctx, base, crashed, sl)
}
