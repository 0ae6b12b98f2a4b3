package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/captchaq/captchaq/stream/internal/jscall"
	"github.com/captchaq/captchaq/stream/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// genState is what the stream holds of one generation (one submission) of a
// task: its last event, whether its dead letter and its outcome are stored,
// and the sequence the next write for the task must expect.
//
// Generations of one id share the id's subjects: each one's records are
// told apart by the generation they name (Event.Gen, header Captchaq-Gen),
// so two submissions of an id run side by side and each ends with its own
// outcome.
type genState struct {
	gen uint64
	// last is the generation's last event (zero Kind: none yet) and
	// lastSeq its stream sequence.
	last    Event
	lastSeq uint64
	// seq is the last sequence over wire.IDSubjects(id), whichever generation
	// wrote it: every write for the task expects it.
	seq        uint64
	deadLetter bool
	outcome    bool
	// cancel is the generation's cancel record on captcha.cancels.<id>,
	// nil when none.
	cancel *CancelRecord
}

// sameGen reports whether st and o say the same of the generation itself
// (what other generations wrote may differ).
func (st genState) sameGen(o genState) bool {
	return st.lastSeq == o.lastSeq && st.deadLetter == o.deadLetter && st.outcome == o.outcome
}

// fold takes one record of the task into st.
func (st *genState) fold(id, subject string, h nats.Header, data []byte, seq uint64) {
	st.seq = max(st.seq, seq)
	switch subject {
	case wire.EventSubject(id):
		if ev, ok := wire.ParseEvent(data); ok && ev.Gen == st.gen {
			st.last, st.lastSeq = ev, seq
		}
	case wire.DeadSubject(id):
		st.deadLetter = st.deadLetter || genOf(h) == st.gen
	case wire.ResultSubject(id):
		st.outcome = st.outcome || genOf(h) == st.gen
	case wire.CancelRecordSubject(id):
		if rec := wire.ParseCancel(data, st.gen); rec != nil && st.cancel == nil {
			st.cancel = rec
		}
	}
}

// genOf is the generation a record's Captchaq-Gen header names, 0 when none.
func genOf(h nats.Header) uint64 {
	g, _ := strconv.ParseUint(h.Get(wire.HeaderGen), 10, 64)
	return g
}

