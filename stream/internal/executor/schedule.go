// Tasks that are not due: a task naming use_at starts its solve the kind's
// 90th-percentile solve time before it, one naming not_before not before
// that. Until then a delivery of it is handed back to the stream with the
// delay (NakWithDelay): it holds no worker thread and no plan thread while
// it waits, spends no attempt, and a restart of the worker or the broker
// forgets nothing, since the wait is the consumer's.

package executor

import (
	"context"
	"log/slog"
	"time"

	"github.com/captchaq/captchaq/stream/wire"
)

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
