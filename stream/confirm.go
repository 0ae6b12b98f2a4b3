package stream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/captchaq/captchaq/stream/internal/taskstore"
	"github.com/captchaq/captchaq/stream/wire"
)

// A submission whose caller gives up (its context ends) before the
// broker's acknowledgement comes cannot take back what it sent: the message
// may wait in the connection's buffers, or in the kernel's, while the
// broker is stalled (a SIGSTOP, a long pause), and be stored when it
// resumes, long after the caller was told the submission failed. The
// caller, told so, submits again, and the service would be paid twice. So
// a submission under a deadline carries the instant by which it must be
// stored (wire.HeaderSubmitBy, on the broker's clock): submitSlack before
// the caller's deadline. A worker ends a task stored later without an
// attempt (code SUBMIT_BY_PASSED): what the caller was told stands. The
// slack covers the error of the client's reading of the broker's clock (at
// most the round trip of the request it was read from) and the time an
// acknowledgement takes to come back.
//
// One case remains that no one can know at the moment: the broker stored
// the task in time and its acknowledgement was lost. The caller then gets
// a *NotConfirmedError (not "it failed"), naming the id under which
// Wait says what became of it: solved, or ended with SUBMIT_BY_PASSED, or
// not found (never stored, and never to be solved).

// submitSlack is how long before its context's deadline a submission must
// be stored.
const submitSlack = time.Second

// submitByStamp is the submit-by instant of a submission, on this
// process's clock (by), when its context has a deadline (ok).
type submitByStamp struct {
	by time.Time
	ok bool
}

// stampSubmitBy stamps msg, a task message published under ctx, with its
// submit-by instant on the broker's clock (wire.HeaderSubmitBy), when ctx
// has a deadline. The deadline is on the real clock, and so is the time
// since the client read the broker's clock: a step of the client's clock
// since (an NTP correction) does not stamp an instant already passed,
// which would end the task unsolved.
func (c *Client) stampSubmitBy(ctx context.Context, msg *nats.Msg) submitByStamp {
	by, ok := submitBy(ctx, time.Now())
	if ok {
		msg.Header.Set(wire.HeaderSubmitBy, c.brokerNow().Add(time.Until(by)).UTC().Format(time.RFC3339Nano))
	}
	return submitByStamp{by: by, ok: ok}
}

// publishFailed is the error of a publish of task id that failed: a
// *NotConfirmedError when the broker may have stored it in time.
func (sb submitByStamp) publishFailed(id string, err error) error {
	if sb.ok && unconfirmed(err) {
		return &NotConfirmedError{ID: id, By: sb.by, Err: err}
	}
	return err
}

// confirmedInTime checks, for a publish confirmed near or after its
// submit-by instant, that the task was stored by then (storedInTime): the
// stored time decides whether a worker solves it.
func (c *Client) confirmedInTime(ctx context.Context, sb submitByStamp, id string, seq uint64, msg *nats.Msg) error {
	if !sb.ok || time.Now().Before(sb.by.Add(-submitSlack)) {
		return nil
	}
	return c.storedInTime(ctx, id, seq, msg.Header.Get(wire.HeaderSubmitBy), sb.by)
}

// submitBy is the instant (on this process's clock) by which a submission
// under ctx must be stored: submitSlack before ctx's deadline, or a quarter
// of what is left of it when that is shorter. ok is false when ctx has no
// deadline: its caller waits for the answer however long it takes.
func submitBy(ctx context.Context, now time.Time) (by time.Time, ok bool) {
	dl, ok := ctx.Deadline()
	if !ok {
		return time.Time{}, false
	}
	left := dl.Sub(now)
	return dl.Add(-min(submitSlack, max(left/4, 0))), true
}

// storedInTime checks that the task message at seq was stored by its
// submit-by instant (header value byHeader): a worker ends one stored later
// unsolved, so a Submit that returned its receipt would tell its caller a
// task would be solved that will not be. A message it cannot read leaves
// that open: a *NotConfirmedError.
func (c *Client) storedInTime(ctx context.Context, id string, seq uint64, byHeader string, by time.Time) error {
	m, ok, err := c.rd.At(ctx, seq)
	if err != nil {
		return &NotConfirmedError{ID: id, By: by, Err: fmt.Errorf("read the stored task: %w", err)}
	}
	if !ok {
		return nil // ended and erased already: it was taken
	}
	if bh, late := wire.StoredLate(id, nats.Header{wire.HeaderSubmitBy: {byHeader}, wire.HeaderMsgID: {id}}, m.Stored); late {
		return fmt.Errorf("submit task %s: stored at %s, after its submit-by %s: it ends unsolved (%s) and is not paid; submit it again under another id",
			id, m.Stored.UTC().Format(time.RFC3339Nano), bh.UTC().Format(time.RFC3339Nano), wire.CodeSubmitByPassed)
	}
	return nil
}

// unconfirmed reports whether err, a publish's failure, leaves open
// whether the broker stored the message: no answer came (a timeout, the
// context's end, a lost connection). An answer of the broker's (an API
// error: the stream refused it) or a message too large to send is a
// definite no.
func unconfirmed(err error) bool {
	if taskstore.Refused(err) || errors.Is(err, ErrStreamFull) || errors.Is(err, nats.ErrMaxPayload) {
		return false
	}
	return true
}

// scheduleSlack is how far apart the instants of a duplicate's use_at or
// not_before and the stored task's may be and still be the same: the
// stored one was taken on the broker's clock a moment before its message
// was stored, and a duration counts from that store time.
const scheduleSlack = 2 * time.Second

// sameSchedule checks that r, a receipt the stream answered as a duplicate
// of msg, the message of given (the task as its caller gave it), is a
// submission with the stored task's use_at and not_before: the first
// submission under an id stands, and a caller who asked for another time
// must hear that the token comes at the first's. A duration counts from the
// stored message's time, so the same "in 10m" submitted again a minute
// later is the same submission. A stored message that is gone (its task
// ended and was erased) is not compared.
func (c *Client) sameSchedule(ctx context.Context, given Task, msg *nats.Msg, r Receipt) error {
	m, ok, err := c.rd.At(ctx, r.Seq)
	if err != nil {
		return fmt.Errorf("task %s: the stream has a submission under this id (sequence %d); read it: %w", r.ID, r.Seq, err)
	}
	if !ok {
		return nil
	}
	if bytes.Equal(m.Data, msg.Data) {
		return nil // this very message, its publish retried
	}
	stored, err := wire.ParseTask(m.Data)
	if err != nil {
		return fmt.Errorf("task %s: %w (stream sequence %d), which is not a valid task: submit under another id", r.ID, ErrIDTaken, r.Seq)
	}
	for _, f := range []struct {
		name          string
		stored, given wire.When
	}{{"use_at", stored.UseAt, given.UseAt}, {"not_before", stored.NotBefore, given.NotBefore}} {
		was, asked := f.stored.From(m.Stored), f.given.From(m.Stored)
		if was.IsZero() == asked.IsZero() && (was.IsZero() || was.Sub(asked).Abs() <= scheduleSlack) {
			continue
		}
		return fmt.Errorf("task %s: %w (stream sequence %d) with %s %s, not %s: the first stands; submit under another id",
			r.ID, ErrIDTaken, r.Seq, f.name, instantText(was), instantText(asked))
	}
	return nil
}

// instantText is t in RFC 3339, or "none" when zero.
func instantText(t time.Time) string {
	if t.IsZero() {
		return "none"
	}
	return t.UTC().Format(time.RFC3339)
}
