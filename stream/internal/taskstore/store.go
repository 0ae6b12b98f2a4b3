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

// Store is what one delivery reads and writes of its task: the state of
// its generation, the task's records (each written by compare-and-set),
// its token, its cancel, the heartbeat of the worker of its last attempt,
// and the dead letter a replay names. JetStream is the store; tests of
// the executor use one in memory.
type Store interface {
	// LoadGen reads the state of generation gen of task id.
	LoadGen(ctx context.Context, id string, gen uint64) (GenState, error)
	// Append stores msg as the next record of task id, expecting expect as
	// the last sequence over the task's records (wire.IDSubjects), and
	// returns its sequence. When another record came first the error wraps
	// ErrConflict and nothing is stored.
	Append(ctx context.Context, id string, expect uint64, msg *nats.Msg) (uint64, error)
	// PutToken stores msg, the token of generation gen of task id, for ttl,
	// expecting over as the last sequence on the token's subject (0: no
	// token yet; else the foreign one it replaces); when another came first
	// it stores nothing (an error wrapping ErrTokenTaken). A token too
	// large to keep is ErrTokenTooLarge.
	// It returns the token's sequence in the token stream.
	PutToken(ctx context.Context, id string, gen uint64, msg *nats.Msg, ttl time.Duration, over uint64) (uint64, error)
	// Token reads the token of generation gen of task id, and whether it
	// is there (it is not once expired).
	Token(ctx context.Context, id string, gen uint64) (StoredToken, bool, error)
	// AttemptAt reports whether the record at sequence seq is an attempt
	// event of generation gen of task id, with the event when it is.
	AttemptAt(ctx context.Context, id string, gen, seq uint64) (wire.Event, bool, error)
	// CancelOf returns the valid cancel record of the generation whose
	// state is st and whose task message carries headers h; nil when none.
	CancelOf(ctx context.Context, id string, st GenState, h nats.Header) (*wire.CancelRecord, error)
	// Heartbeat reads the latest heartbeat of worker: its body and its
	// sequence; found is false when there is none.
	Heartbeat(ctx context.Context, worker string) (data []byte, seq uint64, found bool, err error)
	// HeartbeatPart reads the message at seq, a part of a split heartbeat
	// of worker (wire.WorkerInfo.HeldParts); found is false when there is
	// none, or it is not on the worker's heartbeat subject.
	HeartbeatPart(ctx context.Context, worker string, seq uint64) (data []byte, found bool, err error)
	// VerifyReplayOf checks a task message that carries a replay's message
	// id against the dead letter it names, read before the message's body
	// is parsed (parse, called only when there is a letter to compare it
	// with); stored is when the stream stored the message. An error
	// wrapping ErrForged says it is not a replay of it, any other a failed
	// read.
	VerifyReplayOf(ctx context.Context, id string, gen uint64, stored time.Time, h nats.Header, parse func() (wire.Task, error)) error
}

// ErrConflict means a compare-and-set write lost: another record of the
// task came first.
var ErrConflict = errors.New("another record of the task came first")

// ErrTokenTaken means the generation has a token already.
var ErrTokenTaken = errors.New("the generation has a token already")

// ErrTokenTooLarge means the token stream refuses the answer for its size
// (its MaxMsgSize). Trying again would pay for the same refusal.
var ErrTokenTooLarge = errors.New("token too large to keep")

// JetStream is the Store on the CAPTCHA stream and its token stream.
type JetStream struct {
	JS jetstream.JetStream
	// Stream is the CAPTCHA stream, Tokens the token stream.
	Stream, Tokens jetstream.Stream
	// NC and Domain reach the stream for batched direct gets.
	NC     *nats.Conn
	Domain string

	// replays is what it read of ids' letters and replay records
	// (VerifyReplayOf).
	replays replayCache
}

var _ Store = (*JetStream)(nil)

// LoadGen reads the state of generation gen of task id (LoadGen).
func (s *JetStream) LoadGen(ctx context.Context, id string, gen uint64) (GenState, error) {
	return LoadGen(ctx, s.Stream, id, gen)
}

// Append publishes msg expecting the last sequence over the task's records.
func (s *JetStream) Append(ctx context.Context, id string, expect uint64, msg *nats.Msg) (uint64, error) {
	ack, err := jscall.PublishRetrying(ctx, s.JS, msg, jetstream.WithExpectLastSequenceForSubject(expect, wire.IDSubjects(id)))
	switch {
	case err == nil && ack.Duplicate:
		// No worker write carries a message id, so the stream cannot
		// have taken this for one it already has.
		return 0, fmt.Errorf("store %s: taken for a duplicate of message %d", msg.Subject, ack.Sequence)
	case jscall.WrongLastSequence(err):
		return 0, fmt.Errorf("%w: %w", ErrConflict, err)
	case err != nil:
		return 0, err
	}
	return ack.Sequence, nil
}

// PutToken publishes the token with its TTL, expecting over as the last
// message on its subject (compare-and-set): a generation's token is written
// once by this pool, over nothing or over one no worker of it stored.
func (s *JetStream) PutToken(ctx context.Context, id string, gen uint64, msg *nats.Msg, ttl time.Duration, over uint64) (uint64, error) {
	ack, err := jscall.PublishRetrying(ctx, s.JS, msg, jetstream.WithExpectStream(s.Tokens.CachedInfo().Config.Name),
		jetstream.WithExpectLastSequencePerSubject(over), jetstream.WithMsgTTL(ttl))
	switch {
	case errors.Is(err, jetstream.ErrStreamMessageExceedsMaximum):
		return 0, fmt.Errorf("%w: %w", ErrTokenTooLarge, err)
	case jscall.WrongLastSequence(err):
		return 0, fmt.Errorf("%w: %w", ErrTokenTaken, err)
	case err != nil:
		return 0, err
	}
	return ack.Sequence, nil
}

// Token reads the token from the token stream (ReadStoredToken).
func (s *JetStream) Token(ctx context.Context, id string, gen uint64) (StoredToken, bool, error) {
	return ReadStoredToken(ctx, s.Tokens, id, gen)
}

// AttemptAt reads the record at seq from the CAPTCHA stream (AttemptAt).
func (s *JetStream) AttemptAt(ctx context.Context, id string, gen, seq uint64) (wire.Event, bool, error) {
	return AttemptAt(ctx, s.Stream, id, gen, seq)
}

// CancelOf finds the generation's cancel record (CancelOf).
func (s *JetStream) CancelOf(ctx context.Context, id string, st GenState, h nats.Header) (*wire.CancelRecord, error) {
	return CancelOf(ctx, s.NC, s.Domain, s.Stream.CachedInfo().Config.Name, id, st, h)
}

// Heartbeat reads the worker's last heartbeat on its subject.
func (s *JetStream) Heartbeat(ctx context.Context, worker string) ([]byte, uint64, bool, error) {
	m, err := s.Stream.GetLastMsgForSubject(ctx, wire.HeartbeatSubject(worker))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return nil, 0, false, nil
	case err != nil:
		return nil, 0, false, err
	}
	return m.Data, m.Sequence, true, nil
}

// HeartbeatPart reads a part of the worker's split heartbeat.
func (s *JetStream) HeartbeatPart(ctx context.Context, worker string, seq uint64) ([]byte, bool, error) {
	m, err := s.Stream.GetMsg(ctx, seq)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return nil, false, nil
	case err != nil:
		return nil, false, err
	case m.Subject != wire.HeartbeatSubject(worker):
		return nil, false, nil
	}
	return m.Data, true, nil
}
