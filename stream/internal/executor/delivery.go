// Executing one delivery of a task message: delivery owns the delivery's
// state and every write made for it. The dispatcher hands it a message and
// a plan thread; what to record and what comes next is decided by the pure
// functions of decide.go; the records are written through the Store
// (record.go, finish.go, token.go).

package executor

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/internal/dialect/classic"
	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream/internal/jscall"
	"github.com/captchaq/captchaq/stream/internal/taskstore"
	"github.com/captchaq/captchaq/stream/wire"
)

// delivery is one delivery of a task message being executed.
type delivery struct {
	x      *Executor
	m      jetstream.Msg
	id     string
	gen    uint64
	number uint64 // the delivery's number (1: the first)
	// submitted is when the task message was stored.
	submitted time.Time
	task      wire.Task
	// parsed is set once task holds the body's parse (parse), and
	// parseErr what the parse said.
	parsed   bool
	parseErr error
	invalid  error
	// forged is set when the message's envelope (subject id, message id,
	// id header) does not hold together: it is not a submission of its id.
	forged bool
	// unrecorded is set for a forged delivery the ForgedBudget ends
	// without a record.
	unrecorded bool
	deadline   time.Time
	st         taskstore.GenState
	log        *slog.Logger
	// thread is the plan thread held for this task (nil without a quota).
	thread Thread
	// assumed is true while st is an assumption (first delivery), not a read.
	assumed bool
	// useAt and notBefore are the task's, as instants on the broker's
	// clock (zero: none).
	useAt, notBefore time.Time
	// seq is the delivered message's own stream sequence: gen, but for a
	// moved copy (moved), which names the generation it is a copy of.
	seq   uint64
	moved bool
	// inRoom is set for a delivery from the waiting room.
	inRoom bool
	// digest is the message's digest as its generation's
	// (wire.MovedDigest).
	digest string
	// attemptSeq is the sequence of the attempt's event, once recorded.
	attemptSeq uint64
	// captcha is the last captcha the service accepted for the attempt
	// (zero: none yet).
	captcha solver.Accepted
	// slot is the worker thread of the attempt under way.
	slot Slot
}

// parse parses the task message's body into task the first time it is
// called, however many checks read it, and returns what it said.
func (d *delivery) parse() (wire.Task, error) {
	if !d.parsed {
		d.task, d.parseErr = wire.ParseTask(d.m.Data())
		d.parsed = true
	}
	return d.task, d.parseErr
}

// resume finishes a generation that an earlier delivery took to its end
// but did not finish, and reports whether it did.
func (d *delivery) resume(ctx context.Context) bool {
	switch resumeFrom(d.st, d.x.Clock.BrokerTime(d.x.Now())) { // token expiry is on the broker's clock
	case resumeAck:
		d.done()
	case resumeDead:
		d.finishDead(ctx, retry.Reason(d.st.Last.Reason), d.st.Last.LastCode)
	case resumeExpired:
		d.finishExpired(ctx)
	case resumeToken:
		return d.finishFromToken(ctx)
	default:
		return false
	}
	return true
}

// admit decides whether the delivery may make an attempt: not when the
// message is not a valid task, was canceled, or has its budget or deadline
// spent (each ends it dead). It returns the event every step of the attempt
// starts from, and whether the last attempt died with its worker.
func (d *delivery) admit(ctx context.Context) (base wire.Event, crashed bool, ok bool) {
	if underWay(d.st.Last) && d.attemptLives(ctx) {
		// Its worker is alive and still holds it (the broker lost track of
		// the delivery, a restart say): paying the service again would pay
		// twice. Look again after the next heartbeat.
		d.log.Info("the last attempt's worker is alive and holds the task: waiting for it", slog.String("holder", d.st.Last.Worker))
		_ = d.m.NakWithDelay(wire.HeartbeatEvery)
		return wire.Event{}, false, false
	}
	carried, crashed := carryOver(d.st.Last, d.x.Now())
	if crashed {
		d.log.Warn("the last attempt died with its worker", slog.Int("attempts", carried.Attempts))
	}
	base = carried
	base.Gen, base.Method, base.Worker, base.Delivery, base.Host = d.gen, d.task.Method, d.x.Name, d.number, wire.PageHost(d.task.Params)
	base.Submitted, base.Client = d.submitted, d.m.Headers().Get(wire.HeaderClient)

	if d.invalid != nil {
		d.deadLetter(ctx, base, invalidVerdict(d.invalid, d.forged))
		return base, crashed, false
	}
	if detail, ok := d.canceled(ctx); ok {
		d.deadLetter(ctx, base, canceledVerdict(detail))
		return base, crashed, false
	}
	if by, late := wire.StoredLate(d.id, d.m.Headers(), d.submitted); late && carried.Attempts == 0 && !crashed {
		// Stored after its producer had given up on it and told its caller
		// so: an attempt would pay for a task no one waits for, and the
		// caller's retry would pay again.
		d.deadLetter(ctx, base, lateVerdict(by, d.submitted))
		return base, crashed, false
	}
	if v, ok := startVerdict(d.x.Policy, carried, crashed, d.deadline, d.x.Now()); !ok {
		d.deadLetter(ctx, base, v)
		return base, crashed, false
	}
	if carried.Attempts == 0 && !crashed {
		if until, lead, ok := d.notDue(); ok {
			d.wait(ctx, base, until, lead)
			return base, crashed, false
		}
	}
	if d.inRoom {
		// Due: back to its lane, whose limit, priority and plan apply to it
		// as to any task. No attempt starts from the waiting room.
		d.move(ctx, base, wire.TaskSubjectOf(d.m.Subject()))
		return base, crashed, false
	}
	return base, crashed, true
}

