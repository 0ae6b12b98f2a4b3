package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
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
	deadline  time.Time
	st        taskState
	log       *slog.Logger
	// thread is the plan thread held for this task (nil without a quota).
	thread *planThread
	// assumed is true while st is an assumption (first delivery), not a read.
	assumed bool
}

// handle takes one delivered task message to its next step. It never panics
// on a bad message and never acks before the outcome is stored.
func (w *Worker) handle(ctx context.Context, m jetstream.Msg, thread *planThread, sl *slot) {
	j, err := w.open(ctx, m)
	if err != nil {
		// Leave it to lapse: a delivery that ends without an event counts
		// as a lost attempt, and open already retried for a while.
		w.log.Warn("cannot read task state; it comes back after the ack wait", slog.Any("error", err))
		return
	}
	j.thread = thread
	last := j.st.last
	if last.Gen > j.gen {
		w.superseded(ctx, j)
		return
	}
	sameGen := last.Gen == j.gen
	if sameGen {
		switch last.Kind {
		case EventDead:
			w.finishDead(ctx, j, retry.Reason(last.Reason), last.LastCode)
			return
		case EventSolved:
			var stored bool
			err := w.patiently(ctx, j, func() (err error) { stored, err = w.resultStored(ctx, j); return err })
			if err != nil {
				j.log.Warn("cannot tell whether the outcome is stored; it comes back after the ack wait", slog.Any("error", err))
				return
			}
			if stored || !w.cfg.Now().Before(last.ExpiresAt) {
				w.done(ctx, j)
				return
			}
			// The worker died between recording the solve and storing the
			// token: the token is lost, so solve again.
		}
	}
	attempts, snoozes, crashes := 0, 0, 0
	var firstFail, lastFail time.Time
	lastCode := ""
	if sameGen {
		snoozes, firstFail, lastFail, lastCode = last.Snoozes, last.FirstFailure, last.LastFailure, last.LastCode
		attempts, crashes = spentAttempts(last, j.delivery)
	}
	crashed := crashes > 0
	if crashed {
		now := w.cfg.Now()
		if firstFail.IsZero() {
			firstFail = now
		}
		lastFail, lastCode = now, "WORKER_LOST"
		j.log.Warn("earlier deliveries died with their worker", slog.Int("lost", crashes), slog.Int("attempts", attempts))
	}
	base := Event{Gen: j.gen, Method: j.task.Method, Worker: w.cfg.Name, Delivery: j.delivery, Host: pageHost(j.task.Params),
		Submitted: j.submitted, Client: j.m.Headers().Get(HeaderClient),
		FirstFailure: firstFail, LastFailure: lastFail, LastCode: lastCode, Attempts: attempts, Snoozes: snoozes}

	if j.invalid != nil {
		w.deadLetter(ctx, j, base, retry.ReasonInvalidTask, "INVALID_TASK", j.invalid.Error())
		return
	}
	if detail, ok := w.canceled(ctx, j); ok {
		w.deadLetter(ctx, j, base, retry.ReasonCanceled, "CANCELED", detail)
		return
	}
	act := w.cfg.Policy.Start(retry.StartInput{Attempts: attempts, LastCrashed: crashed, Deadline: j.deadline, Now: w.cfg.Now()})
	if act.Kind == retry.DeadLetter {
		code := lastCode
		if act.Reason == retry.ReasonExpired {
			code = "DEADLINE_PASSED"
		}
		w.deadLetter(ctx, j, base, act.Reason, code, "")
		return
	}

	// The attempt event goes out while the service works: the audit trail
	// gets the attempt's start and worker without a round trip in the way.
	// Crash accounting does not depend on it: a delivery that leaves no end
	// event is counted as an attempt that died with its worker.
	start := w.cfg.Now()
	ev := base
	ev.Kind, ev.Attempts, ev.At, ev.Crashed = EventAttempt, attempts+1, start, crashed
	attemptStored := w.recordAsync(j, ev)
	tctx, endTrace := traceAttempt(ctx, j)
	ans, serr := w.solve(tctx, j)
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
	if !attemptStored(ctx) {
		return // another worker holds a newer delivery of the task
	}

	if serr != nil && shutdown {
		// Shutdown: hand the task back without spending the attempt.
		ev.Kind, ev.Attempts, ev.At, ev.Code = EventHandback, attempts, end, "SHUTDOWN"
		if w.record(ctx, j, ev) {
			_ = m.Nak()
		}
		j.log.Info("handed back on shutdown")
		return
	}
	if serr != nil && errors.Is(serr, context.DeadlineExceeded) && !end.Before(j.deadline) {
		ev.FirstFailure, ev.LastFailure, ev.LastCode = firstSet(firstFail, end), end, "DEADLINE_PASSED"
		w.deadLetter(ctx, j, ev, retry.ReasonExpired, "DEADLINE_PASSED", "")
		return
	}
	class := solver.ClassOf(serr)
	spent := attempts + 1
	if class == retry.Capacity || class == retry.Fatal {
		spent = attempts
	}
	act = w.cfg.Policy.End(retry.EndInput{Attempts: spent, Failed: serr != nil, Class: class,
		Snoozes: snoozes + 1, Deadline: j.deadline, Now: end})
	code := solver.CodeOf(serr)
	if serr != nil && code == "" {
		code = "ERROR"
	}
	ev.At, ev.Attempts, ev.Code, ev.Class = end, spent, code, class.String()
	if serr != nil {
		ev.FirstFailure, ev.LastFailure, ev.LastCode = firstSet(firstFail, end), end, code
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
		w.deadLetter(ctx, j, ev, act.Reason, code, "")
	case retry.Stop:
		ev.Kind, ev.Snoozes = EventHandback, 0
		if w.record(ctx, j, ev) {
			_ = m.NakWithDelay(w.top.AckWait)
		}
		j.log.Error("the solving service refuses this worker; stopping", slog.String("code", code))
		select {
		case w.fatal <- &FatalError{Code: code}:
		default:
		}
	}
}

