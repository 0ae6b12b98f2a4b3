package taskstore

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/stream/internal/jscall"
	"github.com/captchaq/captchaq/stream/wire"
)

// recordOf is m as a Record.
func recordOf(m *jetstream.RawStreamMsg) Record {
	return Record{Subject: m.Subject, Header: m.Header, Data: m.Data, Seq: m.Sequence, Stored: m.Time}
}

// found is the answer of a read of one record: false, and no error, when
// there is none.
func found(m *jetstream.RawStreamMsg, err error) (Record, bool, error) {
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return Record{}, false, nil
	case err != nil:
		return Record{}, false, err
	}
	return recordOf(m), true, nil
}

// At reads the record at sequence seq; false when there is none.
func (r *Reader) At(ctx context.Context, seq uint64) (Record, bool, error) {
	return found(r.s.GetMsg(ctx, seq))
}

// Last reads the last record on subject; false when there is none.
func (r *Reader) Last(ctx context.Context, subject string) (Record, bool, error) {
	return found(r.s.GetLastMsgForSubject(ctx, subject))
}

// LastOfEach reads the last record of each subject that filter covers, in
// no order; a subject whose record went meanwhile (it expired) is left out.
func (r *Reader) LastOfEach(ctx context.Context, filter string) ([]Record, error) {
	info, err := r.s.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return nil, err
	}
	var out []Record
	for subj := range info.State.Subjects {
		m, ok, err := r.Last(ctx, subj)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, m)
		}
	}
	return out, nil
}

// LoadGen reads the state of generation gen of task id (LoadGen).
func (r *Reader) LoadGen(ctx context.Context, id string, gen uint64) (GenState, error) {
	return LoadGen(ctx, r.s, id, gen)
}

// LastEvent reads task id's last event (LastEvent).
func (r *Reader) LastEvent(ctx context.Context, id string) (EventState, error) {
	return LastEvent(ctx, r.s, id)
}

// CancelOf finds the valid cancel record of the generation whose state is
// st and whose task message carries h (CancelOf); nil when none.
func (r *Reader) CancelOf(ctx context.Context, id string, st GenState, h nats.Header) (*wire.CancelRecord, error) {
	return CancelOf(ctx, r.nc, r.domain, r.s.CachedInfo().Config.Name, id, st, h)
}

// VerifyReplay checks a task message that names a dead letter against it
// (VerifyReplay).
func (r *Reader) VerifyReplay(ctx context.Context, id string, gen uint64, h nats.Header, t wire.Task) error {
	return VerifyReplay(ctx, r.s, id, gen, h, t)
}

// LatestGen returns the stream sequence of the latest submission of task id:
// its task message while it waits or runs (on its task subject or in the
// waiting room; a moved copy is not a submission, its generation's events
// name it), else (the task message is erased once the task is done) the
// generation its event log names, leaving out one a worker ended
// INVALID_ENVELOPE. A message published on the id's subject whose envelope
// does not hold together (its Nats-Msg-Id is not the id, say) is not a
// submission of the id and is skipped. False when there is none.
func (r *Reader) LatestGen(ctx context.Context, id string) (uint64, bool, error) {
	m, err := r.s.GetLastMsgForSubject(ctx, wire.TaskMessagesFor(id))
	if err == nil && r.submissionOf(ctx, id, m) {
		return m.Sequence, true, nil
	}
	if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, false, err
	}
	var best uint64
	forged := map[uint64]bool{}
	gens := map[uint64]bool{}
	if err := jscall.Walk(ctx, r.s, wire.TaskMessagesFor(id), 0, 0, func(m *jetstream.RawStreamMsg) {
		if r.submissionOf(ctx, id, m) {
			best = max(best, m.Sequence)
		}
	}); err != nil {
		return 0, false, err
	}
	if err := jscall.Walk(ctx, r.s, wire.EventSubject(id), 0, 0, func(m *jetstream.RawStreamMsg) {
		if ev, ok := wire.ParseEvent(m.Data); ok && ev.Gen > 0 {
			gens[ev.Gen] = true
			forged[ev.Gen] = forged[ev.Gen] || ev.Code == wire.CodeInvalidEnvelope
		}
	}); err != nil {
		return 0, false, fmt.Errorf("read events of task %s: %w", id, err)
	}
	for g := range gens {
		if !forged[g] {
			best = max(best, g)
		}
	}
	return best, best != 0, nil
}

// submissionOf reports whether task message m is a submission of id, as
// workers judge it (wire.CheckEnvelope, VerifyReplay).
func (r *Reader) submissionOf(ctx context.Context, id string, m *jetstream.RawStreamMsg) bool {
	t, _ := wire.ParseTask(m.Data)
	if wire.CheckEnvelope(id, m.Header, t) != nil {
		return false
	}
	return m.Header.Get(wire.HeaderMsgID) == id || VerifyReplay(ctx, r.s, id, m.Sequence, m.Header, t) == nil
}

