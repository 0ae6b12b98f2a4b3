// Tasks that are not due: a task naming use_at starts its solve the kind's
// 90th-percentile solve time before it, one naming not_before not before
// that. Until then it waits in the stream's waiting room
// (wire.SubjectLater), whose consumer hands each delivery back with the
// delay (NakWithDelay): it holds no worker thread, no plan thread and no
// slot of its lane's consumer while it waits, spends no attempt, and a
// restart of the worker or the broker forgets nothing, since the wait is
// the consumer's. Once due it moves back to its task subject.

package executor

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/captchaq/captchaq/stream/internal/jscall"
	"github.com/captchaq/captchaq/stream/internal/taskstore"
	"github.com/captchaq/captchaq/stream/wire"
)

// scheduleError judges what the task's shape alone cannot, knowing its
// store time: not_before after use_at when one is a duration and the other
// an instant, either after the task's own deadline, and a use_at or not_before further from the store time than
// the stream keeps the task, which would wait until the stream drops it
// and end without an outcome.
func (d *delivery) scheduleError(stored time.Time) error {
	if !d.useAt.IsZero() && !d.notBefore.IsZero() && d.notBefore.After(d.useAt) {
		return &wire.TaskError{ID: d.id, Err: fmt.Errorf("not_before %s: after use_at %s",
			d.notBefore.Format(time.RFC3339Nano), d.useAt.Format(time.RFC3339Nano))}
	}
	// A task's own deadline before its time: never of use (Submit refuses
	// it). Both are instants on the broker's clock.
	if dl := d.task.Deadline; !dl.IsZero() {
		if !d.notBefore.IsZero() && !d.notBefore.Before(dl) {
			return &wire.TaskError{ID: d.id, Err: fmt.Errorf("not_before %s: not before the deadline %s",
				d.notBefore.Format(time.RFC3339Nano), dl.Format(time.RFC3339Nano))}
		}
		if !d.useAt.IsZero() && d.useAt.After(dl) {
			return &wire.TaskError{ID: d.id, Err: fmt.Errorf("use_at %s: after the deadline %s",
				d.useAt.Format(time.RFC3339Nano), dl.Format(time.RFC3339Nano))}
		}
	}
	if d.x.Retention <= 0 {
		return nil
	}
	for _, f := range []struct {
		name string
		at   time.Time
	}{{"use_at", d.useAt}, {"not_before", d.notBefore}} {
		if !f.at.IsZero() && f.at.Sub(stored) > d.x.Retention {
			return &wire.TaskError{ID: d.id, Err: fmt.Errorf("%s %s: further away than the stream keeps a task (%s)",
				f.name, f.at.Format(time.RFC3339), d.x.Retention)}
		}
	}
	return nil
}

// notDue reports whether the delivered task is not due yet, with when it
// is (on the worker's clock) and the lead allowed before use_at.
func (d *delivery) notDue() (until time.Time, lead time.Duration, ok bool) {
	if d.useAt.IsZero() && d.notBefore.IsZero() {
		return time.Time{}, 0, false
	}
	start := d.notBefore
	if !d.useAt.IsZero() {
		lead = d.x.Lead(d.task.Method, d.task.Params)
		start = wire.Latest(d.useAt.Add(-lead), d.notBefore)
	}
	// An instant on the broker's clock, as the deadline is.
	start = start.Add(-d.x.Clock.Offset())
	return start, lead, d.x.Now().Before(start)
}

