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
	d.gen, d.number, d.submitted = md.Sequence.Stream, md.NumDelivered, md.Timestamp
	// The id is the subject's last token, whatever the message says: the
	// stream stores task messages only on captcha.tasks.<lane>.<priority>.*,
	// so that token always names a subject of its own for the outcome.
	d.id = wire.IDFromSubject(m.Subject())
	d.task, d.invalid = wire.ParseTask(m.Data())
	if err := wire.CheckEnvelope(d.id, m.Headers(), d.task); err != nil {
		d.invalid, d.forged = err, true
	} else if m.Headers().Get(wire.HeaderMsgID) != d.id {
		var err error
		if perr := d.patiently(ctx, func() error {
			err = x.Store.VerifyReplay(ctx, d.id, d.gen, m.Headers(), d.task)
			return taskstore.IgnoreForged(err)
		}); perr != nil {
			return nil, perr
		}
		if err != nil {
			d.invalid, d.forged = err, true
		}
	}
	if d.invalid == nil {
		d.invalid = d.task.ValidateShape()
	}
	d.useAt, d.notBefore = d.task.UseAt.From(md.Timestamp), d.task.NotBefore.From(md.Timestamp)
	if d.invalid == nil {
		d.invalid = d.scheduleError(md.Timestamp)
	}
	d.deadline = d.task.Deadline
	if d.deadline.IsZero() {
		// The default window counts from when the task may start.
		d.deadline = wire.Latest(md.Timestamp, d.useAt, d.notBefore).Add(x.DefaultDeadline)
	}
	// A deadline is an instant on the broker's clock (the publish stamp
	// above; the producer's, read from the broker): the worker judges it on
	// its own clock and its solve's context, so it moves it by the worker's
	// offset from the broker.
	d.deadline = d.deadline.Add(-x.Clock.Offset())
	d.log = x.Log.With(slog.String("task_id", d.id), slog.String("method", d.task.Method),
		slog.String("host", wire.PageHost(d.task.Params)), slog.Uint64("delivery", d.number))
	d.st = taskstore.GenState{Gen: d.gen}
	if d.number == 1 {
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
