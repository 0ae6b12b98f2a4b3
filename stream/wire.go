// The wire contract's types, as the users of package stream name them.
// They are package wire's (stream/wire), which also holds the subjects and
// headers; these names only spare a user of the client and the worker a
// second import.

package stream

import (
	"time"

	"github.com/captchaq/captchaq/stream/wire"
)

// Task is one captcha to solve (wire.Task).
type Task = wire.Task

// Params are a task's method parameters by their API names (wire.Params).
type Params = wire.Params

// Priority orders tasks (wire.Priority).
type Priority = wire.Priority

// The priorities.
const (
	PriorityHigh   = wire.PriorityHigh
	PriorityNormal = wire.PriorityNormal
)

// Lane groups methods by how long they take (wire.Lane).
type Lane = wire.Lane

// The lanes.
const (
	LaneSlow = wire.LaneSlow
	LaneFast = wire.LaneFast
)

// Lanes lists every lane, in the order workers look at them. Callers must
// not modify it.
var Lanes = wire.Lanes

// LaneOf returns the lane a task of this method and parameters travels in
// (wire.LaneOf).
func LaneOf(method string, params Params) Lane { return wire.LaneOf(method, params) }

// ParseTask decodes one task from JSON, rejecting unknown fields
// (wire.ParseTask).
func ParseTask(b []byte) (Task, error) { return wire.ParseTask(b) }

// ValidateID reports whether id can name a task (wire.ValidateID).
func ValidateID(id string) error { return wire.ValidateID(id) }

// Status is how a task ended (wire.Status).
type Status = wire.Status

// The statuses of an outcome.
const (
	StatusSolved = wire.StatusSolved
	StatusDead   = wire.StatusDead
)

// Outcome is how a task ended (wire.Outcome).
type Outcome = wire.Outcome

// EventKind names a step in a task's life (wire.EventKind).
type EventKind = wire.EventKind

// The steps of a task's life.
const (
	EventAttempt  = wire.EventAttempt
	EventRetry    = wire.EventRetry
	EventSnooze   = wire.EventSnooze
	EventHandback = wire.EventHandback
	EventSolved   = wire.EventSolved
	EventDead     = wire.EventDead
	// EventScheduled: not due yet (use_at, not_before); waits holding no thread.
	EventScheduled = wire.EventScheduled
	// EventAccepted: the service accepted the attempt's captcha; a dead
	// worker's attempt is resumed from it.
	EventAccepted = wire.EventAccepted
	// EventHeld and EventAnswered: the service gave no word of the
	// attempt's captcha for a while (an outage), and answered again.
	EventHeld     = wire.EventHeld
	EventAnswered = wire.EventAnswered
)

// Event is one step in a task's life (wire.Event).
type Event = wire.Event

// DeadLetter is a task that could not be solved (wire.DeadLetter).
type DeadLetter = wire.DeadLetter

// Replay records that a dead letter went back onto the queue (wire.Replay).
type Replay = wire.Replay

// WorkerInfo is a worker's heartbeat (wire.WorkerInfo).
type WorkerInfo = wire.WorkerInfo

// HeldTask names a task generation a worker holds (wire.HeldTask).
type HeldTask = wire.HeldTask

// HeartbeatTTL is how long a worker's heartbeat lives: a worker not heard
// from for longer is gone (wire.HeartbeatTTL).
const HeartbeatTTL time.Duration = wire.HeartbeatTTL

// The error codes of outcomes that captchaq itself gives.
const (
	// CodeInvalidEnvelope: the task message's envelope does not hold
	// together (wire.CheckEnvelope).
	CodeInvalidEnvelope = wire.CodeInvalidEnvelope
	// CodeTokenTooLarge: the answer was paid for but is too large for the
	// token stream.
	CodeTokenTooLarge = wire.CodeTokenTooLarge
)

// When is a moment a task names for its token, use_at or not_before: an
// instant or a duration from submission (wire.When).
type When = wire.When

// At is the When of an instant (wire.At).
func At(t time.Time) When { return wire.At(t) }

// In is the When of a duration from submission (wire.In).
func In(d time.Duration) When { return wire.In(d) }

// ParseWhen reads an RFC 3339 instant or a positive duration from
// submission, the forms of use_at and not_before (wire.ParseWhen).
func ParseWhen(s string) (When, error) { return wire.ParseWhen(s) }
