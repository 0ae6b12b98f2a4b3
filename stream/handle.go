package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
)

// job is one delivery of a task message being handled.
type job struct {
	m        jetstream.Msg
	id       string
	gen      uint64
	delivery uint64
	// submitted is when the task message was stored.
	submitted time.Time
	task      Task
	invalid   error
	// forged is set when the message's envelope (subject id, message id,
	// id header) does not hold together: it is not a submission of its id.
	forged   bool
	deadline time.Time
	st       genState
	log      *slog.Logger
	// thread is the plan thread held for this task (nil without a quota).
	thread *planThread
	// assumed is true while st is an assumption (first delivery), not a read.
	assumed bool
}

// handle takes one delivered task message to its next step. It never panics
// on a bad message, never starts a solve whose attempt is not recorded, and
// never acks before the outcome is stored.
func (w *Worker) handle(ctx context.Context, m jetstream.Msg, thread *planThread, sl *slot) {
	j, err := w.open(ctx, m)
	if err != nil {
		// Leave it to lapse: open already retried for a while.
		w.log.Warn("cannot read task state; it comes back after the ack wait", slog.Any("error", err))
		return
	}
	j.thread = thread
	if w.resume(ctx, j) {
		return
	}
	base, crashed, ok := w.admit(ctx, j)
	if !ok {
		return
	}
	w.attempt(ctx, j, base, crashed, sl)
}

// resume finishes a generation that an earlier delivery took to its end
// but did not finish (its worker stopped, or its ack was lost), and reports
// whether it did.
func (w *Worker) resume(ctx context.Context, j *job) bool {
	last := j.st.last
	switch {
	case j.st.outcome:
		w.done(j) // an earlier delivery stored the outcome and lost its ack
		return true
	case last.Kind == EventDead:
		w.finishDead(ctx, j, retry.Reason(last.Reason), last.LastCode)
		return true
	case last.Kind == EventSolved && !w.cfg.Now().Before(last.ExpiresAt):
		// Solved, and the worker stopped before storing the outcome; the
		// token is dead now, but the generation still gets its outcome.
		w.finishExpired(ctx, j)
		return true
	}
	// A solve whose outcome was never stored, with its token still alive:
	// the token went down with its worker, so it is solved again.
	return false
}

// admit decides whether the delivery may make an attempt: not when the
// message is not a valid task, was canceled, or has its budget or deadline
// spent (each ends it dead). It returns the event every step of the attempt
// starts from, and whether the last attempt died with its worker.
func (w *Worker) admit(ctx context.Context, j *job) (base Event, crashed bool, ok bool) {
	last := j.st.last
	firstFail, lastFail, lastCode := last.FirstFailure, last.LastFailure, last.LastCode
	attempts, crashed := spentAttempts(last)
	if crashed {
		now := w.cfg.Now()
		if firstFail.IsZero() {
			firstFail = now
		}
		lastFail, lastCode = now, "WORKER_LOST"
		j.log.Warn("the last attempt died with its worker", slog.Int("attempts", attempts))
	}
	base = Event{Gen: j.gen, Method: j.task.Method, Worker: w.cfg.Name, Delivery: j.delivery, Host: pageHost(j.task.Params),
		Submitted: j.submitted, Client: j.m.Headers().Get(HeaderClient),
		FirstFailure: firstFail, LastFailure: lastFail, LastCode: lastCode, Attempts: attempts, Snoozes: last.Snoozes}

	if j.invalid != nil {
		code := "INVALID_TASK"
		if j.forged {
			code = CodeInvalidEnvelope
		}
		w.deadLetter(ctx, j, base, retry.ReasonInvalidTask, code, j.invalid.Error())
		return base, crashed, false
	}
	if detail, ok := w.canceled(ctx, j); ok {
		w.deadLetter(ctx, j, base, retry.ReasonCanceled, "CANCELED", detail)
		return base, crashed, false
	}
	act := w.cfg.Policy.Start(retry.StartInput{Attempts: attempts, LastCrashed: crashed, Deadline: j.deadline, Now: w.cfg.Now()})
	if act.Kind == retry.DeadLetter {
		code := lastCode
		if act.Reason == retry.ReasonExpired {
			code = "DEADLINE_PASSED"
		}
		w.deadLetter(ctx, j, base, act.Reason, code, "")
		return base, crashed, false
	}
	return base, crashed, true
}

