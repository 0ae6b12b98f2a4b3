// The envelope of a task message: whether what the stream says about it
// (subject, message id, id header) and what it says of itself (body id)
// hold together.

package wire

import (
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/captchaq/captchaq/internal/text"
)

// CheckEnvelope checks what the stream says about a task message against
// what it says of itself: its id (from the subject) must be valid, and its
// Nats-Msg-Id, Captchaq-Task-Id header and body id must all be that id. A
// message that fails is never solved: it ends dead as an invalid task, on
// its own id. So no one can run a task under an id with another message id
// (bypassing the duplicate window) or be mistaken for another task.
func CheckEnvelope(id string, h nats.Header, t Task) error {
	if err := CheckEnvelopeHeaders(id, h); err != nil {
		return err
	}
	if t.ID != "" && t.ID != id {
		return fmt.Errorf("id %q in the body differs from %q in the subject", text.Cut(t.ID, 70), id)
	}
	return nil
}

// CheckEnvelopeHeaders is CheckEnvelope without the body.
func CheckEnvelopeHeaders(id string, h nats.Header) error {
	if err := ValidateID(id); err != nil {
		return fmt.Errorf("subject: %w", err)
	}
	if hid := h.Get(HeaderTaskID); hid != "" && hid != id {
		return fmt.Errorf("header %s %q differs from the id %q in the subject", HeaderTaskID, text.Cut(hid, 70), id)
	}
	switch msgID := h.Get(HeaderMsgID); {
	case msgID == id:
	case msgID == ReplayMsgID(id, h.Get(HeaderReplayedBy)) && h.Get(HeaderReplayedBy) != "":
		// A replay of a dead letter (stream's Client.Replay).
	case msgID == "":
		return fmt.Errorf("header %s missing: it must be the task id %q", HeaderMsgID, id)
	default:
		return fmt.Errorf("header %s %q is not the task id %q", HeaderMsgID, text.Cut(msgID, 70), id)
	}
	return nil
}

// StoredLate says whether a task message with headers h, stored at stored
// (the stream's stamp, on the broker's clock), arrived after its
// producer's submit-by instant, and returns that instant. Only the
// producer's own message counts (its message id is the task id): a replay
// of a dead letter is the operator's submission, not the producer's.
// A header that is not an RFC 3339 time counts as absent.
func StoredLate(id string, h nats.Header, stored time.Time) (by time.Time, late bool) {
	v := h.Get(HeaderSubmitBy)
	if v == "" || h.Get(HeaderMsgID) != id || stored.IsZero() {
		return time.Time{}, false
	}
	by, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, false
	}
	return by, stored.After(by)
}
