// The stream's anchor (wire.SubjectAnchor): one message that never
// expires, stored by whoever creates or updates the stream.

package topology

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/stream/wire"
)

// StoreAnchor stores the stream's anchor unless the stream holds one: the
// publish expects no earlier message on wire.SubjectAnchor, so of racing
// creators only one stores it, and the others' "wrong last sequence" means
// it is there. On a replicated stream the leader may instead answer that
// another write to the subject is in flight (the "constant" variant): then
// it waits for that write to show, and stores the anchor itself if it never
// does (the other writer failed). After a purge it lands at the tail, and
// becomes the head once the older messages have left with the retention.
func StoreAnchor(ctx context.Context, js jetstream.JetStream, streamName string) error {
	for range 3 {
		msg := nats.NewMsg(wire.SubjectAnchor)
		msg.Header.Set(wire.HeaderNatsTTL, "never")
		msg.Data = anchorBody
		_, err := js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(0), jetstream.WithExpectStream(streamName))
		var apiErr *jetstream.APIError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence:
			return nil // there already
		case errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant:
			if anchorShows(ctx, js, streamName) {
				return nil
			}
			continue // the other write failed: try ours again
		default:
			return fmt.Errorf("store the anchor of stream %s: %w", streamName, err)
		}
	}
	return fmt.Errorf("store the anchor of stream %s: other writes kept getting in the way", streamName)
}

// anchorShows waits up to a second for the stream's anchor to be readable.
func anchorShows(ctx context.Context, js jetstream.JetStream, streamName string) bool {
	s, err := js.Stream(ctx, streamName)
	if err != nil {
		return false
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for range 20 {
		if _, err := s.GetLastMsgForSubject(ctx, wire.SubjectAnchor); err == nil {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
	return false
}

// TryStoreAnchor stores the stream's anchor unless it holds one, and gives
// up quietly. The anchor spares the server work; without it everything
// still works. So a stream that refuses it (full at its MaxBytes, say, or a
// role that may not publish on wire.SubjectAnchor) stops nobody, and the attempt
// is bounded: NATS reports a publish permission error only asynchronously,
// as a timeout.
func TryStoreAnchor(ctx context.Context, js jetstream.JetStream, stream string) {
	actx, cancel := context.WithTimeout(ctx, anchorTimeout)
	_ = StoreAnchor(actx, js, stream)
	cancel()
}

// anchorTimeout bounds storing the anchor.
const anchorTimeout = 5 * time.Second

// anchorBody says what the anchor is to whoever reads the stream.
var anchorBody = []byte(`{"captchaq":"anchor","note":"never expires; keeps the stream's first sequence below the workers' consumers, ` +
	`which spares nats-server a scan of every queued task subject per delivery; clients ignore it"}`)
