// The decisions of one delivery, as pure functions of what the stream holds
// of the task's generation, the retry policy, the clock and what the
// service answered: what to record and what comes next. The executor
// reads the state, asks these, and makes the writes; they are unit-tested
// without a broker (decide_test.go).

package executor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream/internal/taskstore"
	"github.com/captchaq/captchaq/stream/wire"
)

// resumeStep is what a delivery must finish that an earlier delivery of the
// same generation took to its end (its worker stopped, or its ack was lost).
type resumeStep int

const (
	// resumeNothing: nothing ended yet; the delivery goes on to admission.
	resumeNothing resumeStep = iota
	// resumeToken: an attempt died with its worker (or, in records of
	// workers from before the outcome became the solve's record, a solved
	// event has no outcome while its token may live): if the token stream
	// holds the generation's token, the outcome is stored from it
	// (finishFromToken); otherwise the delivery goes on to admission and the
	// task is solved again.
	resumeToken
	// resumeAck: the outcome is stored; only the ack was lost.
	resumeAck
	// resumeDead: the verdict is recorded; the dead letter and the outcome
	// are stored unless already there.
	resumeDead
	// resumeExpired (records of older workers only: a solved event with no
	// outcome, its token dead): the generation gets an expired outcome
	// (solved, no solution).
	resumeExpired
)

// resumeFrom is the resumeStep for a generation in state st at now.
func resumeFrom(st taskstore.GenState, now time.Time) resumeStep {
	switch last := st.Last; {
	case st.Outcome:
		return resumeAck
	case last.Kind == wire.EventDead:
		return resumeDead
	case last.Kind == wire.EventSolved && !now.Before(last.ExpiresAt):
		return resumeExpired
	case last.Kind == wire.EventSolved, underWay(last):
		return resumeToken
	}
	return resumeNothing
}

// carryOver is what a new attempt inherits from the generation's last
// event: the attempts spent, whether the last one died with its worker, and
// the failure history, with a crash counted as a failure (WORKER_LOST) at
// now.
func carryOver(last wire.Event, now time.Time) (carried wire.Event, crashed bool) {
	attempts, crashed := spentAttempts(last)
	carried = wire.Event{Attempts: attempts, Snoozes: last.Snoozes,
		FirstFailure: last.FirstFailure, LastFailure: last.LastFailure, LastCode: last.LastCode}
	if crashed {
		carried.FirstFailure = firstSet(carried.FirstFailure, now)
		carried.LastFailure, carried.LastCode = now, wire.CodeWorkerLost
	}
	return carried, crashed
}

// spentAttempts returns how many attempts the last event of a generation
// says are spent, and whether the last of them died with its worker. Every
// attempt is recorded before it starts and every attempt that ends records
// an end event (retry, snooze, handback, solved, dead); an attempt event
// that is still the last one died with its worker, and stays spent. A
// delivery that recorded nothing never reached the service and spends
// nothing.
func spentAttempts(last wire.Event) (attempts int, crashed bool) {
	return last.Attempts, underWay(last)
}

// underWay reports whether last, a generation's last event, says an
// attempt is under way: its attempt event, or the accepted event of its
// captcha, recorded after it.
func underWay(last wire.Event) bool {
	switch last.Kind {
	case wire.EventAttempt, wire.EventAccepted, wire.EventHeld, wire.EventAnswered:
		return true
	}
	return false
}

// captchaToResume is the captcha the service accepted for the
// generation's last attempt, which a new attempt polls instead of
// submitting another, and whether there is one: the attempt died with its
// worker after in.php answered (its accepted event, or a later word of its
// captcha, held or answered, is the last), or its worker stopped and
// handed the task back while polling it.
func captchaToResume(last wire.Event) (id string, at time.Time, ok bool) {
	if last.CaptchaID != "" && (underWay(last) || last.Kind == wire.EventHandback) {
		return last.CaptchaID, last.AcceptedAt, true
	}
	return "", time.Time{}, false
}

// verdict is why a generation ends dead: the dead letter's reason, error
// code and detail.
type verdict struct {
	reason retry.Reason
	code   string
	detail string
}

// invalidVerdict is the verdict on a message that is not a valid task: an
// invalid task, or one whose envelope does not hold together (forged).
func invalidVerdict(invalid error, forged bool) verdict {
	code := wire.CodeInvalidTask
	if forged {
		code = wire.CodeInvalidEnvelope
	}
	return verdict{reason: retry.ReasonInvalidTask, code: code, detail: invalid.Error()}
}

// canceledVerdict is the verdict on a canceled generation.
func canceledVerdict(detail string) verdict {
	return verdict{reason: retry.ReasonCanceled, code: wire.CodeCanceled, detail: detail}
}

// lateVerdict is the verdict on a task message stored at stored, after its
// producer's submit-by instant by (wire.StoredLate).
func lateVerdict(by, stored time.Time) verdict {
	return verdict{reason: retry.ReasonExpired, code: wire.CodeSubmitByPassed,
		detail: fmt.Sprintf("stored at %s, after %s, when its producer had given up on it and said the submission failed: not solved",
			stored.UTC().Format(time.RFC3339Nano), by.UTC().Format(time.RFC3339Nano))}
}

// startVerdict asks the policy whether an attempt may start on a generation
// that carries carried; ok is false with the verdict when its budget or its
// deadline is spent.
func startVerdict(p retry.Policy, carried wire.Event, crashed bool, deadline, now time.Time) (v verdict, ok bool) {
	act := p.Start(retry.StartInput{Attempts: carried.Attempts, LastCrashed: crashed, Deadline: deadline, Now: now})
	if act.Step != retry.DeadLetter {
		return verdict{}, true
	}
	code := carried.LastCode
	if act.Reason == retry.ReasonExpired {
		code = wire.CodeDeadlinePassed
	}
	return verdict{reason: act.Reason, code: code}, false
}