// spentAttempts returns how many attempts a delivery numbered delivery
// finds spent, given the last event of the task's generation, and how many
// of them died with their worker. Every delivery that ends normally records
// an end event (retry, snooze, handback, solved, dead) naming its delivery
// number; a delivery that left none died with its worker and counts as a
// spent attempt.
func spentAttempts(last Event, delivery uint64) (attempts, crashes int) {
	ended, endDelivery := last.Attempts, last.Delivery
	if last.Kind == EventAttempt {
		// That delivery started an attempt and never recorded its end.
		ended, endDelivery = last.Attempts-1, last.Delivery-1
	}
	if delivery > endDelivery+1 {
		crashes = int(delivery - endDelivery - 1)
	}
	return ended + crashes, crashes
}

func firstSet(t, or time.Time) time.Time {
	if t.IsZero() {
		return or
	}
	return t
}

// open reads what the delivery is: the task, its id and generation, and the
// task's state in its event log.
func (w *Worker) open(ctx context.Context, m jetstream.Msg) (*job, error) {
	j := &job{m: m}
	md, err := m.Metadata()
	if err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	j.gen, j.delivery, j.submitted = md.Sequence.Stream, md.NumDelivered, md.Timestamp
	j.id = m.Headers().Get(HeaderTaskID)
	if j.id == "" {
		j.id = idFromSubject(m.Subject())
	}
	if ValidateID(j.id) != nil {
		j.id = invalidTaskIDStem + strconv.FormatUint(j.gen, 10)
	}
	j.task, j.invalid = ParseTask(m.Data())
	if j.invalid == nil {
		j.invalid = j.task.validateShape()
	}
	if j.invalid == nil && j.task.ID != "" && j.task.ID != j.id {
		j.invalid = fmt.Errorf("id %q in the body differs from %q in the subject and header", j.task.ID, j.id)
	}
	j.deadline = j.task.Deadline
	if j.deadline.IsZero() {
		j.deadline = md.Timestamp.Add(w.cfg.DefaultDeadline)
	}
	j.log = w.log.With(slog.String("task_id", j.id), slog.String("method", j.task.Method),
		slog.String("host", pageHost(j.task.Params)), slog.Uint64("delivery", j.delivery))
	if j.delivery == 1 {
		// Nobody has handled this message before: assume an empty event
		// log and let the first write's compare-and-set say otherwise
		// (reload), saving a read per task.
		j.assumed = true
		return j, nil
	}
	err = w.patiently(ctx, j, func() (err error) { j.st, err = loadState(ctx, w.s, j.id); return err })
	if err != nil {
		return nil, err
	}
	return j, nil
}

