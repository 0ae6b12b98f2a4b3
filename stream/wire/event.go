package wire

import (
	"encoding/json"
	"time"
)

// EventKind names a step in a task's life, as the audit trail shows it.
type EventKind string

// The steps of a task's life recorded on captcha.events.<id>.
const (
	EventAttempt  EventKind = "attempt"  // an attempt started (the attempt is spent from here)
	EventRetry    EventKind = "retry"    // the attempt failed; delivered again after a delay
	EventSnooze   EventKind = "snooze"   // no free thread at the service; no attempt spent
	EventHandback EventKind = "handback" // the worker stopped; no attempt spent
	EventSolved   EventKind = "solved"   // solved: an Observation only; the outcome records a solve (older workers wrote this event too)
	EventDead     EventKind = "dead"     // moved to captcha.dead.<id>
	// EventScheduled: the task is not due (use_at, not_before); it waits
	// in the stream's waiting room (SubjectLater), holding no thread and no
	// slot of its lane, until Until. No attempt spent; recorded once per
	// generation, before the task first moves.
	EventScheduled EventKind = "scheduled"
	// EventAccepted: the service accepted the attempt's captcha (CaptchaID,
	// at AcceptedAt), or the attempt resumed polling one accepted before
	// (Resumed), or submitted one in place of a resumed captcha the
	// service no longer knows (Replaces, whose fate Code says). Recorded as
	// soon as in.php answers, before the first poll: an attempt whose last
	// event it is, and whose worker died, is resumed by the task's next
	// worker, which polls that captcha instead of paying for another. No
	// attempt spent.
	EventAccepted EventKind = "accepted"
	// EventHeld: the service gives no word of the attempt's captcha
	// (CaptchaID) since HeldSince (refused connections, timeouts, 5xx,
	// garbage; Code is the first failure): the worker keeps it and polls
	// it again. EventAnswered: the service answered about it again, at At.
	// Like accepted, either may be an attempt's last event while it runs.
	EventHeld     EventKind = "held"
	EventAnswered EventKind = "answered"
)

// Event is one step in a task's life. The last event of a task is also its
// state: how many attempts are spent, and whether an attempt is under way.
// Events never carry a token or a page URL.
type Event struct {
	// Kind is the step.
	Kind EventKind `json:"kind"`
	// Method is the task's method, for stats by method after the outcome
	// (and its token) is gone.
	Method string `json:"method,omitempty"`
	// Gen is the stream sequence of the task message this event belongs to:
	// a replayed task is a new generation with a fresh budget.
	Gen uint64 `json:"gen"`
	// Attempts spent on this generation after this event.
	Attempts int `json:"attempts"`
	// Snoozes is the number of capacity errors in a row.
	Snoozes int `json:"snoozes,omitempty"`
	// At is when the step happened, by the worker's clock.
	At time.Time `json:"at"`
	// Worker names the worker that took the step.
	Worker string `json:"worker,omitempty"`
	// Delivery is the JetStream delivery count of the task message.
	Delivery uint64 `json:"delivery,omitempty"`
	// Code is the service's error code of this step, or a pseudo-code
	// (CodeWorkerLost, CodeDeadlinePassed, CodeShutdown, CodeInvalidTask: codes.go).
	Code string `json:"code,omitempty"`
	// Class is the retry class of Code.
	Class string `json:"class,omitempty"`
	// DelayMS is the wait in milliseconds before the next delivery (retry, snooze).
	DelayMS int64 `json:"delay_ms,omitempty"`
	// Reason is the dead-letter reason (dead).
	Reason string `json:"reason,omitempty"`
	// CaptchaID is the service's id of the captcha: the one solved
	// (solved), accepted (accepted), or the one an ended attempt polled
	// (retry, dead, handback: what became of it is Code).
	CaptchaID string `json:"captcha_id,omitempty"`
	// Provider names the provider of CaptchaID, when the worker solves
	// through several (package provider): the one that accepted it, whose
	// captcha id it is and which was paid for it.
	Provider string `json:"provider,omitempty"`
	// AcceptedAt is when the service accepted CaptchaID (accepted, and a
	// handback that leaves it to the next delivery), on the broker's clock
	// (the worker's own moved by its offset from the broker's), so that
	// the worker that resumes it, whatever its clock, counts its wait from
	// the same instant.
	AcceptedAt time.Time `json:"accepted_at,omitzero"`
	// Resumed marks an accepted event of a captcha accepted before, whose
	// polling this attempt took over (accepted).
	Resumed bool `json:"resumed,omitempty"`
	// Replaces is the captcha this one was submitted in place of: a
	// resumed captcha the service no longer knew (accepted).
	Replaces string `json:"replaces,omitempty"`
	// HeldSince is when the service stopped giving word of CaptchaID
	// (held, answered).
	HeldSince time.Time `json:"held_since,omitzero"`
	// Seconds is how long the attempt took.
	Seconds float64 `json:"seconds,omitempty"`
	// Crashed marks an attempt that started after the previous one died
	// with its worker.
	Crashed bool `json:"crashed,omitempty"`
	// ExpiresAt is when the token stops being usable (solved).
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// FirstFailure and LastFailure are when this generation first and last
	// failed; LastCode is the code of the last failure.
	FirstFailure time.Time `json:"first_failure,omitzero"`
	LastFailure  time.Time `json:"last_failure,omitzero"`
	LastCode     string    `json:"last_code,omitempty"`
	// Submitted and Client say when and by whom the task was submitted: the
	// task message itself is deleted once the task is done.
	Submitted time.Time `json:"submitted,omitzero"`
	Client    string    `json:"client,omitempty"`
	// Detail says more about a dead letter (what is wrong with an invalid
	// task), or about a retry, snooze or handback whose in.php reply was
	// lost (the captcha it submitted may have been paid).
	Detail string `json:"detail,omitempty"`
	// Host is the host of the task's page URL (never the whole URL).
	Host string `json:"host,omitempty"`
	// Until is when a scheduled task's solve starts (scheduled): use_at
	// less the lead the worker allowed for the solve, or not_before.
	Until time.Time `json:"until,omitzero"`
	// LeadMS is the lead in milliseconds the worker allowed before use_at
	// (scheduled): the kind's 90th-percentile solve time as it knew it.
	LeadMS int64 `json:"lead_ms,omitempty"`
	// Digest is the digest of the task message (MovedDigest), on a
	// scheduled event: a copy of the task that a worker moved to the
	// waiting room or back is the generation's only when a scheduled event
	// of the generation names its digest.
	Digest string `json:"digest,omitempty"`
}

// ParseEvent reads an event record; false when b is not one.
func ParseEvent(b []byte) (Event, bool) {
	var ev Event
	return ev, json.Unmarshal(b, &ev) == nil
}