// attempt records an attempt, has the service solve the captcha, and
// records what came of it: the solve, a retry or snooze, a dead letter, or
// a hand-back.
//
// The attempt is recorded before the service hears of the captcha: a solve
// that could not be counted (a full stream, a broker outage) is never paid
// for, and every paid solve is in the audit trail.
func (w *Worker) attempt(ctx context.Context, j *job, base Event, crashed bool, sl *slot) {
	m, attempts, snoozes := j.m, base.Attempts, base.Snoozes
	start := w.cfg.Now()
	if !w.room.take(ctx, start) {
		j.log.Warn("the stream is full (or its size could not be read): no attempt starts that could not be recorded; it comes back later")
		_ = m.NakWithDelay(w.heartbeat())
		return
	}
	defer w.room.give()
	ev := base
	ev.Kind, ev.Attempts, ev.At, ev.Crashed = EventAttempt, attempts+1, start, crashed
	if !w.record(ctx, j, ev) {
		_ = m.NakWithDelay(w.heartbeat())
		return
	}
	tctx, endTrace := traceAttempt(ctx, j)
	ans, serr := w.solve(w.plan.earlyRelease(tctx, j.thread), j)
	endTrace(serr)
	if solver.ClassOf(serr) != retry.Fatal {
		sl.solved() // the next task may start while this one is recorded
	}
	end := w.cfg.Now()
	ev.Seconds = end.Sub(start).Seconds()
	shutdown := ctx.Err() != nil
	// What follows records what the service already did: it must not fail
	// because the worker is stopping.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.top.AckWait)
	defer cancel()

	if serr != nil && shutdown {
		// Hand the task back at once without spending the attempt, saying
		// why the worker stopped.
		code, class := "SHUTDOWN", ""
		if f := w.stopCause(); f != nil {
			code, class = f.Code, retry.Fatal.String()
		}
		ev.Kind, ev.Attempts, ev.At, ev.Code, ev.Class = EventHandback, attempts, end, code, class
		if w.record(ctx, j, ev) {
			_ = m.Nak()
		}
		j.log.Info("handed back", slog.String("code", code))
		return
	}
	if serr != nil && errors.Is(serr, context.DeadlineExceeded) && !end.Before(j.deadline) {
		ev.FirstFailure, ev.LastFailure, ev.LastCode = firstSet(base.FirstFailure, end), end, "DEADLINE_PASSED"
		w.deadLetter(ctx, j, ev, retry.ReasonExpired, "DEADLINE_PASSED", "")
		return
	}
	class := solver.ClassOf(serr)
	spent := attempts + 1
	if class == retry.Capacity || class == retry.Fatal {
		spent = attempts
	}
	act := w.cfg.Policy.End(retry.EndInput{Attempts: spent, Failed: serr != nil, Class: class,
		Snoozes: snoozes + 1, Deadline: j.deadline, Now: end})
	code := solver.CodeOf(serr)
	if serr != nil && code == "" {
		code = "ERROR"
	}
	ev.At, ev.Attempts, ev.Code, ev.Class = end, spent, code, class.String()
	if serr != nil {
		ev.FirstFailure, ev.LastFailure, ev.LastCode = firstSet(base.FirstFailure, end), end, code
	}
	switch act.Kind {
	case retry.Done:
		w.finishSolved(ctx, j, ev, ans, start, end)
	case retry.Retry, retry.Snooze:
		ev.Kind, ev.DelayMS, ev.Snoozes = EventRetry, act.Delay.Milliseconds(), 0
		if act.Kind == retry.Snooze {
			ev.Kind, ev.Snoozes = EventSnooze, snoozes+1
		}
		if w.record(ctx, j, ev) {
			_ = m.NakWithDelay(act.Delay)
			w.lookAgainAfter(act.Delay, laneOfSubject(m.Subject()))
		}
		j.log.Info("attempt failed", slog.String("code", code), slog.String("class", class.String()),
			slog.String("next", act.Kind.String()), slog.Duration("delay", act.Delay), slog.Int("attempts", spent))
	case retry.DeadLetter:
		w.deadLetter(ctx, j, ev, act.Reason, code, failureText(serr))
	case retry.Stop:
		f := &FatalError{Code: code}
		w.stopWith(f)
		ev.Kind, ev.Snoozes = EventHandback, 0
		if w.record(ctx, j, ev) {
			_ = m.Nak() // at once: a worker the service accepts may take it
		}
		j.log.Error("the solving service refuses this worker; stopping", slog.String("code", code))
		select {
		case w.fatal <- f:
		default:
		}
	}
}

