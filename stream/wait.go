// Waiting for outcomes: by id (Wait), or by receipt (Solve, WaitAll).

package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nuid"

	"github.com/captchaq/captchaq/stream/internal/taskstore"
	"github.com/captchaq/captchaq/stream/wire"
)

// Wait blocks until task id has an outcome and returns it. It works whether
// the outcome was published before or after Wait began. On a Client that
// submitted id (Submit, SubmitAll or Solve; it remembers its last 16,384
// ids) it waits for the outcome of that submission, or, once it died and
// its dead letter was replayed, of the replay: never for a task someone
// else published under the same id after the duplicate window. Otherwise
// it waits for the latest submission of id, a replay included. A dead task
// returns its Outcome with an error wrapping ErrNotSolved; a solved task
// whose token has expired returns its Outcome (without solution) and
// ErrTokenExpired. A broker reopening its store (after a full disk) is
// waited through, as every reader of outcomes does, until ctx ends.
func (c *Client) Wait(ctx context.Context, id string) (Outcome, error) {
	if err := ValidateID(id); err != nil {
		return Outcome{}, err
	}
	var gen uint64
	err := taskstore.UntilRead(ctx, func() (err error) {
		if own, ok := c.own.get(id); ok {
			gen, err = c.rd.ReplayedFrom(ctx, id, own)
		} else {
			var ok bool
			if gen, ok, err = c.rd.LatestGen(ctx, id); err == nil && !ok {
				err = ErrNotFound
			}
		}
		return err
	})
	if err != nil {
		return Outcome{}, fmt.Errorf("wait for task %s: %w", id, err)
	}
	return c.waitGen(ctx, id, gen)
}

// waitGen waits for the outcome of generation gen of task id.
func (c *Client) waitGen(ctx context.Context, id string, gen uint64) (Outcome, error) {
	var (
		out      Outcome
		solvedEv *Event
		found    bool
		tokenSeq uint64 // the token the outcome names
	)
	// Once the solve is known, the token's expiry ends the wait even if its
	// outcome never comes (stored by nobody) and no other message arrives.
	sctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	errExpired := errors.New("token expired")
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	// One read of all the task's records (outcome and events among them),
	// woken by the outcome's republished header: the events matter only to
	// a solve whose outcome never comes, which the token's expiry (and the
	// follower's poll) settles.
	o := taskstore.ScanOpts{Subjects: []string{wire.IDSubjects(id)}, Wake: []string{wire.ResultSubject(id)}, StartSeq: gen, Follow: true}
	err := c.rd.Scan(sctx, o, func(m taskstore.Record) (bool, error) {
		if m.Subject == wire.ResultSubject(id) {
			if g, _ := strconv.ParseUint(m.Header.Get(wire.HeaderGen), 10, 64); g != gen {
				return false, nil
			}
			if err := json.Unmarshal(m.Data, &out); err != nil {
				return false, fmt.Errorf("outcome of task %s: %w", id, err)
			}
			found, tokenSeq = true, taskstore.TokenSeqOf(m.Header)
			return true, nil
		}
		if m.Subject != wire.EventSubject(id) {
			return false, nil // a dead letter, a replay or a cancel record: the outcome follows
		}
		if ev, ok := wire.ParseEvent(m.Data); ok && ev.Gen == gen && ev.Kind == EventSolved {
			solvedEv = &ev
			if timer == nil {
				timer = time.AfterFunc(max(ev.ExpiresAt.Sub(c.cfg.Now()), 0), func() { stop(errExpired) })
			}
		}
		// Caught up, solved, no outcome, and the token expired: the
		// worker stopped before storing the outcome, and it is no use now.
		if solvedEv != nil && m.Pending == 0 && c.tokenGone(*solvedEv) {
			out = expiredOutcome(id, *solvedEv)
			return true, nil
		}
		return false, nil
	})
	if err != nil && solvedEv != nil && errors.Is(context.Cause(sctx), errExpired) && ctx.Err() == nil {
		return c.checkOutcome(expiredOutcome(id, *solvedEv), false)
	}
	if err != nil {
		return Outcome{}, fmt.Errorf("wait for task %s: %w", id, err)
	}
	if found {
		if out, found, err = c.withToken(ctx, out, gen, tokenSeq); err != nil {
			return Outcome{}, fmt.Errorf("wait for task %s: %w", id, err)
		}
	}
	return c.checkOutcome(out, found)
}

func (c *Client) checkOutcome(out Outcome, found bool) (Outcome, error) {
	switch {
	case out.Status == StatusDead:
		return out, fmt.Errorf("task %s: %w: %s (%s)", out.ID, ErrNotSolved, out.Reason, out.Error)
	case !c.cfg.Now().Before(out.ExpiresAt):
		out.Solution, out.UserAgent = nil, ""
		return out, fmt.Errorf("task %s: %w (expired %s)", out.ID, ErrTokenExpired, out.ExpiresAt.Format(time.RFC3339))
	case !found:
		out.Solution, out.UserAgent = nil, ""
		return out, fmt.Errorf("task %s: %w: the token stream lost it before its expiry at %s (a broker restart)",
			out.ID, ErrTokenExpired, out.ExpiresAt.Format(time.RFC3339))
	}
	return out, nil
}