// LastTaskMessage returns the last message on subject (task id's task
// messages, or some of them) that is task id's as workers judge it: a
// submission of id, or a copy a worker moved (its generation's scheduled
// event names its digest). Anyone who may submit tasks can publish on those
// subjects a message naming another generation, or none of id's, which a
// worker ends invalid on its own sequence; until it does, what it names
// must not be taken for the task's (a cancel would name that generation).
// False when there is none. One read when the last message is the task's,
// one per message of the id otherwise.
func (r *Reader) LastTaskMessage(ctx context.Context, subject, id string) (Record, bool, error) {
	m, err := r.s.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		return found(nil, err)
	}
	if ok, err := r.taskMessageOf(ctx, id, m); ok || err != nil {
		return recordOf(m), err == nil, err
	}
	var last *jetstream.RawStreamMsg
	var werr error
	err = jscall.Walk(ctx, r.s, subject, 0, m.Sequence, func(m *jetstream.RawStreamMsg) {
		ok, err := r.taskMessageOf(ctx, id, m)
		werr = cmp.Or(werr, err)
		if ok {
			last = m
		}
	})
	switch {
	case err != nil:
		return Record{}, false, err
	case werr != nil:
		return Record{}, false, werr
	case last == nil:
		return Record{}, false, nil
	}
	return recordOf(last), true, nil
}

// taskMessageOf reports whether m, on one of task id's task subjects or
// in the waiting room, is id's as workers judge it: a moved copy whose
// digest a scheduled event of its generation names, or a submission
// (submissionOf).
func (r *Reader) taskMessageOf(ctx context.Context, id string, m *jetstream.RawStreamMsg) (bool, error) {
	if !wire.IsMovedCopy(m.Header) {
		return r.submissionOf(ctx, id, m), nil
	}
	gen, submitted, ok := wire.MovedFrom(m.Header)
	if !ok || gen >= m.Sequence {
		return false, nil
	}
	err := VerifyMoved(ctx, r.s, id, gen, wire.MovedDigest(m.Subject, m.Header, m.Data, gen, submitted))
	if errors.Is(err, ErrForged) {
		return false, nil
	}
	return err == nil, err
}

// ReplayedFrom returns the generation that carries on generation gen of id:
// gen itself, or, when gen ended dead and its letter was replayed, the
// replay's generation, and so on down the chain. Only workers write dead
// letters and only the admin replay records, so no producer can add a
// link.
func (r *Reader) ReplayedFrom(ctx context.Context, id string, gen uint64) (uint64, error) {
	letters := map[uint64]uint64{} // generation → the sequence of its dead letter
	if err := jscall.Walk(ctx, r.s, wire.DeadSubject(id), gen, 0, func(m *jetstream.RawStreamMsg) {
		if g := GenOf(m.Header); g != 0 {
			letters[g] = m.Sequence
		}
	}); err != nil {
		return 0, fmt.Errorf("read dead letters of task %s: %w", id, err)
	}
	if _, ok := letters[gen]; !ok {
		return gen, nil
	}
	replays := map[uint64]uint64{} // dead letter → the generation its replay queued
	if err := jscall.Walk(ctx, r.s, wire.ReplaySubject(id), gen, 0, func(m *jetstream.RawStreamMsg) {
		var rp wire.Replay
		if json.Unmarshal(m.Data, &rp) == nil && rp.TaskSeq > 0 {
			replays[rp.DeadSeq] = rp.TaskSeq
		}
	}); err != nil {
		return 0, fmt.Errorf("read replays of task %s: %w", id, err)
	}
	for {
		next, ok := replays[letters[gen]]
		if !ok || next <= gen {
			return gen, nil
		}
		gen = next
	}
}

// Token reads the token of generation gen of task id from the token
// stream: the one at tokenSeq, which its outcome names, or for an outcome
// that names none (0) the last on the generation's token subject
// (ReadTokenAt, ReadToken). It waits through a reopening of the store
// (UntilRead).
func (r *Reader) Token(ctx context.Context, id string, gen, tokenSeq uint64) (tok wire.Outcome, ok bool, err error) {
	err = UntilRead(ctx, func() (err error) {
		if tokenSeq != 0 {
			tok, ok, err = ReadTokenAt(ctx, r.tokens, id, gen, tokenSeq)
		} else {
			tok, ok, err = ReadToken(ctx, r.tokens, id, gen)
		}
		return err
	})
	return tok, ok, err
}

// TokensBefore reports whether the token stream's last number is below seq:
// the stream was emptied (a reopening, a restart) and seq not stored again.
func (r *Reader) TokensBefore(ctx context.Context, seq uint64) bool {
	info, err := r.tokens.Info(ctx)
	return err == nil && info.State.LastSeq < seq
}
