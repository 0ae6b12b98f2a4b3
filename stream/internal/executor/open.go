// Reading a delivery: what the task message is, and whether its envelope
// (subject, message id, id header, body id) holds together.

package executor

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/stream/internal/taskstore"
	"github.com/captchaq/captchaq/stream/wire"
)

// open reads what the delivery is: the task, its id and generation, whether
// the message is a valid task at all, and the generation's state.
func (x *Executor) open(ctx context.Context, m jetstream.Msg) (*delivery, error) {
	d := &delivery{x: x, m: m}
	md, err := m.Metadata()
	if err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	d.seq = md.Sequence.Stream
	d.gen, d.number, d.submitted = d.seq, md.NumDelivered, md.Timestamp
	d.inRoom = wire.InWaitingRoom(m.Subject())
	// The id is the subject's last token, whatever the message says: the
	// stream stores task messages only on captcha.tasks.<lane>.<priority>.*
	// and captcha.later.<lane>.<priority>.*, so that token always names a
	// subject of its own for the outcome.
	d.id = wire.IDFromSubject(m.Subject())
	// What the headers say of the envelope is judged before the body is
	// read: a forged copy that the budget ends without a record costs no
	// parse of its body, which may be as large as the broker takes (a
	// flood of such copies would otherwise cost the pool a parse of
	// megabytes each).
	moved := wire.IsMovedCopy(m.Headers())
	if moved {
		if err := d.openMoved(ctx); err != nil {
			return nil, err
		}
	} else if err := wire.CheckEnvelopeHeaders(d.id, m.Headers()); err != nil {
		d.invalid, d.forged = err, true
	} else if m.Headers().Get(wire.HeaderMsgID) != d.id {
		if err := d.openReplay(ctx); err != nil {
			return nil, err
		}
	}
	decided := d.forged
	if decided {
		d.log = x.Log.With(slog.String("task_id", d.id), slog.Uint64("delivery", d.number))
		if !d.forgedOpen() {
			// Ended without a record (ForgedBudget): nothing of the id is
			// read or written for it, and its body is not read.
			d.unrecorded = true
			return d, nil
		}
	}
	_, perr := d.parse()
	if !d.forged {
		d.invalid = perr
		// A moved copy is checked against its generation's records
		// (openMoved), a replay against its letter (openReplay); what is
		// left of the envelope is the body's id.
		if envErr := wire.CheckEnvelope(d.id, m.Headers(), d.task); envErr != nil && !moved {
			d.invalid, d.forged = envErr, true
		}
	}
	if d.invalid == nil {
		d.invalid = d.task.ValidateShape()
	}
	if d.invalid == nil {
		d.invalid = wire.CheckQueue(m.Subject(), d.task)
	}
	if d.invalid == nil {
		d.invalid = wire.CheckSubmitBy(d.id, m.Headers())
	}
	// Durations count from the submission's store time, which a moved
	// copy carries.
	d.useAt, d.notBefore = d.task.UseAt.From(d.submitted), d.task.NotBefore.From(d.submitted)
	if d.invalid == nil {
		d.invalid = d.scheduleError(d.submitted)
	}
	d.digest = wire.MovedDigest(m.Subject(), m.Headers(), m.Data(), d.gen, d.submitted)
	d.deadline = d.task.Deadline
	if d.deadline.IsZero() {
		// The default window counts from when the task may start.
		d.deadline = wire.Latest(d.submitted, d.useAt, d.notBefore).Add(x.DefaultDeadline)
	}
	// A deadline is an instant on the broker's clock (the publish stamp
	// above; the producer's, read from the broker): the worker judges it on
	// its own clock and its solve's context, so it moves it by the worker's
	// offset from the broker.
	d.deadline = d.deadline.Add(-x.Clock.Offset())
	d.log = x.Log.With(slog.String("task_id", d.id), slog.String("method", d.task.Method),
		slog.String("host", wire.PageHost(d.task.Params)), slog.Uint64("delivery", d.number))
	if d.forged && !decided && !d.forgedOpen() {
		// Ended without a record (ForgedBudget): nothing of the id is read
		// or written for it.
		d.unrecorded = true
		return d, nil
	}
	d.st = taskstore.GenState{Gen: d.gen}
	if d.number == 1 && !d.moved {
		// Nobody has handled this message before: assume nothing is
		// recorded for the id and let the first write's compare-and-set
		// say otherwise, saving a read per task.
		d.assumed = true
		return d, nil
	}
	err = d.patiently(ctx, func() (err error) { d.st, err = x.Store.LoadGen(ctx, d.id, d.gen); return err })
	if err != nil {
		return nil, err
	}
	return d, nil
}

// openReplay checks a task message that carries a replay's message id
// against the dead letter it names, which is read before the message's
// body: a copy that names no letter of its id is forged, and its body,
// which may be as large as the broker takes, is not parsed for it (nor,
// unless the ForgedBudget records it, at all). It returns an error only
// when the task's records cannot be read.
func (d *delivery) openReplay(ctx context.Context) error {
	_, err := d.verify(ctx, func() error { return d.x.Store.VerifyReplayOf(ctx, d.id, d.gen, d.submitted, d.m.Headers(), d.parse) })
	return err
}

// verify runs check, a check of the delivery against the task's records,
// retrying a failed read (patiently): a verdict that it is forged
// (taskstore.ErrForged) marks it so and reports false; a read that keeps
// failing is the error.
func (d *delivery) verify(ctx context.Context, check func() error) (bool, error) {
	var verdict error
	if err := d.patiently(ctx, func() error {
		verdict = check()
		return taskstore.IgnoreForged(verdict)
	}); err != nil {
		return false, err
	}
	if verdict != nil {
		d.invalid, d.forged = verdict, true
		return false, nil
	}
	return true, nil
}

// openMoved reads what a moved copy of a task is (wire.MovedHeader): the
// generation it names and when that was submitted, if a scheduled event of
// the generation names its digest; otherwise it is not a submission of its
// id (forged), and ends as one on its own sequence. It returns an error
// only when the task's records cannot be read.
func (d *delivery) openMoved(ctx context.Context) error {
	gen, submitted, ok := wire.MovedFrom(d.m.Headers())
	// A worker that moves no task (it started before the stream had a
	// waiting room) still takes the copies other workers move back to the
	// lanes: its store checks them as a Mover does.
	var verifier movedVerifier = d.x.Mover
	if verifier == nil {
		verifier, _ = d.x.Store.(movedVerifier)
	}
	switch {
	case !ok:
		d.invalid = fmt.Errorf("headers %s and %s of a moved task are not a generation and a time", wire.HeaderGen, wire.HeaderSubmitted)
	case gen >= d.seq:
		d.invalid = fmt.Errorf("header %s %d: not a task message before this one", wire.HeaderGen, gen)
	case verifier == nil:
		d.invalid = fmt.Errorf("header %s: this worker cannot check a moved task", wire.HeaderGen)
	}
	if d.invalid != nil {
		d.forged = true
		return nil
	}
	digest := wire.MovedDigest(d.m.Subject(), d.m.Headers(), d.m.Data(), gen, submitted)
	if ok, err := d.verify(ctx, func() error { return verifier.VerifyMoved(ctx, d.id, gen, digest) }); !ok {
		return err
	}
	d.gen, d.submitted, d.moved = gen, submitted, true
	return nil
}

// movedVerifier checks a moved copy against its generation's scheduled
// events (Mover.VerifyMoved).
type movedVerifier interface {
	VerifyMoved(ctx context.Context, id string, gen uint64, digest string) error
}