// record appends ev to the task's event log. It returns false when the log
// moved on under us (another worker holds a newer delivery: leave the task to
// it) or the broker failed (the delivery comes back after AckWait).
func (w *Worker) record(ctx context.Context, j *job, ev Event) bool {
	st, err := appendEvent(ctx, w.js, j.id, j.st, ev)
	if errors.Is(err, errStateMoved) {
		switch w.onConflict(ctx, j, ev) {
		case conflictStored:
			w.observe(j, ev)
			return true
		case conflictAppend:
			st, err = appendEvent(ctx, w.js, j.id, j.st, ev)
		case conflictSuperseded:
			return false
		}
	}
	if errors.Is(err, errStateMoved) {
		j.log.Warn("another worker took the task over; dropping this delivery", slog.String("event", string(ev.Kind)))
		return false
	}
	if err != nil {
		j.log.Warn("cannot record task event; it comes back after the ack wait", slog.Any("error", err))
		return false
	}
	j.st = st
	w.observe(j, ev)
	return true
}

// What onConflict found.
const (
	conflictOther      = iota // another delivery of this generation wrote: leave the task to it
	conflictStored            // the event is already there: our own write whose ack was lost
	conflictAppend            // only earlier generations wrote (a first delivery assumed an empty log): append again
	conflictSuperseded        // a later generation of the id exists: this one is done
)

// onConflict reads the task's state after a compare-and-set failed and says
// what the failure means.
func (w *Worker) onConflict(ctx context.Context, j *job, ev Event) int {
	j.assumed = false
	st, err := loadState(ctx, w.s, j.id)
	if err != nil {
		return conflictOther
	}
	last := st.last
	switch {
	case last.Gen > j.gen:
		w.superseded(ctx, j)
		return conflictSuperseded
	case last.Gen < j.gen:
		j.st = st
		return conflictAppend
	case last.Delivery == j.delivery && last.Worker == w.cfg.Name && last.Kind == ev.Kind:
		j.st = st
		return conflictStored
	case last.Delivery == j.delivery && last.Worker == w.cfg.Name:
		j.st = st // our own earlier step of this delivery
		return conflictAppend
	}
	return conflictOther
}

// superseded retires a task message whose id was submitted again since (a
// replay, or the id reused after the duplicate window): the newer
// submission is the one that runs and gets the outcome.
func (w *Worker) superseded(ctx context.Context, j *job) {
	j.log.Warn("a newer submission of this task id exists; retiring this one")
	w.done(ctx, j)
}

