package stream

import (
	"time"

	"github.com/captchaq/captchaq/stream/internal/executor"
)

// Observation is one thing a worker did with a task, for metrics. It never
// carries a token, a page URL or a key.
type Observation struct {
	// Kind is the step: an EventKind (attempt, retry, snooze, handback,
	// scheduled, solved, dead), or ObservedForged.
	Kind EventKind
	// Method is the task's method ("" when unknown: invalid tasks).
	Method string
	// Lane is the lane of the task's method (LaneOf).
	Lane Lane
	// Code is the service's error code, or a pseudo-code, when there is one.
	Code string
	// Reason is the dead-letter reason, for Kind dead.
	Reason string
	// Duration is how long the attempt took (retry, snooze, handback, solved,
	// dead after an attempt).
	Duration time.Duration
	// Delay is the wait before the next delivery (retry, snooze).
	Delay time.Duration
}

// Observer receives a worker's observations. Observe is called from the
// worker's goroutines: it must be safe for concurrent use and quick.
type Observer interface {
	// Observe records one observation; it must return quickly.
	Observe(o Observation)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(Observation)

// Observe calls f.
func (f ObserverFunc) Observe(o Observation) { f(o) }

type nopObserver struct{}

func (nopObserver) Observe(Observation) {}

// ObservedForged is the kind of the Observation made when a forged task
// message (its envelope does not hold together: not a submission of its
// id) ends, whether the worker recorded it or ended it without a record.
// No event of this kind is ever stored.
const ObservedForged = executor.KindForged
