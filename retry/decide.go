package retry

import "time"

// Step is what a worker does next with a task.
type Step int

const (
	// Proceed means start the attempt (returned only by Start).
	Proceed Step = iota + 1
	// Done means the task is solved: record the outcome and ack.
	Done
	// Retry means hand the task back to be delivered again after
	// Action.Delay; the failed attempt counts against the budget.
	Retry
	// Snooze means hand the task back to be delivered again after Action.Delay
	// without spending an attempt.
	Snooze
	// DeadLetter means move the task to the dead letter with Action.Reason.
	DeadLetter
	// Stop means the worker cannot work at all (fatal error): hand the task
	// back untouched, without spending an attempt, and stop taking tasks.
	Stop
)

var stepNames = [...]string{"", "proceed", "done", "retry", "snooze", "dead-letter", "stop"}

// String returns the lower-case name used in logs and the audit trail.
func (k Step) String() string {
	if k <= 0 || int(k) >= len(stepNames) {
		return "invalid"
	}
	return stepNames[k]
}

// Action is a decision: what to do, after how long, and why.
type Action struct {
	// Step is what to do with the task; never zero in a returned Action.
	Step Step
	// Delay is how long to wait before the task is delivered again; set
	// (positive) for Retry and Snooze, zero otherwise.
	Delay time.Duration
	// Reason is why the task is dead; set for DeadLetter, empty otherwise.
	Reason Reason
}

// StartInput is what a worker knows when a task is delivered, before it talks
// to the service.
type StartInput struct {
	// Attempts is how many attempts were already spent on this task.
	Attempts int
	// LastCrashed is true when the last attempt never reported an end: the
	// worker holding it died or lost its connection.
	LastCrashed bool
	// Deadline is when the task stops being useful; zero means none.
	Deadline time.Time
	// Now is the current time.
	Now time.Time
}

// Start decides whether a delivered task may start another attempt. A task
// past its deadline is dead (ReasonExpired) without touching the service; a
// task whose budget is spent is dead with ReasonCrashed when its last attempt
// died with its worker, ReasonAttemptsExhausted otherwise.
func (p Policy) Start(in StartInput) Action {
	p = p.WithDefaults()
	switch {
	case !in.Deadline.IsZero() && !in.Now.Before(in.Deadline):
		return Action{Step: DeadLetter, Reason: ReasonExpired}
	case in.Attempts >= p.MaxAttempts && in.LastCrashed:
		return Action{Step: DeadLetter, Reason: ReasonCrashed}
	case in.Attempts >= p.MaxAttempts:
		return Action{Step: DeadLetter, Reason: ReasonAttemptsExhausted}
	}
	return Action{Step: Proceed}
}

// minSnooze is the shortest snooze worth handing a task back for.
const minSnooze = 500 * time.Millisecond

// EndInput is what a worker knows when an attempt ended.
type EndInput struct {
	// Attempts is how many attempts were spent, including the one that ended
	// (unless it ended with a capacity error, which spends none).
	Attempts int
	// Failed is false when the attempt solved the task.
	Failed bool
	// Class is the class of the attempt's error, when Failed.
	Class Class
	// Snoozes is how many capacity errors in a row this one makes (≥ 1 for a
	// capacity error).
	Snoozes int
	// ThreadWaited: the capacity error is a refusal of the full plan that
	// the solver returned only once a thread of its pool freed (or its
	// short hold passed), and the next attempt waits for a thread of the
	// plan before it submits (solver.WaitedForThread).
	ThreadWaited bool
	// Deadline is when the task stops being useful; zero means none.
	Deadline time.Time
	// Now is the current time.
	Now time.Time
}

// End decides what follows an attempt:
//
//	solved                               → Done
//	Fatal                                → Stop
//	Permanent                            → DeadLetter(permanent)
//	Capacity                             → Snooze(SnoozeDelay(Snoozes)), never dead on its own:
//	                                       near the deadline it snoozes for half the time left
//	Capacity, ThreadWaited               → the first in a row Snooze(0): back at once, to wait
//	                                       for a thread of the plan, not for a clock; the k-th
//	                                       (k ≥ 2) Snooze(SnoozeDelay(k-1))
//	Transient, Resubmit, Unknown, Poll   → Retry(Delay(Attempts)) while budget remains,
//	                                       else DeadLetter(attempts-exhausted)
//
// A Retry or Snooze that would deliver the task at or after its deadline is
// DeadLetter(expired) instead: no thread is spent on a task that cannot be used.
func (p Policy) End(in EndInput) Action {
	p = p.WithDefaults()
	if !in.Failed {
		return Action{Step: Done}
	}
	var a Action
	switch in.Class {
	case Fatal:
		return Action{Step: Stop}
	case Permanent:
		return Action{Step: DeadLetter, Reason: ReasonPermanent}
	case Capacity:
		a = Action{Step: Snooze, Delay: p.SnoozeDelay(max(in.Snoozes, 1))}
		if in.ThreadWaited {
			// The thread wait paces the first retry; a refusal again
			// backs off as CaptchaAI advises for repeated
			// ERROR_NO_SLOT_AVAILABLE (blog.captchaai.com/error-no-slot-available-queue-management:
			// 3 s growing to 15 s; blog.captchaai.com/captcha-retry-queue-exponential-backoff:
			// doubling to a minute).
			a.Delay = 0
			if in.Snoozes > 1 {
				a.Delay = p.SnoozeDelay(in.Snoozes - 1)
			}
		}
		if left := in.Deadline.Sub(in.Now); !in.Deadline.IsZero() && a.Delay >= left {
			a.Delay = left / 2
			if a.Delay < minSnooze {
				return Action{Step: DeadLetter, Reason: ReasonExpired}
			}
			return a
		}
	default:
		if in.Attempts >= p.MaxAttempts {
			return Action{Step: DeadLetter, Reason: ReasonAttemptsExhausted}
		}
		a = Action{Step: Retry, Delay: p.Delay(in.Attempts)}
	}
	if !in.Deadline.IsZero() && !in.Now.Add(a.Delay).Before(in.Deadline) {
		return Action{Step: DeadLetter, Reason: ReasonExpired}
	}
	return a
}
