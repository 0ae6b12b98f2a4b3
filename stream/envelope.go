// Reading a delivery: what the task message is, and whether its envelope
// (subject, message id, id header, body id) holds together.

package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"time"

	"github.com/captchaq/captchaq/internal/text"
	"github.com/captchaq/captchaq/stream/internal/jscall"
	"github.com/captchaq/captchaq/stream/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// open reads what the delivery is: the task, its id and generation, whether
// the message is a valid task at all, and the generation's state.
func (w *Worker) open(ctx context.Context, m jetstream.Msg) (*delivery, error) {
	d := &delivery{w: w, m: m}
	md, err := m.Metadata()
	if err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	d.gen, d.number, d.submitted = md.Sequence.Stream, md.NumDelivered, md.Timestamp
	// The id is the subject's last token, whatever the message says: the
	// stream stores task messages only on captcha.tasks.<lane>.<priority>.*,
	// so that token always names a subject of its own for the outcome.
	d.id = wire.IDFromSubject(m.Subject())
	d.task, d.invalid = ParseTask(m.Data())
	if err := wire.CheckEnvelope(d.id, m.Headers(), d.task); err != nil {
		d.invalid, d.forged = err, true
	} else if m.Headers().Get(wire.HeaderMsgID) != d.id {
		var err error
		if perr := d.patiently(ctx, func() error { err = verifyReplay(ctx, w.s, d.id, d.gen, m.Headers(), d.task); return ignoreForged(err) }); perr != nil {
			return nil, perr
		}
		if err != nil {
			d.invalid, d.forged = err, true
		}
	}
	if d.invalid == nil {
		d.invalid = d.task.ValidateShape()
	}
	d.deadline = d.task.Deadline
	if d.deadline.IsZero() {
		d.deadline = md.Timestamp.Add(w.cfg.DefaultDeadline)
	}
	// A deadline is an instant on the broker's clock (the publish stamp
	// above; the producer's, read from the broker): the worker judges it on
	// its own clock and its solve's context, so it moves it by the worker's
	// offset from the broker.
	d.deadline = d.deadline.Add(-time.Duration(w.clock.offset.Load()))
	d.log = w.log.With(slog.String("task_id", d.id), slog.String("method", d.task.Method),
		slog.String("host", wire.PageHost(d.task.Params)), slog.Uint64("delivery", d.number))
	d.st = genState{gen: d.gen}
	if d.number == 1 {
		// Nobody has handled this message before: assume nothing is
		// recorded for the id and let the first write's compare-and-set
		// say otherwise, saving a read per task.
		d.assumed = true
		return d, nil
	}
	err = d.patiently(ctx, func() (err error) { d.st, err = loadGen(ctx, w.s, d.id, d.gen); return err })
	if err != nil {
		return nil, err
	}
	return d, nil
}

// ignoreForged is err unless it says a message is forged (a verdict, not a
// failed read).
func ignoreForged(err error) error {
	if errors.Is(err, errForged) {
		return nil
	}
	return err
}

// verifyReplay checks a task message that carries a replay's message id
// (Client.Replay): anyone who may submit tasks could put one on a task of
// their own, so it must name a dead letter of the same id with the same
// task (method and parameters), or a replay record of the admin's must name
// it. An error wrapping errForged says it does not; any other error is a
// failed read.
func verifyReplay(ctx context.Context, s jetstream.Stream, id string, gen uint64, h nats.Header, t Task) error {
	deadSeq, err := strconv.ParseUint(h.Get(wire.HeaderReplayedBy), 10, 64)
	if err != nil {
		return fmt.Errorf("%w: header %s %q is not a sequence", errForged, wire.HeaderReplayedBy, text.Cut(h.Get(wire.HeaderReplayedBy), 30))
	}
	d, err := s.GetMsg(ctx, deadSeq)
	switch {
	case err == nil && d.Subject == wire.DeadSubject(id):
		dt, perr := ParseTask(d.Data)
		if perr == nil && dt.Method == t.Method && maps.Equal(dt.Params, t.Params) {
			return nil
		}
		return fmt.Errorf("%w: the task differs from dead letter %d it claims to replay", errForged, deadSeq)
	case err != nil && !errors.Is(err, jetstream.ErrMsgNotFound):
		return err
	}
	// The letter is gone (purged after the replay): the admin's replay
	// record still names this task message.
	found := false
	err = jscall.Walk(ctx, s, wire.ReplaySubject(id), 0, 0, func(m *jetstream.RawStreamMsg) {
		var r Replay
		if json.Unmarshal(m.Data, &r) == nil && r.DeadSeq == deadSeq && r.TaskSeq == gen {
			found = true
		}
	})
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("%w: message %d is not a dead letter of %s, and no replay record names this task", errForged, deadSeq, id)
	}
	return nil
}
