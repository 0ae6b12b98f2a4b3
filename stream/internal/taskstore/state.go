package taskstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/stream/internal/jscall"
	"github.com/captchaq/captchaq/stream/wire"
)

// GenState is what the stream holds of one generation (one submission) of a
// task: its last event, whether its dead letter and its outcome are stored,
// and the sequence the next write for the task must expect.
//
// Generations of one id share the id's subjects: each one's records are
// told apart by the generation they name (wire.Event.Gen, header Captchaq-Gen),
// so two submissions of an id run side by side and each ends with its own
// outcome.
type GenState struct {
	Gen uint64
	// Last is the generation's last event (zero Kind: none yet) and
	// LastSeq its stream sequence.
	Last    wire.Event
	LastSeq uint64
	// Seq is the last sequence over wire.IDSubjects(id), whichever generation
	// wrote it: every write for the task expects it.
	Seq uint64
	// DeadLetter and Outcome say whether the generation's dead letter
	// and outcome are stored.
	DeadLetter bool
	Outcome    bool
	// Cancel is the generation's cancel record on captcha.cancels.<id>,
	// nil when none.
	Cancel *wire.CancelRecord
}

// SameGen reports whether st and o say the same of the generation itself
// (what other generations wrote may differ).
func (st GenState) SameGen(o GenState) bool {
	return st.LastSeq == o.LastSeq && st.DeadLetter == o.DeadLetter && st.Outcome == o.Outcome
}

// Fold takes one record of the task into st.
func (st *GenState) Fold(id, subject string, h nats.Header, data []byte, seq uint64) {
	st.Seq = max(st.Seq, seq)
	switch subject {
	case wire.EventSubject(id):
		if ev, ok := wire.ParseEvent(data); ok && ev.Gen == st.Gen {
			st.Last, st.LastSeq = ev, seq
		}
	case wire.DeadSubject(id):
		st.DeadLetter = st.DeadLetter || GenOf(h) == st.Gen
	case wire.ResultSubject(id):
		st.Outcome = st.Outcome || GenOf(h) == st.Gen
	case wire.CancelRecordSubject(id):
		if rec := wire.ParseCancel(data, st.Gen); rec != nil && st.Cancel == nil {
			st.Cancel = rec
		}
	}
}

// GenOf is the generation a record's Captchaq-Gen header names, 0 when none.
func GenOf(h nats.Header) uint64 {
	g, _ := strconv.ParseUint(h.Get(wire.HeaderGen), 10, 64)
	return g
}

// TokenSeqOf is the token sequence an outcome's record names
// (wire.HeaderTokenSeq), 0 when none.
func TokenSeqOf(h nats.Header) uint64 {
	seq, _ := strconv.ParseUint(h.Get(wire.HeaderTokenSeq), 10, 64)
	return seq
}

// LoadGen reads the state of generation gen of task id. Usually one direct
// read answers it (the task's last record is this generation's event); when
// the last record is another generation's, or a dead letter or an outcome,
// it reads the task's records from the generation's own task message on
// (every record of a generation comes after it), one direct read each.
func LoadGen(ctx context.Context, s jetstream.Stream, id string, gen uint64) (GenState, error) {
	st := GenState{Gen: gen}
	m, err := s.GetLastMsgForSubject(ctx, wire.IDSubjects(id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("read the records of task %s: %w", id, err)
	}
	st.Seq = m.Sequence
	if m.Sequence < gen {
		return st, nil // nothing written for this generation yet
	}
	if m.Subject == wire.EventSubject(id) {
		if ev, ok := wire.ParseEvent(m.Data); ok && ev.Gen == gen {
			st.Last, st.LastSeq = ev, m.Sequence
			return st, nil
		}
	}
	// Walk the task's records from the generation's task message on, with
	// direct reads (workers may not create consumers). A task has a
	// handful of records per generation.
	last := st.Seq
	err = jscall.Walk(ctx, s, wire.IDSubjects(id), gen, last, func(m *jetstream.RawStreamMsg) {
		st.Fold(id, m.Subject, m.Header, m.Data, m.Sequence)
	})
	if err != nil {
		return GenState{Gen: gen}, fmt.Errorf("read the records of task %s: %w", id, err)
	}
	return st, nil
}

// EventState is the last event of a task, whichever generation it belongs
// to, and its sequence (0: no event yet).
type EventState struct {
	Last wire.Event
	Seq  uint64
}

// LastEvent reads the last event of task id.
func LastEvent(ctx context.Context, s jetstream.Stream, id string) (EventState, error) {
	m, err := s.GetLastMsgForSubject(ctx, wire.EventSubject(id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return EventState{}, nil
	}
	if err != nil {
		return EventState{}, fmt.Errorf("read events of task %s: %w", id, err)
	}
	ev, _ := wire.ParseEvent(m.Data)
	return EventState{Last: ev, Seq: m.Sequence}, nil
}
