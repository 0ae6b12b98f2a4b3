// Reading outcomes: those since a time (followed as they come), with when
// they were stored, and a solved outcome's token from the token stream.

package stream

import (
	"context"
	"fmt"
	"time"

	"github.com/captchaq/captchaq/stream/internal/taskstore"
)

// OutcomesSince calls fn with every outcome stored since since (zero: all
// the stream keeps), oldest first, each with its token while the token
// stream holds it; with follow it then waits for new ones until ctx ends.
func (c *Client) OutcomesSince(ctx context.Context, since time.Time, follow bool, fn func(Outcome)) error {
	return c.GenOutcomesSince(ctx, since, follow, func(o Outcome, _ uint64) { fn(o) })
}

// GenOutcomesSince is OutcomesSince with the generation each outcome ends
// (the task message sequence a Receipt's Seq names). Anyone who may submit
// can have an outcome stored under any id (a forged message ends
// INVALID_ENVELOPE there, and a task submitted again after the duplicate
// window ends there too): a reader that waits for one submission takes
// only the outcome of its generation, as Wait and Solve do.
func (c *Client) GenOutcomesSince(ctx context.Context, since time.Time, follow bool, fn func(Outcome, uint64)) error {
	return c.rd.Outcomes(ctx, since, follow, func(so taskstore.StoredOutcome) error {
		o, _, err := c.withToken(ctx, so.Outcome, so.Gen, so.TokenSeq)
		if err != nil {
			return err
		}
		fn(o, so.Gen)
		return nil
	})
}

// WaitReceipt blocks until the submission r names has an outcome and
// returns it, with Wait's errors: the outcome of that generation only,
// whatever else is published under its id before or after.
func (c *Client) WaitReceipt(ctx context.Context, r Receipt) (Outcome, error) {
	if err := ValidateID(r.ID); err != nil {
		return Outcome{}, err
	}
	if r.Seq == 0 {
		return Outcome{}, fmt.Errorf("wait for task %s: the receipt names no generation", r.ID)
	}
	return c.waitGen(ctx, r.ID, r.Seq)
}

// OutcomeRecord is an outcome with when it was stored, never with its
// token.
type OutcomeRecord struct {
	Outcome
	// At is when the outcome was stored: when the task ended.
	At time.Time `json:"at"`
	// Gen is the generation (task message sequence) it ends.
	Gen uint64 `json:"gen"`
}

// OutcomeRecords returns the outcomes stored since since (zero: all the
// stream keeps), oldest first, without their tokens.
func (c *Client) OutcomeRecords(ctx context.Context, since time.Time) ([]OutcomeRecord, error) {
	var out []OutcomeRecord
	err := c.rd.Outcomes(ctx, since, false, func(so taskstore.StoredOutcome) error {
		o := so.Outcome
		o.Solution, o.UserAgent = nil, ""
		out = append(out, OutcomeRecord{Outcome: o, At: so.Stored, Gen: so.Gen})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("outcomes: %w", err)
	}
	return out, nil
}

// withToken puts the token of generation gen back into out, a solved
// outcome as the CAPTCHA stream keeps it, from the token stream: the token
// at tokenSeq, which the outcome names (wire.HeaderTokenSeq), or for an
// outcome of an older worker that names none the last on the generation's
// token subject. It reports whether the token is there; it is not once
// expired or after a broker restart within its lifetime. An outcome stored
// by an older worker, solution included, is returned as it is.
//
// A token the outcome does not name is never handed out: one written on
// the token subject after the outcome's (by a second solve, or by anyone
// who made the broker publish there) is not read, and one whose solve
// differs from the outcome's is refused (sameSolve).
func (c *Client) withToken(ctx context.Context, out Outcome, gen, tokenSeq uint64) (Outcome, bool, error) {
	// expires_at is stored on the broker's clock: it is decided on there,
	// and handed out on the client's clock, so that a producer whose clock
	// is off neither throws away a fresh token nor keeps a stale one.
	stored := out
	out.ExpiresAt = c.localTime(out.ExpiresAt)
	if out.Status != StatusSolved || len(out.Solution) > 0 {
		return out, true, nil
	}
	if !c.brokerTime(c.cfg.Now()).Before(stored.ExpiresAt) {
		return out, false, nil
	}
	tok, found, err := c.rd.Token(ctx, out.ID, gen, tokenSeq)
	// A token stream emptied by a reopening of the store is filled again
	// by the store's guard (cmd/captchaq store_guard.go), each token at its
	// number: while the stream has not reached the number the outcome
	// names, the token may be on its way, and it is looked for again for
	// tokenRestoreGrace before it is called lost (a broker restart, which
	// restores nothing, is told a little later). Once the stream has
	// reached the number, the token is read once more: it may have been
	// stored again between the last read and that look (a reader under
	// load called a restored token lost: TestReadersWaitThroughAStoreReopen).
	for until := time.Now().Add(tokenRestoreGrace); err == nil && !found && tokenSeq != 0 && time.Now().Before(until); {
		if !c.rd.TokensBefore(ctx, tokenSeq) {
			tok, found, err = c.rd.Token(ctx, out.ID, gen, tokenSeq)
			break
		}
		select {
		case <-ctx.Done():
			return out, false, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		tok, found, err = c.rd.Token(ctx, out.ID, gen, tokenSeq)
	}
	if err != nil || !found {
		return out, false, err
	}
	if !sameSolve(tok, stored) {
		// Not the solve the outcome records (a token written after the
		// broker lost the outcome's, a restart within its lifetime): the
		// outcome's own token is gone.
		return out, false, nil
	}
	out.Solution, out.UserAgent = tok.Solution, tok.UserAgent
	return out, true, nil
}

// tokenRestoreGrace is how long a reader looks again for a token whose
// number the token stream has not reached (withToken).
const tokenRestoreGrace = 3 * time.Second

// sameSolve reports whether tok, a token, is the solve outcome records: a
// reader's token is always its outcome's.
func sameSolve(tok, out Outcome) bool {
	return tok.CaptchaID == out.CaptchaID && tok.SolvedAt.Equal(out.SolvedAt) && tok.Attempts == out.Attempts
}
