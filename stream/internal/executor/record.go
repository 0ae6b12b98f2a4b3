package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/captchaq/captchaq/stream/internal/taskstore"
	"github.com/captchaq/captchaq/stream/wire"
)

// record is one write of a worker for a task: an event, a dead letter or an
// outcome.
type record struct {
	msg *nats.Msg
	// apply notes the stored record in the state.
	apply func(st *taskstore.GenState, seq uint64)
	// in reports whether a state read afresh already holds the record (a
	// write whose acknowledgement was lost).
	in func(st taskstore.GenState) bool
	// yields says the record is not written once the generation is
	// canceled: it would start or put off an attempt.
	yields bool
}

// storeTries bounds how often a write is sent again because other
// generations of the same id (or a replay record) moved the task's last
// sequence meanwhile.
const storeTries = 5

// store writes r as the next record of j's task, expecting the last
// sequence over wire.IDSubjects. On a conflict it reads the state again: when
// only other generations wrote, it tries again on the new sequence; when
// the record is there already, it is done; when this generation moved on,
// another delivery holds the task (errStateMoved). Past storeTries it
// gives up (errContended).
func (d *delivery) store(ctx context.Context, r record) error {
	for range storeTries {
		seq, err := d.x.Store.Append(ctx, d.id, d.st.Seq, r.msg)
		if err == nil {
			d.st.Seq = seq
			r.apply(&d.st, seq)
			return nil
		}
		if !errors.Is(err, taskstore.ErrConflict) {
			return err
		}
		var st taskstore.GenState
		if err := d.patiently(ctx, func() (err error) { st, err = d.x.Store.LoadGen(ctx, d.id, d.gen); return err }); err != nil {
			return err
		}
		before := d.st
		d.st, d.assumed = st, false
		if r.yields && st.Cancel != nil && !r.in(st) {
			return errCanceled
		}
		switch onConflict(before, st, r.in(st)) {
		case conflictStored:
			return nil
		case conflictMoved:
			return errStateMoved
		}
	}
	return fmt.Errorf("store %s of task %s: %w", r.msg.Subject, d.id, errContended)
}

// eventRecord is ev as the next event of j's task.
func eventRecord(d *delivery, ev wire.Event) (record, error) {
	b, err := json.Marshal(ev)
	if err != nil {
		return record{}, fmt.Errorf("encode event: %w", err)
	}
	msg := nats.NewMsg(wire.EventSubject(d.id))
	msg.Data = b
	yields := ev.Kind == wire.EventAttempt || ev.Kind == wire.EventRetry || ev.Kind == wire.EventSnooze || ev.Kind == wire.EventHandback ||
		ev.Kind == wire.EventScheduled
	return record{msg: msg, yields: yields,
		apply: func(st *taskstore.GenState, seq uint64) { st.Last, st.LastSeq = ev, seq },
		in: func(st taskstore.GenState) bool {
			l := st.Last
			return l.Kind == ev.Kind && l.Delivery == ev.Delivery && l.Worker == ev.Worker && l.At.Equal(ev.At)
		},
	}, nil
}

// record appends ev to the task's event log. It returns false when another
// delivery of the task recorded a step meanwhile (leave the task to it) or
// the broker failed (the delivery comes back after the ack wait).
func (d *delivery) record(ctx context.Context, ev wire.Event) bool {
	r, err := eventRecord(d, ev)
	if err == nil {
		err = d.store(ctx, r)
	}
	switch {
	case errors.Is(err, errCanceled):
		// Canceled since this delivery read the task: what it was about to
		// record (an attempt, a retry) does not happen; the task ends.
		if ev.Kind == wire.EventAttempt {
			ev.Attempts-- // not made
		}
		d.log.Info("canceled meanwhile; not solving it", slog.String("event", string(ev.Kind)))
		d.deadLetter(ctx, ev, canceledVerdict(wire.CancelDetail(d.st.Cancel)))
		return false
	case errors.Is(err, errStateMoved) && d.st.Outcome:
		// An earlier delivery finished the generation and its ack was lost.
		d.done()
		return false
	case errors.Is(err, errStateMoved):
		d.log.Warn("another worker took the task over; dropping this delivery", slog.String("event", string(ev.Kind)))
		return false
	case errors.Is(err, errContended) && d.forged:
		d.forgedContended()
		return false
	case err != nil && ctx.Err() != nil:
		// The worker is stopping: the task comes back like every task it
		// held, and its stop has been said (as Execute does).
		return false
	case err != nil:
		d.log.Warn("cannot record task event; it comes back later", slog.String("event", string(ev.Kind)), slog.Any("error", err))
		return false
	}
	d.observe(ev)
	return true
}