// attempt records an attempt, has the service solve the captcha, and
// records what came of it (afterAttempt): the solve, a retry or snooze, a
// dead letter, or a hand-back.
//
// The attempt is recorded before the service hears of the captcha: a solve
// that could not be counted (a full stream, a broker outage) is never paid
// for, and every paid solve is in the audit trail.
func (d *delivery) attempt(ctx context.Context, base wire.Event, crashed bool, sl Slot) {
	start := d.x.Now()
	if !d.x.Room.Take(ctx, start) {
		if ctx.Err() != nil {
			_ = d.m.Nak() // stopping: another worker may take it now
			return
		}
		d.log.Warn("the stream is full (or its size could not be read): no attempt starts that could not be recorded; it comes back later")
		_ = d.m.NakWithDelay(d.x.Lease())
		return
	}
	defer d.x.Room.Give()
	ev := base
	ev.Kind, ev.Attempts, ev.At, ev.Crashed = wire.EventAttempt, base.Attempts+1, start, crashed
	// A crash spends its attempt as before (the crash budget still ends a
	// task that kills every worker that takes it); the new attempt polls
	// the dead worker's captcha, if the records name one, and pays nothing.
	resumeID, resumeAt, resume := captchaToResume(d.st.Last)
	resumeFrom, resumeOn := d.st.Last.Worker, d.st.Last.Provider
	var unsolvableOn string // the provider that called the captcha unsolvable on the attempt before
	if l := d.st.Last; l.Kind == wire.EventRetry && l.Code == classic.CodeCaptchaUnsolvable {
		unsolvableOn = l.Provider
	}
	// Held from before the attempt is recorded to the end of the delivery:
	// every heartbeat sent while the attempt's record is the task's last
	// names the task (attemptLives).
	held := wire.HeldTask{ID: d.id, Gen: d.gen}
	d.x.Held.Add(held)
	defer d.x.Held.Remove(held)
	if !d.record(ctx, ev) {
		if ctx.Err() != nil {
			// The worker is stopping (its write was cut short, not refused):
			// hand the task back at once, as a stopping worker does with
			// every task it holds, instead of after a heartbeat.
			_ = d.m.Nak()
			return
		}
		_ = d.m.NakWithDelay(d.x.Lease())
		return
	}
	d.attemptSeq = d.st.LastSeq
	req := solver.Request{Method: d.task.Method, Params: d.task.Params, Producer: d.m.Headers().Get(wire.HeaderClient)}
	if resume {
		// The records hold when it was accepted on the broker's clock: the
		// worker that submitted it may have had another clock than this one.
		req.CaptchaID, req.Submitted = resumeID, d.x.Clock.LocalTime(resumeAt)
		req.Provider = resumeOn // the provider that accepted it
		d.log.Info("resuming the captcha the service accepted for the last attempt", slog.String("captcha_id", resumeID),
			slog.String("from", resumeFrom))
	} else {
		req.Unsolvable = unsolvableOn
	}
	d.slot = sl
	tctx, endTrace := traceAttempt(ctx, d)
	ans, serr := d.solve(d.x.EarlyRelease(tctx, d.thread), req, ev)
	endTrace(serr)
	if solver.ClassOf(serr) != retry.Fatal {
		sl.Solved() // the next task may start while this one is recorded
	}
	end := d.x.Now()
	ev.Seconds = end.Sub(start).Seconds()
	res := attemptResult{ev: ev, err: serr, shutdown: ctx.Err() != nil, end: end, deadline: d.deadline}
	if code := d.x.StopCause(); code != "" {
		res.stopCode = code
	}
	// What follows records what the service already did: it must not fail
	// because the worker is stopping. An answer is paid for: it is kept
	// until the broker takes it (finishSolved), not for an ack wait only.
	nx := afterAttempt(d.x.Policy, res)
	if nx.kind != nextSolved && d.captcha.ID != "" {
		// What became of the attempt's captcha: the code says. A handback
		// leaves it to the next delivery, which polls it again.
		nx.ev.CaptchaID, nx.ev.Provider = d.captcha.ID, d.captcha.Provider
		if nx.kind == nextHandback || nx.kind == nextStop {
			nx.ev.AcceptedAt = d.brokerTime(d.captcha.At)
		}
	}
	if solver.MayBePaid(serr) {
		// The service may have taken the captcha with its reply lost: no
		// one knows its id, and the next attempt submits again; or the
		// budget is spent, and the dead letter says it first (its detail
		// is cut to fit an event).
		detail := mayBePaid
		if p := solver.ProviderOf(serr); p != "" {
			detail += " on provider " + p
			if nx.ev.Provider == "" {
				nx.ev.Provider = p
			}
		}
		switch nx.kind {
		case nextRetry, nextHandback:
			nx.ev.Detail = detail
		case nextDead:
			nx.verdict.detail = detail + "; " + nx.verdict.detail
		}
	}
	patience := d.x.AckWait
	if nx.kind == nextSolved {
		patience = 0
	}
	hard := ctx
	ctx, cancel := withPatience(context.WithoutCancel(ctx), patience)
	defer cancel()
	if patience == 0 {
		// A worker past its shutdown grace waits an ack wait more, as for
		// any other record, then gives the task up (its log says so).
		defer context.AfterFunc(hard, func() { time.AfterFunc(d.x.AckWait, cancel) })()
	}
	// Unless the worker stops with the broker out of reach: then nothing
	// can be written, and the stop does not wait for it (Run says which
	// tasks it could not hand back).
	defer context.AfterFunc(d.x.Abandon(), cancel)()

	switch nx.kind {
	case nextSolved:
		d.finishSolved(ctx, nx.ev, ans, start, end)
	case nextRetry:
		if d.record(ctx, nx.ev) {
			_ = d.m.NakWithDelay(nx.delay)
			d.x.LookAgainAfter(nx.delay, wire.LaneOfSubject(d.m.Subject()))
		}
		d.log.Info("attempt failed", slog.String("code", nx.ev.Code), slog.String("class", nx.ev.Class),
			slog.String("next", string(nx.ev.Kind)), slog.Duration("delay", nx.delay), slog.Int("attempts", nx.ev.Attempts))
	case nextDead:
		d.deadLetter(ctx, nx.ev, nx.verdict)
	case nextHandback:
		if d.record(ctx, nx.ev) {
			_ = d.m.Nak()
		}
		d.log.Info("handed back", slog.String("code", nx.ev.Code))
	case nextStop:
		d.x.StopWith(nx.ev.Code)
		if d.record(ctx, nx.ev) {
			_ = d.m.Nak() // at once: a worker the service accepts may take it
		}
		d.log.Error("the solving service refuses this worker; stopping", slog.String("code", nx.ev.Code))
		d.x.Refused(nx.ev.Code)
	}
}

// mayBePaid is the detail of an attempt's end whose in.php reply was lost
// (solver.MayBePaid).
const mayBePaid = "in.php's reply was lost: the captcha it submitted may have been paid"

// withPatience is ctx bounded by patience, or only cancelable without one.
func withPatience(ctx context.Context, patience time.Duration) (context.Context, context.CancelFunc) {
	if patience <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, patience)
}

// patiently runs a read of the task's state, retrying it for up to a third of
// the ack wait while keeping the task's lease, so that a broker hiccup (a
// leader change) is not mistaken for a lost delivery.
func (d *delivery) patiently(ctx context.Context, read func() error) error {
	return jscall.Patiently(ctx, d.x.Lease(), func() { _ = d.m.InProgress() }, read)
}

// observe reports a recorded step to the Observer.
func (d *delivery) observe(ev wire.Event) {
	d.x.Observe(ev, d.task)
}