// wait keeps the delivery from its solve until the task is due, or its
// deadline passes first (a delivery then ends it expired). With a waiting
// room (Mover), a delivery from a lane moves the task there: the lane's
// consumer counts a message handed back with a delay as pending, so tasks
// waiting on it would fill its lane limit (or MaxInFlight) and starve the
// due ones. In the waiting room, or without one, the delivery is handed
// back with the delay, and at most ScheduleCheck, so that a cancel ends a
// waiting task within that time. The first wait of a generation is
// recorded (scheduled, until when, and the digest a moved copy of it must
// have), so the audit trail explains a task that waits; the later ones are
// not.
func (d *delivery) wait(ctx context.Context, base wire.Event, until time.Time, lead time.Duration) {
	now := d.x.Now()
	delay := min(until.Sub(now), d.x.ScheduleCheck)
	if d.deadline.Before(until) {
		delay = min(delay, max(d.deadline.Sub(now), 0)+time.Millisecond)
	}
	if !d.scheduled() {
		ev := base
		ev.Kind, ev.At, ev.Until, ev.LeadMS = wire.EventScheduled, now, until, lead.Milliseconds()
		if d.x.Mover != nil {
			ev.Digest = d.digest
		}
		if !d.record(ctx, ev) {
			if ctx.Err() == nil && !d.st.Outcome && d.st.Cancel == nil {
				_ = d.m.NakWithDelay(min(delay, d.x.Lease()))
			}
			return
		}
		d.log.Info("scheduled: waits in the stream", slog.Time("until", until), slog.Duration("lead", lead))
	}
	if d.x.Mover != nil && !d.inRoom {
		d.move(ctx, base, wire.LaterSubjectOf(d.m.Subject()))
		return
	}
	_ = d.m.NakWithDelay(delay)
	if !d.inRoom {
		// On a stream without a waiting room the task waits on its lane's
		// consumer. The dispatcher looks at the lane when it comes due if
		// that is sooner than its idle check; a longer wait is found by
		// the idle check, at most IdleCheck after it is due.
		d.x.LookAgainAfter(delay, wire.LaneOfSubject(d.m.Subject()))
	}
}

// scheduled reports whether the generation's last event is its scheduled
// event, naming the digest a moved copy of the delivered message has when
// tasks move (one recorded by a worker that moved none names none).
func (d *delivery) scheduled() bool {
	last := d.st.Last
	return last.Kind == wire.EventScheduled && (d.x.Mover == nil || last.Digest == d.digest)
}

// move publishes a copy of the task on subject to (the waiting room, or
// its task subject when it is due), then acks and erases the delivered
// message. A generation moves only after a scheduled event names its
// digest, so that the copy can prove it is the generation's. A copy that
// cannot be published leaves the task where it is, back after a lease.
func (d *delivery) move(ctx context.Context, base wire.Event, to string) {
	if !d.scheduled() {
		// Delivered in the waiting room (a producer submitted it there) and
		// due at once: recorded as any task that went through the room.
		ev := base
		now := d.x.Now()
		ev.Kind, ev.At, ev.Until, ev.Digest = wire.EventScheduled, now, now, d.digest
		if !d.record(ctx, ev) {
			if ctx.Err() == nil && !d.st.Outcome && d.st.Cancel == nil {
				_ = d.m.NakWithDelay(d.x.Lease())
			}
			return
		}
	}
	if d.x.Mover == nil {
		_ = d.m.NakWithDelay(d.x.Lease()) // a worker that moves nothing reads no waiting room
		return
	}
	msg := taskstore.MovedCopy(to, d.m.Headers(), d.m.Data(), d.gen, d.submitted, d.seq)
	if err := d.x.Mover.Move(ctx, msg); err != nil {
		if jscall.TooLarge(err) {
			// Only a raw producer's message comes this close to the stream's
			// MaxMsgSize (Submit refuses far smaller ones): a move adds headers,
			// so it can never move, and handing it back would have it come
			// back for ever, on its lane holding a slot of the lane's limit.
			d.deadLetter(ctx, base, invalidVerdict(&wire.TaskError{ID: d.id, Err: fmt.Errorf(
				"too large to wait for its time: the task message (%d bytes) leaves the stream no room for the headers of its move to %s: %w",
				len(d.m.Data()), to, err)}, false))
			return
		}
		if ctx.Err() != nil {
			_ = d.m.Nak()
			return
		}
		d.log.Warn("cannot move the task; it comes back later", slog.String("to", to), slog.Any("error", err))
		_ = d.m.NakWithDelay(d.x.Lease())
		return
	}
	d.done()
}