// patiently runs a read of the task's state, retrying it for up to a third of
// the ack wait while keeping the task's lease, so that a broker hiccup (a
// leader change) is not mistaken for a lost delivery.
func (w *Worker) patiently(ctx context.Context, j *job, read func() error) error {
	deadline := time.Now().Add(w.heartbeat())
	delay := 50 * time.Millisecond
	for {
		err := read()
		if err == nil || ctx.Err() != nil || time.Now().Add(delay).After(deadline) {
			return err
		}
		_ = j.m.InProgress()
		w.pause(ctx, delay)
		delay = min(2*delay, time.Second)
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

// recordAsync publishes ev without waiting and returns a function that waits
// for it to be stored, with record's meaning for its result.
func (w *Worker) recordAsync(j *job, ev Event) func(context.Context) bool {
	b, err := json.Marshal(ev)
	if err != nil {
		return func(ctx context.Context) bool { return w.record(ctx, j, ev) }
	}
	msg := nats.NewMsg(eventSubject(j.id))
	msg.Data = b
	fut, err := w.js.PublishMsgAsync(msg, jetstream.WithExpectLastSequencePerSubject(j.st.seq))
	if err != nil {
		return func(ctx context.Context) bool { return w.record(ctx, j, ev) }
	}
	return func(ctx context.Context) bool {
		select {
		case ack := <-fut.Ok():
			j.st = taskState{last: ev, seq: ack.Sequence}
			w.observe(j, ev)
			return true
		case <-fut.Err():
			// A conflict, or the broker failed: the synchronous path knows
			// how to tell them apart and what to do.
			return w.record(ctx, j, ev)
		case <-ctx.Done():
			return false
		}
	}
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

// finishSolved records the solve, stores the outcome with the token for the
// token's lifetime, then acks.
func (w *Worker) finishSolved(ctx context.Context, j *job, ev Event, ans solver.Answer, start, end time.Time) {
	life := w.cfg.TokenLifetimes[j.task.Method]
	if life <= 0 {
		life = 2 * time.Minute
	}
	ev.Kind, ev.CaptchaID, ev.ExpiresAt = EventSolved, ans.CaptchaID, end.Add(life)
	if !w.record(ctx, j, ev) {
		return
	}
	out := Outcome{ID: j.id, Status: StatusSolved, Solution: ans.Solution, UserAgent: ans.UserAgent,
		Attempts: ev.Attempts, SolveSeconds: roundSeconds(end.Sub(start)), ExpiresAt: ev.ExpiresAt,
		Method: j.task.Method, CaptchaID: ans.CaptchaID, SolvedAt: end}
	// The token leaves the stream when it stops being usable: TTLs are whole
	// seconds, so round up (a waiter that finds no outcome before ExpiresAt
	// knows it is only late) and take at least 1 s.
	ttl := max((time.Until(ev.ExpiresAt) + time.Second - 1).Truncate(time.Second), time.Second)
	if err := w.publishOutcome(ctx, j, out, jetstream.WithMsgTTL(ttl)); err != nil {
		j.log.Warn("cannot store the outcome; the task comes back after the ack wait", slog.Any("error", err))
		return
	}
	w.done(ctx, j)
	j.log.Info("solved", slog.Int("attempts", ev.Attempts), slog.Float64("seconds", out.SolveSeconds))
}

// done acks a task whose outcome is stored, then deletes the task message:
// it holds the page URL, which may be personal data and is not needed any
// more (a dead letter keeps its own copy for replay; the event log keeps the
// host, the submitter and the times for the audit trail).
//
// The ack is not confirmed (a lost one brings the task back, and its event
// log says it is done) and the delete runs in the background: neither holds
// up the thread.
func (w *Worker) done(ctx context.Context, j *job) {
	if err := j.m.Ack(); err != nil {
		j.log.Warn("ack", slog.Any("error", err))
		return
	}
	w.background.Add(1)
	go func() {
		defer w.background.Done()
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := w.s.DeleteMsg(dctx, j.gen); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			j.log.Warn("delete the finished task message", slog.Any("error", err))
		}
	}()
}

func roundSeconds(d time.Duration) float64 {
	return float64(d.Round(time.Millisecond)) / float64(time.Second)
}

// resultStored reports whether the outcome of this generation is in the
// stream. Only a definite "not there" says no: a failed read is an error, so
// that a broker hiccup never makes the worker pay the service twice.
func (w *Worker) resultStored(ctx context.Context, j *job) (bool, error) {
	m, err := w.s.GetLastMsgForSubject(ctx, resultSubject(j.id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look up the outcome of task %s: %w", j.id, err)
	}
	g, _ := strconv.ParseUint(m.Header.Get(HeaderGen), 10, 64)
	return g == j.gen, nil
}

func (w *Worker) publishOutcome(ctx context.Context, j *job, out Outcome, opts ...jetstream.PublishOpt) error {
	b, err := json.Marshal(out)
	if err != nil {
		return err
	}
	msg := nats.NewMsg(resultSubject(j.id))
	msg.Data = b
	msg.Header.Set(HeaderTaskID, j.id)
	msg.Header.Set(HeaderGen, strconv.FormatUint(j.gen, 10))
	opts = append(opts, jetstream.WithMsgID(fmt.Sprintf("result.%s.%d", j.id, j.gen)))
	_, err = publishRetrying(ctx, w.js, msg, opts...)
	return err
}

// deadLetter records the verdict, then moves the task to the dead letter.
func (w *Worker) deadLetter(ctx context.Context, j *job, ev Event, reason retry.Reason, code, detail string) {
	now := w.cfg.Now()
	ev.Kind, ev.Reason, ev.At, ev.LastCode = EventDead, string(reason), now, firstNonEmpty(code, ev.LastCode)
	ev.FirstFailure, ev.LastFailure = firstSet(ev.FirstFailure, now), firstSet(ev.LastFailure, now)
	ev.Code, ev.Detail = ev.LastCode, safeDetail(detail)
	if !w.record(ctx, j, ev) {
		return
	}
	w.finishDead(ctx, j, reason, ev.LastCode)
}

// finishDead stores the dead letter and the outcome (both idempotent: message
// ids), then acks. It runs again, harmlessly, if a worker died half-way.
func (w *Worker) finishDead(ctx context.Context, j *job, reason retry.Reason, code string) {
	ev := j.st.last
	dl := nats.NewMsg(deadSubject(j.id))
	dl.Data = j.m.Data()
	for k, v := range j.m.Headers() {
		if k != headerMsgID && k != headerNatsTTL {
			dl.Header[k] = v
		}
	}
	dl.Header.Set(HeaderTaskID, j.id)
	dl.Header.Set(HeaderGen, strconv.FormatUint(j.gen, 10))
	dl.Header.Set(HeaderAttempts, strconv.Itoa(ev.Attempts))
	dl.Header.Set(HeaderError, code)
	dl.Header.Set(HeaderReason, string(reason))
	if ev.Detail != "" {
		dl.Header.Set(HeaderDetail, ev.Detail)
	}
	dl.Header.Set(HeaderSubject, j.m.Subject())
	dl.Header.Set(HeaderFirstFail, ev.FirstFailure.UTC().Format(time.RFC3339Nano))
	dl.Header.Set(HeaderLastFail, ev.LastFailure.UTC().Format(time.RFC3339Nano))
	if _, err := publishRetrying(ctx, w.js, dl, jetstream.WithMsgID(fmt.Sprintf("dead.%s.%d", j.id, j.gen))); err != nil {
		j.log.Warn("cannot store the dead letter; the task comes back after the ack wait", slog.Any("error", err))
		return
	}
	out := Outcome{ID: j.id, Status: StatusDead, Error: code, Reason: string(reason), Attempts: ev.Attempts, Method: j.task.Method, Detail: ev.Detail}
	if err := w.publishOutcome(ctx, j, out); err != nil {
		j.log.Warn("cannot store the outcome; the task comes back after the ack wait", slog.Any("error", err))
		return
	}
	w.done(ctx, j)
	j.log.Warn("dead-lettered", slog.String("reason", string(reason)), slog.String("code", code), slog.Int("attempts", ev.Attempts))
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// pageHost returns the host of a task's page URL: logs and the audit trail
// carry the host only, never the full URL (it can be personal data).
func pageHost(p Params) string {
	raw := p["pageurl"]
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "invalid-url"
	}
	return u.Hostname()
}
