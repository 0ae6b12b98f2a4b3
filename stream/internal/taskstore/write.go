package taskstore

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/stream/internal/jscall"
)

// Writer writes the records a producer and an admin add to the CAPTCHA
// stream: task messages (each under its message id, so the stream keeps one
// per id within its duplicate window), cancel and replay records, and the
// erasure of dead letters. A worker's writes go through Store.
type Writer struct {
	js jetstream.JetStream
	s  jetstream.Stream
	// stream is the CAPTCHA stream's name: every task message expects it.
	stream string
}

// NewWriter writes on the CAPTCHA stream s through js.
func NewWriter(js jetstream.JetStream, s jetstream.Stream) *Writer {
	return &Writer{js: js, s: s, stream: s.CachedInfo().Config.Name}
}

// Ack is the stream's answer to a stored message: its sequence, and whether
// the stream took it for a duplicate of one it already keeps under its
// message id (Seq is then that one's).
type Ack struct {
	Seq       uint64
	Duplicate bool
}

func ackOf(a *jetstream.PubAck) Ack { return Ack{Seq: a.Sequence, Duplicate: a.Duplicate} }

// Submit stores task message msg under message id id, expecting the
// CAPTCHA stream, retrying a publish that is not answered (jscall.PublishRetrying)
// with the same id: nothing is lost and nothing doubled.
func (w *Writer) Submit(ctx context.Context, msg *nats.Msg, id string) (Ack, error) {
	ack, err := jscall.PublishRetrying(ctx, w.js, msg, jetstream.WithMsgID(id), jetstream.WithExpectStream(w.stream))
	if err != nil {
		return Ack{}, err
	}
	return ackOf(ack), nil
}

// Pending is a task message sent without waiting for its answer
// (SubmitAsync).
type Pending struct{ fut jetstream.PubAckFuture }

// SubmitAsync sends task message msg as Submit does, without waiting for the
// stream's answer: Pending.Wait takes it. A message that could not be sent
// gives a Pending whose Wait reports no answer.
func (w *Writer) SubmitAsync(msg *nats.Msg, id string) Pending {
	fut, err := w.js.PublishMsgAsync(msg, jetstream.WithMsgID(id), jetstream.WithExpectStream(w.stream))
	if err != nil {
		return Pending{}
	}
	return Pending{fut: fut}
}

// Wait returns the stream's answer to p; ok is false when none came (the
// publish failed or was never sent: submit it again, with its id). It
// returns ctx's error when ctx ends first.
func (p Pending) Wait(ctx context.Context) (ack Ack, ok bool, err error) {
	if p.fut == nil {
		return Ack{}, false, nil
	}
	select {
	case a := <-p.fut.Ok():
		return ackOf(a), true, nil
	case <-p.fut.Err():
		return Ack{}, false, nil
	case <-ctx.Done():
		return Ack{}, false, ctx.Err()
	}
}

// Publish stores msg once, expecting the CAPTCHA stream.
func (w *Writer) Publish(ctx context.Context, msg *nats.Msg) error {
	_, err := w.js.PublishMsg(ctx, msg, jetstream.WithExpectStream(w.stream))
	return err
}

// PublishData stores data on subject, once, in whichever stream holds the
// subject.
func (w *Writer) PublishData(ctx context.Context, subject string, data []byte) error {
	_, err := w.js.Publish(ctx, subject, data)
	return err
}

// PublishWithID stores msg under message id msgID, retrying as Submit does.
func (w *Writer) PublishWithID(ctx context.Context, msg *nats.Msg, msgID string) (Ack, error) {
	ack, err := jscall.PublishRetrying(ctx, w.js, msg, jetstream.WithMsgID(msgID))
	if err != nil {
		return Ack{}, err
	}
	return ackOf(ack), nil
}

// Erase deletes the record at seq and overwrites its bytes in the store
// (a dead letter holds the task's page URL); one already gone is no error.
func (w *Writer) Erase(ctx context.Context, seq uint64) error {
	if err := w.s.SecureDeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return err
	}
	return nil
}

// Refused reports whether err, a publish's failure, is the broker's own
// answer (an API error: the stream refused the message), so that the
// message is known not to be stored.
func Refused(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr)
}
