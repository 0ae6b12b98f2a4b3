// The envelope of a task message: whether what the stream says about it
// (subject, message id, id header) and what it says of itself (body id)
// hold together.

package wire

import (
	"fmt"
	"strings"
	"time"

	"github.com/captchaq/captchaq/internal/text"
)

// CheckEnvelope checks what the stream says about a task message against
// what it says of itself: its id (from the subject) must be valid, and its
// Nats-Msg-Id, Captchaq-Task-Id header and body id must all be that id. A
// message that fails is never solved: it ends dead as an invalid task, on
// its own id. So no one can run a task under an id with another message id
// (bypassing the duplicate window) or be mistaken for another task.
func CheckEnvelope(id string, h map[string][]string, t Task) error {
	if err := CheckEnvelopeHeaders(id, h); err != nil {
		return err
	}
	if t.ID != "" && t.ID != id {
		return fmt.Errorf("id %q in the body differs from %q in the subject", text.Cut(t.ID, 70), id)
	}
	return nil
}

// CheckEnvelopeHeaders is CheckEnvelope without the body.
func CheckEnvelopeHeaders(id string, h map[string][]string) error {
	if err := ValidateID(id); err != nil {
		return fmt.Errorf("subject: %w", err)
	}
	// A generation and its store time are named only together, by a
	// worker's moved copy (IsMovedCopy, checked against the generation's
	// records): one alone is a producer's header naming what is not its own.
	switch gen, sub := header(h, HeaderGen) != "", header(h, HeaderSubmitted) != ""; {
	case gen && !sub:
		return fmt.Errorf("header %s without %s: only a worker's moved copy names a generation", HeaderGen, HeaderSubmitted)
	case sub && !gen:
		return fmt.Errorf("header %s without %s: only a worker's moved copy names a submission time", HeaderSubmitted, HeaderGen)
	}
	if hid := header(h, HeaderTaskID); hid != "" && hid != id {
		return fmt.Errorf("header %s %q differs from the id %q in the subject", HeaderTaskID, text.Cut(hid, 70), id)
	}
	switch msgID := header(h, HeaderMsgID); {
	case msgID == id:
	case msgID == ReplayMsgID(id, header(h, HeaderReplayedBy)) && header(h, HeaderReplayedBy) != "":
		// A replay of a dead letter (stream's Client.Replay).
	case msgID == "":
		return fmt.Errorf("header %s missing: it must be the task id %q", HeaderMsgID, id)
	default:
		return fmt.Errorf("header %s %q is not the task id %q", HeaderMsgID, text.Cut(msgID, 70), id)
	}
	return nil
}

// HeadersForged says why a task message on subject is not a submission of
// its id by what its headers alone say (CheckEnvelopeHeaders), or nil when
// they do not show it: a moved copy or a replay is checked against the
// task's records instead, and the body's id after the body is read. It
// reads nothing, so a worker may judge a message with it before it takes a
// thread for it.
func HeadersForged(subject string, h map[string][]string) error {
	if IsMovedCopy(h) {
		return nil
	}
	return CheckEnvelopeHeaders(IDFromSubject(subject), h)
}

// CheckSubmitBy checks the producer's submit-by instant of a task message
// under id (HeaderSubmitBy), when it carries one: it must be an RFC 3339
// time. Only the producer's own message is checked (its message id is the
// task id); a replay or a moved copy carries the header of the submission
// it stands for, which was checked then. A task whose header is not a time
// is refused rather than run as if it had none: its producer meant to bound
// when it may start.
func CheckSubmitBy(id string, h map[string][]string) error {
	v := header(h, HeaderSubmitBy)
	if v == "" || header(h, HeaderMsgID) != id {
		return nil
	}
	if _, err := time.Parse(time.RFC3339Nano, v); err != nil {
		return fmt.Errorf("header %s %q: not an RFC 3339 time", HeaderSubmitBy, text.Cut(v, 70))
	}
	return nil
}

// CheckQueue checks a task against the subject it was published on (a
// task subject or the waiting room's): its lane must be its method's
// (LaneOf), so that a slow captcha never holds a fast lane's threads and a
// fast one never waits behind slow ones, and a priority in its body must be
// the subject's. A producer chooses both, and the subject is what workers
// act on: one that contradicts the task is refused, not silently taken for
// the subject's word, so that a producer learns its mistake.
func CheckQueue(subject string, t Task) error {
	rest, _ := strings.CutPrefix(TaskSubjectOf(subject), SubjectTasks+".")
	lane, rest, _ := strings.Cut(rest, ".")
	priority, _, _ := strings.Cut(rest, ".")
	if want := LaneOf(t.Method, t.Params); lane != string(want) {
		return fmt.Errorf("lane %q: a %s task travels in lane %q", lane, t.Method, want)
	}
	if t.Priority != "" && string(t.Priority) != priority {
		return fmt.Errorf("priority %q in the body differs from %q in the subject", text.Cut(string(t.Priority), 20), priority)
	}
	return nil
}

// StoredLate says whether a task message with headers h, stored at stored
// (the stream's stamp, on the broker's clock), arrived after its
// producer's submit-by instant, and returns that instant. Only the
// producer's own message counts (its message id is the task id): a replay
// of a dead letter is the operator's submission, not the producer's.
// A header that is not an RFC 3339 time counts as absent.
func StoredLate(id string, h map[string][]string, stored time.Time) (by time.Time, late bool) {
	v := header(h, HeaderSubmitBy)
	if v == "" || header(h, HeaderMsgID) != id || stored.IsZero() {
		return time.Time{}, false
	}
	by, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, false
	}
	return by, stored.After(by)
}