// spentAttempts returns how many attempts the last event of a generation
// says are spent, and whether the last of them died with its worker. Every
// attempt is recorded before it starts and every attempt that ends records
// an end event (retry, snooze, handback, solved, dead); an attempt event
// that is still the last one died with its worker, and stays spent. A
// delivery that recorded nothing never reached the service and spends
// nothing.
func spentAttempts(last Event) (attempts int, crashed bool) {
	return last.Attempts, last.Kind == EventAttempt
}

func firstSet(t, or time.Time) time.Time {
	if t.IsZero() {
		return or
	}
	return t
}

// open reads what the delivery is: the task, its id and generation, whether
// the message is a valid task at all, and the generation's state.
func (w *Worker) open(ctx context.Context, m jetstream.Msg) (*job, error) {
	j := &job{m: m}
	md, err := m.Metadata()
	if err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	j.gen, j.delivery, j.submitted = md.Sequence.Stream, md.NumDelivered, md.Timestamp
	// The id is the subject's last token, whatever the message says: the
	// stream stores task messages only on captcha.tasks.<lane>.<priority>.*,
	// so that token always names a subject of its own for the outcome.
	j.id = idFromSubject(m.Subject())
	j.task, j.invalid = ParseTask(m.Data())
	if err := checkEnvelope(j.id, m.Headers(), j.task); err != nil {
		j.invalid, j.forged = err, true
	} else if m.Headers().Get(headerMsgID) != j.id {
		var err error
		if perr := w.patiently(ctx, j, func() error { err = verifyReplay(ctx, w.s, j.id, j.gen, m.Headers(), j.task); return ignoreForged(err) }); perr != nil {
			return nil, perr
		}
		if err != nil {
			j.invalid, j.forged = err, true
		}
	}
	if j.invalid == nil {
		j.invalid = j.task.validateShape()
	}
	j.deadline = j.task.Deadline
	if j.deadline.IsZero() {
		j.deadline = md.Timestamp.Add(w.cfg.DefaultDeadline)
	}
	j.log = w.log.With(slog.String("task_id", j.id), slog.String("method", j.task.Method),
		slog.String("host", pageHost(j.task.Params)), slog.Uint64("delivery", j.delivery))
	j.st = genState{gen: j.gen}
	if j.delivery == 1 {
		// Nobody has handled this message before: assume nothing is
		// recorded for the id and let the first write's compare-and-set
		// say otherwise, saving a read per task.
		j.assumed = true
		return j, nil
	}
	err = w.patiently(ctx, j, func() (err error) { j.st, err = loadGen(ctx, w.s, j.id, j.gen); return err })
	if err != nil {
		return nil, err
	}
	return j, nil
}

// checkEnvelope checks what the stream says about a task message against
// what it says of itself: its id (from the subject) must be valid, and its
// Nats-Msg-Id, Captchaq-Task-Id header and body id must all be that id. A
// message that fails is never solved: it ends dead as an invalid task, on
// its own id. So no one can run a task under an id with another message id
// (bypassing the duplicate window) or be mistaken for another task.
func checkEnvelope(id string, h nats.Header, t Task) error {
	if err := checkEnvelopeHeaders(id, h); err != nil {
		return err
	}
	if t.ID != "" && t.ID != id {
		return fmt.Errorf("id %q in the body differs from %q in the subject", truncate(t.ID, 70), id)
	}
	return nil
}