// next is what follows an attempt: its kind, the event to record (for a
// dead end: the event the verdict is recorded on), the delay of a retry or
// snooze, and the verdict of a dead end.
type next struct {
	kind    nextKind
	ev      wire.Event
	delay   time.Duration
	verdict verdict
}

// nextKind is the kind of step that follows an attempt.
type nextKind int

const (
	// nextSolved: record the solve, store the outcome, ack.
	nextSolved nextKind = iota
	// nextRetry: record the retry or snooze (ev.Kind says which) and hand
	// the task back after delay.
	nextRetry
	// nextDead: record the verdict and move the task to the dead letter.
	nextDead
	// nextHandback: the worker is stopping; record the hand-back without
	// spending the attempt, and hand the task back at once.
	nextHandback
	// nextStop: the service refuses the worker itself; record the hand-back
	// (ev.Code names the refusal), hand the task back at once and stop.
	nextStop
)

// attemptResult is what an attempt came to.
type attemptResult struct {
	// ev is the attempt event as recorded before the solve.
	ev wire.Event
	// err is the solver's error (nil: solved).
	err error
	// shutdown is set when the worker was stopping when the solve ended.
	shutdown bool
	// stopCode is the code of the refusal that stops the worker, if any.
	stopCode string
	// end is when the solve ended; deadline is the task's.
	end, deadline time.Time
}

// afterAttempt decides what follows an attempt under policy p.
func afterAttempt(p retry.Policy, r attemptResult) next {
	ev, serr, end := r.ev, r.err, r.end
	before := ev.Attempts - 1 // the attempt's own is not spent until it ends
	if serr != nil && r.shutdown {
		// Handed back at once without spending the attempt, saying why the
		// worker stopped.
		code, class := wire.CodeShutdown, ""
		if r.stopCode != "" {
			code, class = r.stopCode, retry.Fatal.String()
		}
		ev.Kind, ev.Attempts, ev.At, ev.Code, ev.Class = wire.EventHandback, before, end, code, class
		return next{kind: nextHandback, ev: ev}
	}
	if serr != nil && errors.Is(serr, context.DeadlineExceeded) && !end.Before(r.deadline) {
		ev.FirstFailure, ev.LastFailure, ev.LastCode = firstSet(ev.FirstFailure, end), end, wire.CodeDeadlinePassed
		return next{kind: nextDead, ev: ev, verdict: verdict{reason: retry.ReasonExpired, code: wire.CodeDeadlinePassed}}
	}
	class := solver.ClassOf(serr)
	spent := before + 1
	if class == retry.Capacity || class == retry.Fatal {
		spent = before // the service refused before it worked: nothing spent
	}
	code := solver.CodeOf(serr)
	inRow := ev.Snoozes + 1
	if class == retry.Capacity && solver.OutageCode(code) {
		// The outage's: its probes, not a growing timer, tell when the
		// service answers again, so each such snooze is the first in a row
		// (a service answering half its calls with 5xx or garbage began an
		// outage every few calls, and a task that met several snoozed 5,
		// 10, 20, 40 s: TestFaultTransientErrorsRecover took up to 195 s).
		inRow = 1
	}
	act := p.End(retry.EndInput{Attempts: spent, Failed: serr != nil, Class: class,
		Snoozes: inRow, ThreadWaited: solver.WaitedForThread(serr), Deadline: r.deadline, Now: end})
	if serr != nil && code == "" {
		code = wire.CodeError
	}
	snoozes := inRow - 1
	ev.At, ev.Attempts, ev.Code, ev.Class = end, spent, code, class.String()
	if serr != nil {
		ev.FirstFailure, ev.LastFailure, ev.LastCode = firstSet(ev.FirstFailure, end), end, code
	}
	switch act.Step {
	case retry.Done:
		return next{kind: nextSolved, ev: ev}
	case retry.Retry, retry.Snooze:
		ev.Kind, ev.DelayMS, ev.Snoozes = wire.EventRetry, act.Delay.Milliseconds(), 0
		if act.Step == retry.Snooze {
			ev.Kind, ev.Snoozes = wire.EventSnooze, snoozes+1
		}
		return next{kind: nextRetry, ev: ev, delay: act.Delay}
	case retry.DeadLetter:
		return next{kind: nextDead, ev: ev, verdict: verdict{reason: act.Reason, code: code, detail: failureText(serr)}}
	default: // retry.Stop
		ev.Kind, ev.Snoozes = wire.EventHandback, 0
		return next{kind: nextStop, ev: ev}
	}
}

// conflict is what a write that found the task's last sequence moved
// should do, from the generation's state before the write and as read
// afresh.
type conflict int

const (
	// conflictRetry: only other generations wrote; write again on the new
	// sequence.
	conflictRetry conflict = iota
	// conflictStored: the record is there already (its acknowledgement was
	// lost).
	conflictStored
	// conflictMoved: another delivery of this generation recorded a step
	// meanwhile and holds the task now.
	conflictMoved
)

// onConflict decides a write's conflict: stored reports whether the state
// read afresh already holds the record.
func onConflict(before, now taskstore.GenState, stored bool) conflict {
	switch {
	case stored:
		return conflictStored
	case !now.SameGen(before):
		return conflictMoved
	}
	return conflictRetry
}

// firstSet is t, or or when t is zero.
func firstSet(t, or time.Time) time.Time {
	if t.IsZero() {
		return or
	}
	return t
}
