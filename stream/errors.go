// The errors package stream returns: the sentinels callers branch on
// (errors.Is) and the error types that say more (errors.As).

package stream

import (
	"errors"
	"fmt"
	"time"

	"github.com/captchaq/captchaq/stream/internal/room"
	"github.com/captchaq/captchaq/stream/internal/topology"
	"github.com/captchaq/captchaq/stream/wire"
)

// ErrInvalidTask is matched (errors.Is) by every task validation error
// (wire.ErrInvalidTask).
var ErrInvalidTask = wire.ErrInvalidTask

// TaskError is a task that failed validation: which one, and what is wrong
// (wire.TaskError).
type TaskError = wire.TaskError

// Errors Wait returns.
var (
	// ErrNotFound: the stream has no task with this id (never submitted, or
	// older than the retention).
	ErrNotFound = errors.New("no such task")
	// ErrTokenExpired: the task was solved, but its token's lifetime ended
	// before it was read; the Outcome still says when it was solved.
	ErrTokenExpired = errors.New("token expired before it was read")
	// ErrNotSolved: the task ended in the dead letter; the Outcome says why.
	ErrNotSolved = errors.New("task not solved")
	// ErrIDTaken: the task id was taken, within the duplicate window, by a
	// submission that is not this one: for Solve, one that is not this
	// call's (another producer's, or an earlier call's), for Submit and
	// SubmitAll one with another use_at or not_before. Nothing was
	// enqueued, the first submission stands, and Solve does not wait on a
	// task it did not write. Submit again under another id.
	ErrIDTaken = errors.New("task id taken by another submission")
)

// Errors of the dead-letter calls.
var (
	// ErrAlreadyReplayed means this dead letter was replayed before;
	// replaying it again would enqueue the task twice.
	ErrAlreadyReplayed = errors.New("dead letter already replayed")
	// ErrSuperseded means the task id was submitted again after this dead
	// letter; replaying the older one would run two generations at once.
	ErrSuperseded = errors.New("a newer submission of the task exists")
	// ErrNotReplayable means the dead letter holds no valid task (reason
	// invalid-task); fix it and submit it anew instead.
	ErrNotReplayable = errors.New("dead letter holds no valid task")
)

// ErrTaskEnded is returned by Cancel for a task that already has its
// outcome.
var ErrTaskEnded = errors.New("task already ended")

// ErrNoTopology is the error of a producer, worker or reader that finds no
// topology where it looked: only an admin (`captchaq server`, `captchaq
// init`) creates it, so that a client at another site never makes a second
// queue in the JetStream it happens to reach.
var ErrNoTopology = topology.ErrNoTopology

// ErrStreamFull is matched (errors.Is) by the error of a submission refused
// because the stream is at its size limit (a *StreamFullError).
var ErrStreamFull = errors.New("the stream is full")

// StreamFullError is a submission refused for lack of room in the stream.
type StreamFullError struct {
	// Stream is the stream's name.
	Stream string
	// MaxBytes is the stream's size limit (Topology.MaxBytes).
	MaxBytes int64
	// Bytes is what the stream holds now.
	Bytes uint64
	// Queued is how many tasks wait or run now; Reserved is the room kept
	// for their records. Both zero when the server itself refused.
	Queued   int
	Reserved int64
	// Store, when set, is the store whose space (disk or JetStream's
	// limits), not Topology.MaxBytes, bounds the stream; MaxBytes is then
	// the stream's size plus the store's room.
	Store *StoreStatus
}