// checkEnvelopeHeaders is checkEnvelope without the body.
func checkEnvelopeHeaders(id string, h nats.Header) error {
	if err := ValidateID(id); err != nil {
		return fmt.Errorf("subject: %w", err)
	}
	if hid := h.Get(HeaderTaskID); hid != "" && hid != id {
		return fmt.Errorf("header %s %q differs from the id %q in the subject", HeaderTaskID, truncate(hid, 70), id)
	}
	switch msgID := h.Get(headerMsgID); {
	case msgID == id:
	case msgID == replayMsgID(id, h.Get(HeaderReplayedBy)) && h.Get(HeaderReplayedBy) != "":
		// A replay of a dead letter (Client.Replay).
	case msgID == "":
		return fmt.Errorf("header %s missing: it must be the task id %q", headerMsgID, id)
	default:
		return fmt.Errorf("header %s %q is not the task id %q", headerMsgID, truncate(msgID, 70), id)
	}
	return nil
}

// CodeInvalidEnvelope is the error code of a task message whose envelope
// does not hold together (checkEnvelope): it ends dead with reason
// invalid-task, and Wait(id) does not take it for a submission of its id.
const CodeInvalidEnvelope = "INVALID_ENVELOPE"

// ignoreForged is err unless it says a message is forged (a verdict, not a
// failed read).
func ignoreForged(err error) error {
	if errors.Is(err, errForged) {
		return nil
	}
	return err
}

// replayMsgID is the message id of a replay of dead letter deadSeq of task id.
func replayMsgID(id, deadSeq string) string { return id + ".replay." + deadSeq }

// patiently runs a read of the task's state, retrying it for up to a third of
// the ack wait while keeping the task's lease, so that a broker hiccup (a
// leader change) is not mistaken for a lost delivery.
func (w *Worker) patiently(ctx context.Context, j *job, read func() error) error {
	deadline := time.Now().Add(w.heartbeat())
	var b brokerBackoff
	for {
		err := read()
		// Any error: a read that fails for good fails again within the
		// third of an ack wait this allows.
		if err == nil || ctx.Err() != nil || time.Now().Add(b.next).After(deadline) {
			return err
		}
		_ = j.m.InProgress()
		if !b.wait(ctx) {
			return err
		}
	}
}

// heartbeat is how often a held task's lease is renewed: a third of the
// shortest ack wait of the consumers involved.
func (w *Worker) heartbeat() time.Duration {
	aw := w.top.AckWait
	if w.ackWait > 0 {
		aw = w.ackWait
	}
	return aw / 3
}

func (w *Worker) observe(j *job, ev Event) {
	w.cfg.Observer.Observe(Observation{Kind: ev.Kind, Method: j.task.Method, Lane: LaneOf(j.task.Method, j.task.Params),
		Code: ev.Code, Reason: ev.Reason, Duration: time.Duration(ev.Seconds * float64(time.Second)),
		Delay: time.Duration(ev.DelayMS) * time.Millisecond})
}

// solve runs the solver under the task's deadline, keeping the lease alive
// with InProgress while it works.
func (w *Worker) solve(ctx context.Context, j *job) (solver.Answer, error) {
	sctx, cancel := context.WithDeadline(ctx, j.deadline)
	defer cancel()
	done := make(chan struct{})
	defer close(done)
	go func() {
		every := w.heartbeat()
		if pw := j.thread.ackWait(); pw > 0 && pw/3 < every {
			every = pw / 3
		}
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = j.m.InProgress()
				j.thread.keepAlive()
			}
		}
	}()
	ans, err := w.cfg.Solver.Solve(sctx, solver.Request{Method: j.task.Method, Params: j.task.Params})
	if solver.ClassOf(err) != retry.Fatal {
		// The service's thread is free again: give it back at once. Not
		// after a Fatal error: the worker is stopping, and a plan thread
		// given back now could carry one more task to a service that
		// refuses the key (the worker returns it when the task ends).
		j.thread.release()
	}
	return ans, err
}

// pageHost returns the host of a task's page URL (solver.PageHost).
func pageHost(p Params) string { return solver.PageHost(p["pageurl"]) }
