// Tasks that are not due: a task naming use_at starts its solve the kind's
// 90th-percentile solve time before it, one naming not_before not before
// that. Until then a delivery of it is handed back to the stream with the
// delay (NakWithDelay): it holds no worker thread and no plan thread while
// it waits, spends no attempt, and a restart of the worker or the broker
// forgets nothing, since the wait is the consumer's.

package executor

import (
	"context"
	"fmt"
	"log/slog"
	"time"

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

// wait hands the delivery back until the task is due, or its deadline
// passes first (the next delivery then ends it expired), and at most
// ScheduleCheck, so that a cancel ends a waiting task within that time.
// The first wait of a generation is recorded (scheduled, until when), so
// the audit trail explains a task that waits; the later ones are not.
func (d *delivery) wait(ctx context.Context, base wire.Event, until time.Time, lead time.Duration) {
	now := d.x.Now()
	delay := min(until.Sub(now), d.x.ScheduleCheck)
	if d.deadline.Before(until) {
		delay = min(delay, max(d.deadline.Sub(now), 0)+time.Millisecond)
	}
	if d.st.Last.Kind != wire.EventScheduled {
		ev := base
		ev.Kind, ev.At, ev.Until, ev.LeadMS = wire.EventScheduled, now, until, lead.Milliseconds()
		if !d.record(ctx, ev) {
			if ctx.Err() == nil && !d.st.Outcome && d.st.Cancel == nil {
				_ = d.m.NakWithDelay(min(delay, d.x.Lease()))
			}
			return
		}
		d.log.Info("scheduled: waits in the stream", slog.Time("until", until), slog.Duration("lead", lead))
	}
	_ = d.m.NakWithDelay(delay)
	d.x.WakeAt(delay, wire.LaneOfSubject(d.m.Subject()))
}