func (e *StreamFullError) Error() string {
	if st := e.Store; st != nil {
		return fmt.Sprintf("stream %s is full: the broker's store (%s) has room for %d more bytes (%d free on its disk, JetStream limit %d of which %d used), "+
			"and %d bytes are kept to record the outcomes of %d queued tasks: nothing was submitted; wait for workers to finish queued tasks, or free space on the store's disk",
			e.Stream, st.Dir, st.Room, st.Free, st.MaxStore, st.Used, e.Reserved, e.Queued)
	}
	if e.Queued == 0 && e.Reserved == 0 {
		return fmt.Sprintf("stream %s is full (maximum bytes %d, Topology.MaxBytes or --max-bytes): nothing was submitted; "+
			"wait for workers to finish queued tasks and for the retention to free room, or raise the limit", e.Stream, e.MaxBytes)
	}
	return fmt.Sprintf("stream %s is full: it holds %d of its %d bytes (Topology.MaxBytes or --max-bytes), and %d bytes are kept "+
		"to record the outcomes of %d queued tasks: nothing was submitted; wait for workers to finish queued tasks, or raise the limit",
		e.Stream, e.Bytes, e.MaxBytes, e.Reserved, e.Queued)
}

// Unwrap returns ErrStreamFull.
func (e *StreamFullError) Unwrap() error { return ErrStreamFull }

// ErrNoStoreStatus is returned by ReadStoreStatus when nothing answers on
// SubjectStoreStatus (a NATS server that captchaq does not run).
var ErrNoStoreStatus = room.ErrNoStoreStatus

// ErrStoreRefusing is matched (errors.Is) by the error of a submission
// refused because the broker's store refuses writes.
var ErrStoreRefusing = errors.New("the broker's store refuses writes")

// StoreRefusingError is a submission refused because the broker's store
// refuses writes (a full disk). It matches ErrStoreRefusing and
// ErrStreamFull.
type StoreRefusingError struct {
	Status StoreStatus
}

func (e *StoreRefusingError) Error() string {
	msg := fmt.Sprintf("the broker's store (%s) refuses writes: %s: nothing was submitted", e.Status.Dir, e.Status.Error)
	if e.Status.Action != "" {
		return msg + "; " + e.Status.Action
	}
	return msg + "; the server resumes by itself once there is space on its disk again"
}

// Is matches ErrStoreRefusing and ErrStreamFull.
func (e *StoreRefusingError) Is(target error) bool {
	return target == ErrStoreRefusing || target == ErrStreamFull
}

// FatalError stops a worker: the service refused the worker itself (wrong
// key, banned IP). Queued tasks stay untouched for a worker that can work.
type FatalError struct {
	Code string
}

func (e *FatalError) Error() string {
	return fmt.Sprintf("the solving service refuses this worker (%s): stopped taking tasks; queued tasks are untouched", e.Code)
}

// ErrNotConfirmed is matched (errors.Is) by the error of a Submit whose
// context ended before the broker confirmed the task (a *NotConfirmedError).
var ErrNotConfirmed = errors.New("the broker did not confirm the submission")

// NotConfirmedError is the error of a Submit that gave up waiting for the
// broker's confirmation (its context ended; the broker stalled or went
// away). The task was not solved because of this Submit unless the broker
// stored it by By (a worker ends a task stored later without paying the
// service, code SUBMIT_BY_PASSED); whether it did, no one can know until
// the broker answers again. Wait(ID) then says what became of it: its
// outcome, or ErrNotFound when it was never stored. Submitting the task
// again under the same ID is safe either way (the duplicate window).
type NotConfirmedError struct {
	// ID is the task's id: Wait on it says what became of the task.
	ID string
	// By is the task's submit-by instant, on this process's clock.
	By time.Time
	// Err is why no confirmation came (the context's end, a lost
	// connection).
	Err error
}

func (e *NotConfirmedError) Error() string {
	return fmt.Sprintf("submit task %s: %v (%v); if the broker stores it after %s, it ends unsolved (%s) and is not paid; "+
		"Wait(%q) says what became of it", e.ID, ErrNotConfirmed, e.Err, e.By.UTC().Format(time.RFC3339Nano), wire.CodeSubmitByPassed, e.ID)
}

// Is matches ErrNotConfirmed.
func (e *NotConfirmedError) Is(target error) bool { return target == ErrNotConfirmed }

// Unwrap returns the publish's error.
func (e *NotConfirmedError) Unwrap() error { return e.Err }
