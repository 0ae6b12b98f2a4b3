package jscall

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// PublishRetrying publishes msg, retrying with the same options (and so the
// same message id) while the stream has no leader or the request times out,
// until ctx ends. The message id makes a retry after a lost ack harmless.
// A stream refusing the message for its limits is not retried: that is not
// a passing fault of the server.
func PublishRetrying(ctx context.Context, js jetstream.JetStream, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	var b Backoff
	for {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ack, err := js.PublishMsg(pctx, msg, opts...)
		cancel()
		if err == nil {
			return ack, nil
		}
		if !Passing(err) || ctx.Err() != nil {
			return nil, err
		}
		if !b.Wait(ctx) {
			return nil, fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		}
	}
}

// WrongLastSequence reports whether err is JetStream refusing a publish
// whose expected last sequence is not the stream's: a compare-and-set
// that lost.
func WrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// TooLarge reports whether a write failed for its size: over the stream's
// MaxMsgSize or the server's max_payload. Waiting never lifts that.
func TooLarge(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, nats.ErrMaxPayload) ||
		(errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum)
}

// StreamRefusedFull reports whether err is JetStream refusing a message for
// the stream's limits (DiscardNew at MaxBytes or MaxMsgs).
func StreamRefusedFull(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrCodeStreamStoreFailed &&
		(strings.Contains(apiErr.Description, "maximum bytes exceeded") || strings.Contains(apiErr.Description, "maximum messages exceeded"))
}

// jsErrCodeStreamStoreFailed is JetStream's error code for a message it
// could not store (JSStreamStoreFailedF); its description says why.
const jsErrCodeStreamStoreFailed jetstream.ErrorCode = 10077

// Walk calls fn with each message on subject (a wildcard is fine) from
// sequence from up to upTo (0: to the end), in stream order, one direct read
// each: for the few records of one task, where a consumer would cost more
// and workers may not create one.
func Walk(ctx context.Context, s jetstream.Stream, subject string, from, upTo uint64, fn func(*jetstream.RawStreamMsg)) error {
	return WalkWhile(ctx, s, subject, from, upTo, func(m *jetstream.RawStreamMsg) bool { fn(m); return true })
}

// WalkWhile is Walk that stops after the first message fn returns false for.
func WalkWhile(ctx context.Context, s jetstream.Stream, subject string, from, upTo uint64, fn func(*jetstream.RawStreamMsg) bool) error {
	for seq := max(from, 1); upTo == 0 || seq <= upTo; {
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if upTo != 0 && m.Sequence > upTo {
			return nil
		}
		if !fn(m) {
			return nil
		}
		seq = m.Sequence + 1
	}
	return nil
}
