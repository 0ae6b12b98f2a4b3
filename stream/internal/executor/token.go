// Where a solved task's token lives: in the token stream
// (memory-backed), on captcha.tokens.<id>.<gen>, as
// the whole outcome with its solution, for the token's lifetime (its TTL).
// The outcome on captcha.results.<id>, in the file-backed CAPTCHA stream, is
// the record of the solve: it carries everything but the solution, and
// stays for the audit.
//
// So no token is ever written to the store's files, and no token has to be
// erased when it expires. The token is stored before the solve is
// recorded: a worker that stops in between leaves it for the next
// delivery, which records the solve from it instead of paying the service
// again.

package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/captchaq/captchaq/stream/internal/taskstore"
	"github.com/captchaq/captchaq/stream/wire"
)

// storeToken stores out, a solved outcome with its solution and the solve
// of the attempt recorded at attemptSeq, in the token stream until it
// expires, unless the generation has a token of this pool already, and
// returns the generation's token with its sequence in the token stream
// (which the outcome names): out, or the one stored before it. The
// write expects no earlier message on the subject (compare-and-set): a
// generation's token is written once, so a late write (a second solve of
// the same generation) never replaces the token its outcome names; the
// outcome is then stored from the token the stream holds.
//
// A stored token counts as this pool's only when it names an attempt event
// of the generation (poolToken): anyone who can make the broker publish on
// a token subject (a direct get answered there, with accounts linked
// wrong) could otherwise hand the task's producer a token of its own. A
// foreign one is never adopted: this solve's token is written over it,
// expecting it as the subject's last message, so the write stays
// compare-and-set (a pool's second solve racing this one still loses to
// the first), and the outcome names this solve and its token's sequence,
// which is what a reader takes (wire.HeaderTokenSeq).
func (d *delivery) storeToken(ctx context.Context, out wire.Outcome, attemptSeq uint64) (taskstore.StoredToken, error) {
	b, err := json.Marshal(out)
	if err != nil {
		return taskstore.StoredToken{}, fmt.Errorf("encode token: %w", err)
	}
	msg := nats.NewMsg(wire.TokenSubject(d.id, d.gen))
	msg.Data = b
	msg.Header.Set(wire.HeaderTaskID, d.id)
	msg.Header.Set(wire.HeaderGen, strconv.FormatUint(d.gen, 10))
	msg.Header.Set(wire.HeaderAttemptSeq, strconv.FormatUint(attemptSeq, 10))
	var over uint64 // the foreign token written over, if any
	for range storeTries {
		seq, err := d.x.Store.PutToken(ctx, d.id, d.gen, msg, tokenTTL(out.ExpiresAt, d.x.Clock.BrokerTime(d.x.Now())), over)
		if err == nil {
			return taskstore.StoredToken{Out: out, Seq: seq, Attempt: attemptSeq}, nil
		}
		if errors.Is(err, taskstore.ErrTokenTooLarge) {
			return taskstore.StoredToken{}, fmt.Errorf("store the token of task %s: %w: the answer is %d bytes, the token stream takes at most %d", d.id, taskstore.ErrTokenTooLarge, len(b), wire.TokenMaxMsgSize)
		}
		if !errors.Is(err, taskstore.ErrTokenTaken) {
			return taskstore.StoredToken{}, fmt.Errorf("store the token of task %s: %w", d.id, err)
		}
		// There already: ours, whose acknowledgement was lost, an earlier
		// solve's of this pool, or a foreign one.
		var (
			stored taskstore.StoredToken
			found  bool
		)
		err = d.patiently(ctx, func() (err error) { stored, found, err = d.x.Store.Token(ctx, d.id, d.gen); return err })
		switch {
		case err != nil:
			return taskstore.StoredToken{}, err
		case !found:
			return taskstore.StoredToken{}, fmt.Errorf("store the token of task %s: the stream holds one, then none (expired meanwhile)", d.id)
		}
		if stored.Attempt == attemptSeq && stored.Out.CaptchaID == out.CaptchaID && stored.Out.SolvedAt.Equal(out.SolvedAt) {
			return stored, nil // ours
		}
		pool, err := d.poolToken(ctx, stored)
		if err != nil {
			return taskstore.StoredToken{}, err
		}
		if pool && stored.Attempt != attemptSeq {
			d.log.Warn("the generation has a token from an earlier solve already: its outcome is that one's")
			return stored, nil
		}
		// Naming no attempt of the generation, or this one's with another
		// solve: no worker of this pool stored it.
		d.log.Warn("a token no worker of this pool stored is on the task's token subject: storing this solve's own over it",
			slog.Uint64("token_seq", stored.Seq))
		over = stored.Seq
	}
	return taskstore.StoredToken{}, fmt.Errorf("store the token of task %s: other tokens kept getting in the way", d.id)
}

// poolToken reports whether tok was stored by a worker of this pool: it
// names an attempt event of the delivery's generation (the workers' own
// records, each written by compare-and-set) with as many attempts spent,
// and is a solve of the delivery's task.
func (d *delivery) poolToken(ctx context.Context, tok taskstore.StoredToken) (bool, error) {
	if tok.Attempt == 0 || tok.Attempt < d.gen || tok.Out.ID != d.id || tok.Out.Status != wire.StatusSolved {
		return false, nil
	}
	var (
		ev    wire.Event
		found bool
	)
	err := d.patiently(ctx, func() (err error) { ev, found, err = d.x.Store.AttemptAt(ctx, d.id, d.gen, tok.Attempt); return err })
	if err != nil {
		return false, fmt.Errorf("read the attempt the token of task %s names: %w", d.id, err)
	}
	return found && ev.Attempts == tok.Out.Attempts, nil
}

// withoutToken is out as the CAPTCHA stream keeps it: no solution.
func withoutToken(out wire.Outcome) wire.Outcome {
	out.Solution, out.UserAgent = nil, ""
	return out
}

// finishFromToken ends a generation whose solve an earlier delivery stored
// in the token stream but did not record (its worker stopped after the
// token): it stores the outcome and acks, without asking the service
// again. It reports whether it did; without a live token the delivery goes
// on to admission.
func (d *delivery) finishFromToken(ctx context.Context) bool {
	var (
		tok   taskstore.StoredToken
		found bool
	)
	err := d.patiently(ctx, func() (err error) { tok, found, err = d.x.Store.Token(ctx, d.id, d.gen); return err })
	if err != nil {
		d.log.Warn("cannot read the token stream; solving the task again", slog.Any("error", err))
		return false
	}
	out := tok.Out
	if !found || !d.x.Clock.BrokerTime(d.x.Now()).Before(out.ExpiresAt) {
		return false
	}
	switch pool, err := d.poolToken(ctx, tok); {
	case err != nil:
		d.log.Warn("cannot read the attempt the stored token names; solving the task again", slog.Any("error", err))
		return false
	case !pool:
		// Solved again; the new solve's token is stored over it (storeToken).
		d.log.Warn("a token no worker of this pool stored is on the task's token subject: not recording the solve from it",
			slog.Uint64("token_seq", tok.Seq))
		return false
	}
	if d.finishWith(ctx, withoutToken(out), tok.Seq) {
		d.log.Info("solved by an earlier delivery whose worker stopped; recorded from its token", slog.Int("attempts", out.Attempts))
	}
	return true
}

// tokenTTL is the TTL of a token that expires at expires: whole seconds
// (what JetStream takes), rounded up, at least one.
func tokenTTL(expires, now time.Time) time.Duration {
	return max((expires.Sub(now) + time.Second - 1).Truncate(time.Second), time.Second)
}