// Solve submits a task and waits for its outcome: the one call a checkout
// flow needs. Without a task deadline, ctx's deadline (if any) becomes it.
func (c *Client) Solve(ctx context.Context, t Task) (Outcome, error) {
	if dl, ok := ctx.Deadline(); ok && t.Deadline.IsZero() {
		t.Deadline = dl
	}
	// Solve's caller may cancel the task (Cancel): its message carries the
	// hash of a secret only this Client knows.
	if t.ID == "" {
		t.ID = nuid.Next()
	}
	secret, hash := wire.NewCancelKey()
	c.cancelKeys.Store(t.ID, secret)
	c.cancelHashes.Store(t.ID, hash)
	r, err := c.Submit(ctx, t)
	c.cancelHashes.Delete(t.ID)
	if err == nil && r.Duplicate {
		err = c.ownSubmission(ctx, r, hash)
	}
	if err != nil {
		c.cancelKeys.Delete(t.ID)
		return Outcome{}, err
	}
	out, err := c.waitGen(ctx, r.ID, r.Seq)
	if ctx.Err() == nil {
		c.cancelKeys.Delete(t.ID) // ended: nothing left to cancel
	}
	return out, err
}

// ownSubmission checks that r, a receipt the stream answered as a
// duplicate, is this Solve's own publish (retried after a lost
// acknowledgement): the message at r.Seq carries hash, the hash of a cancel
// secret only this call knows. Anyone may publish a task under any id, so
// a duplicate may be another producer's task, with its own page and
// sitekey: waiting on it would hand its token out as this task's. A message
// already gone (its task ended and was erased) cannot be told apart, and is
// not taken as ours either.
func (c *Client) ownSubmission(ctx context.Context, r Receipt, hash string) error {
	m, ok, err := c.rd.At(ctx, r.Seq)
	if err != nil {
		return fmt.Errorf("task %s: the stream has a submission under this id (sequence %d); read it: %w", r.ID, r.Seq, err)
	}
	if ok && m.Header.Get(wire.HeaderCancelHash) == hash {
		return nil
	}
	return fmt.Errorf("task %s: %w (stream sequence %d) within the last %s: submit under another id",
		r.ID, ErrIDTaken, r.Seq, c.top.DuplicateWindow)
}

// WaitAll waits for the outcomes of the given receipts and calls fn with each
// as it arrives (fn's error, if any, is passed with it: ErrNotSolved or
// ErrTokenExpired). It reads every outcome with one consumer, however many
// tasks there are, and returns when all have arrived or ctx ends. A task
// solved so long ago that its token has left the stream is reported with
// ErrTokenExpired, from its event log.
func (c *Client) WaitAll(ctx context.Context, receipts []Receipt, fn func(Outcome, error)) error {
	if len(receipts) == 0 {
		return nil
	}
	want := make(map[string]uint64, len(receipts))
	start := receipts[0].Seq
	for _, r := range receipts {
		want[r.ID] = r.Seq
		start = min(start, r.Seq)
	}
	solved := map[string]Event{} // solved events of wanted tasks whose outcome has not come yet
	err := c.rd.ScanFrom(ctx, []string{wire.SubjectResults + ".>", wire.SubjectEvents + ".>"}, start, true, func(m taskstore.Record) (bool, error) {
		id := wire.IDFromSubject(m.Subject)
		if gen, ok := want[id]; ok {
			if m.Subject == wire.ResultSubject(id) {
				if g, _ := strconv.ParseUint(m.Header.Get(wire.HeaderGen), 10, 64); g == gen {
					var out Outcome
					if err := json.Unmarshal(m.Data, &out); err != nil {
						return false, fmt.Errorf("outcome of task %s: %w", id, err)
					}
					delete(want, id)
					delete(solved, id)
					out, found, err := c.withToken(ctx, out, gen, taskstore.TokenSeqOf(m.Header))
					if err != nil {
						return false, fmt.Errorf("wait for task %s: %w", id, err)
					}
					fn(c.checkOutcome(out, found))
				}
			} else if ev, ok := wire.ParseEvent(m.Data); ok && ev.Gen == gen && ev.Kind == EventSolved {
				solved[id] = ev
			}
		}
		// Caught up: a solved task whose outcome is not there any more
		// had its token expire before anyone read it.
		if m.Pending == 0 {
			for id, ev := range solved {
				if c.tokenGone(ev) {
					delete(want, id)
					delete(solved, id)
					fn(c.checkOutcome(expiredOutcome(id, ev), false))
				}
			}
		}
		return len(want) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("wait for %d tasks: %w", len(want), err)
	}
	return nil
}

// tokenGone reports whether the token of a solve has expired: an outcome
// not stored by then is no use any more, so a waiter need not wait for it.
func (c *Client) tokenGone(ev Event) bool {
	return !c.cfg.Now().Before(ev.ExpiresAt)
}

// expiredOutcome is the outcome of a solve whose token has left the stream,
// rebuilt from its event.
func expiredOutcome(id string, ev Event) Outcome {
	return Outcome{ID: id, Status: StatusSolved, Attempts: ev.Attempts, SolveSeconds: ev.Seconds,
		ExpiresAt: ev.ExpiresAt, CaptchaID: ev.CaptchaID, SolvedAt: ev.At, Method: ev.Method}
}
