package taskstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/stream/internal/jscall"
	"github.com/captchaq/captchaq/stream/wire"
)

// VerifyMoved checks a moved copy of generation gen of task id whose
// digest is digest (wire.MovedDigest): anyone who may submit tasks could
// publish a message that names a generation of someone else's task, so a
// scheduled event of the generation, which only workers write, must name
// the digest. An error wrapping ErrForged says none does; any other error
// is a failed read. One direct read per record of the task from the
// generation on: a handful.
func VerifyMoved(ctx context.Context, s jetstream.Stream, id string, gen uint64, digest string) error {
	found := false
	err := jscall.WalkWhile(ctx, s, wire.EventSubject(id), gen, 0, func(m *jetstream.RawStreamMsg) bool {
		ev, ok := wire.ParseEvent(m.Data)
		found = ok && ev.Gen == gen && ev.Kind == wire.EventScheduled && ev.Digest == digest
		return !found
	})
	if err != nil {
		return fmt.Errorf("read the events of task %s: %w", id, err)
	}
	if !found {
		return fmt.Errorf("%w: it names generation %d, and no scheduled event of that generation names this message", ErrForged, gen)
	}
	return nil
}

// MovedCopy is the message a worker publishes on subject to to move task
// message (h, body) of generation gen, stored at submitted, whose sequence
// is from: the same body under wire.MovedHeader.
func MovedCopy(to string, h nats.Header, body []byte, gen uint64, submitted time.Time, from uint64) *nats.Msg {
	return &nats.Msg{Subject: to, Header: wire.MovedHeader(to, h, gen, submitted, from), Data: body}
}

// Move publishes a moved copy of a task (MovedCopy). A copy the
// stream takes for a duplicate is this worker's earlier one (it stopped
// before it acked the message it moved) only when the stream holds it on
// the same subject with the same digest (sameCopy); otherwise (someone
// else took the message id first, or the copy is gone, moved on or ended)
// the copy is published again without a message id: a second copy of a
// generation costs a delivery that finds the generation ahead of it, a
// lost one would lose the task.
func Move(ctx context.Context, js jetstream.JetStream, s jetstream.Stream, msg *nats.Msg) error {
	stream := jetstream.WithExpectStream(s.CachedInfo().Config.Name)
	ack, err := jscall.PublishRetrying(ctx, js, msg, stream)
	if err != nil || !ack.Duplicate {
		return err
	}
	kept, err := s.GetMsg(ctx, ack.Sequence)
	switch {
	case err == nil && sameCopy(kept, msg):
		return nil
	case err != nil && !errors.Is(err, jetstream.ErrMsgNotFound):
		return err
	}
	again := nats.NewMsg(msg.Subject)
	again.Data = msg.Data
	for k, v := range msg.Header {
		if k != wire.HeaderMsgID {
			again.Header[k] = v
		}
	}
	_, err = jscall.PublishRetrying(ctx, js, again, stream)
	return err
}

// sameCopy reports whether the stored message kept is copy msg: the same
// subject and the same digest (wire.MovedDigest, which covers the body,
// the headers a worker acts on, the generation and the store time), so
// that a message a producer published under the copy's message id with the
// same body but headers of its own (whose digest no scheduled event names,
// and which ends invalid) is not taken for it.
func sameCopy(kept *jetstream.RawStreamMsg, msg *nats.Msg) bool {
	kg, ks, ok := wire.MovedFrom(kept.Header)
	mg, ms, mok := wire.MovedFrom(msg.Header)
	return ok && mok && kept.Subject == msg.Subject &&
		wire.MovedDigest(kept.Subject, kept.Header, kept.Data, kg, ks) == wire.MovedDigest(msg.Subject, msg.Header, msg.Data, mg, ms)
}

// VerifyMoved checks a moved copy against the generation's scheduled
// events (VerifyMoved).
func (s *JetStream) VerifyMoved(ctx context.Context, id string, gen uint64, digest string) error {
	return VerifyMoved(ctx, s.Stream, id, gen, digest)
}

// Move publishes a moved copy of a task (Move).
func (s *JetStream) Move(ctx context.Context, msg *nats.Msg) error {
	return Move(ctx, s.JS, s.Stream, msg)
}