// loadGen reads the state of generation gen of task id. Usually one direct
// read answers it (the task's last record is this generation's event); when
// the last record is another generation's, or a dead letter or an outcome,
// it reads the task's records from the generation's own task message on
// (every record of a generation comes after it), one direct read each.
func loadGen(ctx context.Context, s jetstream.Stream, id string, gen uint64) (genState, error) {
	st := genState{gen: gen}
	m, err := s.GetLastMsgForSubject(ctx, wire.IDSubjects(id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("read the records of task %s: %w", id, err)
	}
	st.seq = m.Sequence
	if m.Sequence < gen {
		return st, nil // nothing written for this generation yet
	}
	if m.Subject == wire.EventSubject(id) {
		if ev, ok := wire.ParseEvent(m.Data); ok && ev.Gen == gen {
			st.last, st.lastSeq = ev, m.Sequence
			return st, nil
		}
	}
	// Walk the task's records from the generation's task message on, with
	// direct reads (workers may not create consumers). A task has a
	// handful of records per generation.
	last := st.seq
	err = jscall.Walk(ctx, s, wire.IDSubjects(id), gen, last, func(m *jetstream.RawStreamMsg) {
		st.fold(id, m.Subject, m.Header, m.Data, m.Sequence)
	})
	if err != nil {
		return genState{gen: gen}, fmt.Errorf("read the records of task %s: %w", id, err)
	}
	return st, nil
}

// record is one write of a worker for a task: an event, a dead letter or an
// outcome.
type record struct {
	msg  *nats.Msg
	opts []jetstream.PublishOpt
	// apply notes the stored record in the state.
	apply func(st *genState, seq uint64)
	// in reports whether a state read afresh already holds the record (a
	// write whose acknowledgement was lost).
	in func(st genState) bool
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
// another delivery holds the task (errStateMoved).
func (d *delivery) store(ctx context.Context, r record) error {
	for range storeTries {
		opts := append([]jetstream.PublishOpt{jetstream.WithExpectLastSequenceForSubject(d.st.seq, wire.IDSubjects(d.id))}, r.opts...)
		ack, err := jscall.PublishRetrying(ctx, d.w.js, r.msg, opts...)
		if err == nil && ack.Duplicate {
			// No worker write carries a message id, so the stream cannot
			// have taken this for one it already has.
			return fmt.Errorf("store %s: taken for a duplicate of message %d", r.msg.Subject, ack.Sequence)
		}
		if err == nil {
			d.st.seq = ack.Sequence
			r.apply(&d.st, ack.Sequence)
			return nil
		}
		if !jscall.WrongLastSequence(err) {
			return err
		}
		var st genState
		if err := d.patiently(ctx, func() (err error) { st, err = loadGen(ctx, d.w.s, d.id, d.gen); return err }); err != nil {
			return err
		}
		before := d.st
		d.st, d.assumed = st, false
		if r.yields && st.cancel != nil && !r.in(st) {
			return errCanceled
		}
		switch onConflict(before, st, r.in(st)) {
		case conflictStored:
			return nil
		case conflictMoved:
			return errStateMoved
		}
	}
	return fmt.Errorf("store %s: other writes for task %s kept getting in the way", r.msg.Subject, d.id)
}

// eventRecord is ev as the next event of j's task.
func eventRecord(d *delivery, ev Event) (record, error) {
	b, err := json.Marshal(ev)
	if err != nil {
		return record{}, fmt.Errorf("encode event: %w", err)
	}
	msg := nats.NewMsg(wire.EventSubject(d.id))
	msg.Data = b
	yields := ev.Kind == EventAttempt || ev.Kind == EventRetry || ev.Kind == EventSnooze || ev.Kind == EventHandback
	return record{msg: msg, yields: yields,
		apply: func(st *genState, seq uint64) { st.last, st.lastSeq = ev, seq },
		in: func(st genState) bool {
			l := st.last
			return l.Kind == ev.Kind && l.Delivery == ev.Delivery && l.Worker == ev.Worker && l.At.Equal(ev.At)
		},
	}, nil
}

// record appends ev to the task's event log. It returns false when another
// delivery of the task recorded a step meanwhile (leave the task to it) or
// the broker failed (the delivery comes back after the ack wait).
func (d *delivery) record(ctx context.Context, ev Event) bool {
	r, err := eventRecord(d, ev)
	if err == nil {
		err = d.store(ctx, r)
	}
	switch {
	case errors.Is(err, errCanceled):
		// Canceled since this delivery read the task: what it was about to
		// record (an attempt, a retry) does not happen; the task ends.
		if ev.Kind == EventAttempt {
			ev.Attempts-- // not made
		}
		d.log.Info("canceled meanwhile; not solving it", slog.String("event", string(ev.Kind)))
		d.deadLetter(ctx, ev, canceledVerdict(wire.CancelDetail(d.st.cancel)))
		return false
	case errors.Is(err, errStateMoved) && d.st.outcome:
		// An earlier delivery finished the generation and its ack was lost.
		d.done()
		return false
	case errors.Is(err, errStateMoved):
		d.log.Warn("another worker took the task over; dropping this delivery", slog.String("event", string(ev.Kind)))
		return false
	case err != nil:
		d.log.Warn("cannot record task event; it comes back later", slog.String("event", string(ev.Kind)), slog.Any("error", err))
		return false
	}
	d.observe(ev)
	return true
}

// eventState is the last event of a task, whichever generation it belongs
// to, and its sequence (0: no event yet).
type eventState struct {
	last Event
	seq  uint64
}

// lastEvent reads the last event of task id.
func lastEvent(ctx context.Context, s jetstream.Stream, id string) (eventState, error) {
	m, err := s.GetLastMsgForSubject(ctx, wire.EventSubject(id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return eventState{}, nil
	}
	if err != nil {
		return eventState{}, fmt.Errorf("read events of task %s: %w", id, err)
	}
	ev, _ := wire.ParseEvent(m.Data)
	return eventState{last: ev, seq: m.Sequence}, nil
}
