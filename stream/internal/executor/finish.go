// Where a task's outcome is written: the records that end a generation (the
// solve and its outcome, or the verdict, the dead letter and the outcome),
// then the completer's ack and erasure of the task message.

package executor

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/captchaq/captchaq/internal/text"
	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream/internal/jscall"
	"github.com/captchaq/captchaq/stream/internal/taskstore"
	"github.com/captchaq/captchaq/stream/wire"
)

// finishSolved stores the token (token.go), then the outcome without it,
// which is the record of the solve (compare-and-set like every record: one
// per generation), then acks.
func (d *delivery) finishSolved(ctx context.Context, ev wire.Event, ans solver.Answer, start, end time.Time) {
	life := d.x.TokenLifetimes[d.task.Method]
	if life <= 0 {
		life = 2 * time.Minute
	}
	// On the broker's clock, as SolvedAt and use_at: a producer compares
	// them with its own, and the two machines' clocks need not agree with
	// the worker's.
	ev.Kind, ev.CaptchaID, ev.Provider, ev.ExpiresAt = wire.EventSolved, ans.CaptchaID, ans.Provider, d.x.Clock.BrokerTime(end).Add(life)
	out := wire.Outcome{ID: d.id, Status: wire.StatusSolved, Solution: ans.Solution, UserAgent: ans.UserAgent,
		Attempts: ev.Attempts, SolveSeconds: roundSeconds(end.Sub(start)), ExpiresAt: ev.ExpiresAt,
		Method: d.task.Method, CaptchaID: ans.CaptchaID, SolvedAt: d.x.Clock.BrokerTime(end),
		Provider: ans.Provider, Cost: ans.Cost, CostBasis: ans.CostBasis}
	if !d.useAt.IsZero() {
		out.UseAt, out.LifetimeAtUseS = d.useAt, roundSeconds(out.ExpiresAt.Sub(d.useAt))
	}
	// Paid for: a broker out of reach (a restart) is waited for while the
	// token lives, the task held meanwhile, so that its heartbeats name it
	// and no redelivery pays again.
	tctx, cancel := context.WithTimeout(ctx, out.ExpiresAt.Sub(d.x.Clock.BrokerTime(d.x.Now())))
	stored := out
	attemptSeq := d.attemptSeq // the attempt's event (an accepted event may follow it)
	var tok taskstore.StoredToken
	err := d.untilStored(tctx, func() (err error) { tok, err = d.storeToken(tctx, stored, attemptSeq); return err })
	cancel()
	out = tok.Out
	switch {
	case errors.Is(err, taskstore.ErrTokenTooLarge):
		// Paid for, and no answer can be kept: the outcome says so,
		// rather than a redelivery solving (and paying) again.
		d.deadLetter(ctx, ev, verdict{reason: retry.ReasonPermanent, code: wire.CodeTokenTooLarge, detail: err.Error()})
		return
	case err != nil && ctx.Err() == nil && tctx.Err() != nil:
		// The token's lifetime ran out first: the outcome records the
		// solve, its token expired.
		d.log.Warn("the broker took no token within its lifetime: the solve is recorded without it", slog.Any("error", err))
		out, tok = stored, taskstore.StoredToken{}
	case err != nil:
		d.log.Warn("cannot store the token; the task comes back after the ack wait", slog.Any("error", err))
		return
	}
	if !d.finishWith(ctx, withoutToken(out), tok.Seq) {
		return
	}
	d.observe(ev)
	d.log.Info("solved", slog.Int("attempts", ev.Attempts), slog.Float64("seconds", out.SolveSeconds))
}

// finishWith stores out as the generation's outcome, naming its token at
// tokenSeq in the token stream (0: none), and acks, and reports whether it
// did. When another delivery finished the generation meanwhile, it acks;
// when another holds it, it leaves the task to that one.
func (d *delivery) finishWith(ctx context.Context, out wire.Outcome, tokenSeq uint64) bool {
	err := d.untilStored(ctx, func() error { _, err := d.storeOutcome(ctx, out, tokenSeq); return err })
	switch {
	case errors.Is(err, errStateMoved) && d.st.Outcome:
		d.done()
		return false
	case errors.Is(err, errStateMoved):
		d.log.Warn("another worker took the task over; dropping this delivery")
		return false
	case err != nil:
		d.cannotStore("the outcome", err)
		return false
	}
	d.done()
	return true
}

// untilStored runs write until the broker takes it, ctx ends, or it fails
// for a reason waiting does not lift (passing), renewing the task's lease
// between tries: a broker briefly out of reach does not lose what the
// service answered.
func (d *delivery) untilStored(ctx context.Context, write func() error) error {
	return jscall.UntilStored(ctx, func() { _ = d.m.InProgress() }, write)
}

// finishExpired stores the outcome of a solve recorded by a solved event
// (records of workers from before the outcome became the solve's record)
// whose worker stopped before storing the outcome, once the token is dead:
// solved, no solution, expired. So a waiter following the wire contract
// learns the end of the generation instead of waiting for an outcome that
// never comes.
func (d *delivery) finishExpired(ctx context.Context) {
	last := d.st.Last
	out := wire.Outcome{ID: d.id, Status: wire.StatusSolved, Attempts: last.Attempts, SolveSeconds: last.Seconds,
		ExpiresAt: last.ExpiresAt, Method: last.Method, CaptchaID: last.CaptchaID, SolvedAt: last.At}
	if _, err := d.storeOutcome(ctx, out, 0); err != nil {
		d.log.Warn("cannot store the outcome; the task comes back after the ack wait", slog.Any("error", err))
		return
	}
	d.done()
	d.log.Warn("solved, but the token expired before its outcome was stored", slog.Time("expired", last.ExpiresAt))
}

// done finishes the delivery once its outcome is stored, or it moved (the
// Completer): acks and erases the delivered message, which for a moved
// copy is not its generation's first.
func (d *delivery) done() {
	d.x.Completer.Complete(d.m, d.seq, d.log)
}

func roundSeconds(d time.Duration) float64 {
	return float64(d.Round(time.Millisecond)) / float64(time.Second)
}

// storeOutcome stores out as the outcome of the delivery's generation,
// naming its token at tokenSeq in the token stream (wire.HeaderTokenSeq;
// 0: none), unless it is stored already, and returns its sequence (0 when
// it was there).
func (d *delivery) storeOutcome(ctx context.Context, out wire.Outcome, tokenSeq uint64) (uint64, error) {
	if d.st.Outcome {
		return 0, nil
	}
	b, err := json.Marshal(out)
	if err != nil {
		return 0, err
	}
	msg := nats.NewMsg(wire.ResultSubject(d.id))
	msg.Data = b
	msg.Header.Set(wire.HeaderTaskID, d.id)
	msg.Header.Set(wire.HeaderGen, strconv.FormatUint(d.gen, 10))
	if tokenSeq != 0 {
		msg.Header.Set(wire.HeaderTokenSeq, strconv.FormatUint(tokenSeq, 10))
	}
	var seq uint64
	err = d.store(ctx, record{msg: msg,
		apply: func(st *taskstore.GenState, s uint64) { st.Outcome, seq = true, s },
		in:    func(st taskstore.GenState) bool { return st.Outcome },
	})
	return seq, err
}

// deadLetter records the verdict v on ev, then moves the task to the dead
// letter.
func (d *delivery) deadLetter(ctx context.Context, ev wire.Event, v verdict) {
	now := d.x.Now()
	ev.Kind, ev.Reason, ev.At, ev.LastCode = wire.EventDead, string(v.reason), now, cmp.Or(v.code, ev.LastCode)
	ev.FirstFailure, ev.LastFailure = firstSet(ev.FirstFailure, now), firstSet(ev.LastFailure, now)
	ev.Code, ev.Detail = ev.LastCode, safeDetail(v.detail)
	if !d.record(ctx, ev) {
		return
	}
	d.finishDead(ctx, v.reason, ev.LastCode)
}

// finishDead stores the dead letter and the outcome, each unless the
// generation's state shows it stored, then acks. It runs again, harmlessly,
// if a worker died half-way.
//
// A task message too large to be dead-lettered whole (the stream took it
// before it had its MaxMsgSize, or its server's max_payload is smaller) is
// dead-lettered without its body and its producer's headers; the letter
// says how many bytes it leaves out (wire.HeaderBodyOmitted, Detail).
func (d *delivery) finishDead(ctx context.Context, reason retry.Reason, code string) {
	ev := d.st.Last
	detail := ev.Detail
	if !d.st.DeadLetter {
		err := d.storeDeadLetter(ctx, d.deadLetterMsg(reason, code, detail, true))
		if jscall.TooLarge(err) {
			detail = joinDetail(detail, fmt.Sprintf("the task (%d bytes) is left out of its dead letter: too large to keep whole", len(d.m.Data())))
			err = d.storeDeadLetter(ctx, d.deadLetterMsg(reason, code, detail, false))
		}
		if err != nil {
			d.cannotStore("the dead letter", err)
			return
		}
	}
	out := wire.Outcome{ID: d.id, Status: wire.StatusDead, Error: code, Reason: string(reason), Attempts: ev.Attempts,
		Method: d.task.Method, Detail: detail}
	if _, err := d.storeOutcome(ctx, out, 0); err != nil {
		d.cannotStore("the outcome", err)
		return
	}
	d.done()
	if d.forged {
		d.observeForged()
	}
	d.log.Warn("dead-lettered", slog.String("reason", string(reason)), slog.String("code", code), slog.Int("attempts", ev.Attempts))
}

// deadLetterMsg is the dead letter of the delivery: with whole, the task
// message's body and its producer's headers; without, neither, and the
// size of the body left out.
func (d *delivery) deadLetterMsg(reason retry.Reason, code, detail string, whole bool) *nats.Msg {
	ev := d.st.Last
	dl := nats.NewMsg(wire.DeadSubject(d.id))
	if whole {
		dl.Data = d.m.Data()
		copyProducerHeaders(dl.Header, d.m.Headers())
		if d.forged {
			// Not a submission of its id: its cancel hash is whoever
			// forged it's, and a replay of this letter (the id's latest)
			// would hand that producer the cancel of the task. The
			// replay's cancel is the admin's.
			dl.Header.Del(wire.HeaderCancelHash)
		}
	} else {
		dl.Header.Set(wire.HeaderBodyOmitted, strconv.Itoa(len(d.m.Data())))
	}
	dl.Header.Set(wire.HeaderTaskID, d.id)
	dl.Header.Set(wire.HeaderGen, strconv.FormatUint(d.gen, 10))
	dl.Header.Set(wire.HeaderAttempts, strconv.Itoa(ev.Attempts))
	dl.Header.Set(wire.HeaderError, text.Cut(code, 100))
	if detail != "" {
		dl.Header.Set(wire.HeaderDetail, text.Cut(detail, wire.MaxDeadLetterDetail))
	}
	dl.Header.Set(wire.HeaderReason, string(reason))
	dl.Header.Set(wire.HeaderSubject, wire.TaskSubjectOf(d.m.Subject()))
	dl.Header.Set(wire.HeaderFirstFail, ev.FirstFailure.UTC().Format(time.RFC3339Nano))
	dl.Header.Set(wire.HeaderLastFail, ev.LastFailure.UTC().Format(time.RFC3339Nano))
	return dl
}

func (d *delivery) storeDeadLetter(ctx context.Context, dl *nats.Msg) error {
	return d.store(ctx, record{msg: dl,
		apply: func(st *taskstore.GenState, _ uint64) { st.DeadLetter = true },
		in:    func(st taskstore.GenState) bool { return st.DeadLetter },
	})
}

// joinDetail appends more to detail.
func joinDetail(detail, more string) string {
	if detail == "" {
		return more
	}
	return detail + "; " + more
}

// cannotStore handles a record of the end of a generation that could not
// be stored. A write the stream refuses for good (too large) ends the
// delivery with Term: the message is never delivered again, so it cannot
// hold a thread or a lane's slot forever; it says so at ERROR. A forged
// copy that lost a race ends without the record (forgedContended). Anything
// else (the broker unreachable, the stream full) brings the task back after
// the ack wait.
func (d *delivery) cannotStore(what string, err error) {
	if errors.Is(err, errContended) && d.forged {
		d.forgedContended()
		return
	}
	if jscall.TooLarge(err) {
		d.log.Error("the stream refuses "+what+" of this task for its size: the task ends here without it, "+
			"and is not delivered again", slog.Any("error", err))
		_ = d.m.TermWithReason("captchaq: " + what + " is too large to store")
		return
	}
	d.log.Warn("cannot store "+what+"; the task comes back after the ack wait", slog.Any("error", err))
}

// copyProducerHeaders copies a task message's headers onto its dead letter,
// less the reserved ones: JetStream's (Nats-*: a producer's
// Nats-Expected-Last-Sequence would make the dead letter unstorable) and
// those captchaq's workers and replays set (Captchaq-*), which a producer
// must not be able to forge on a record of the workers. What the producer
// says of its own task stays: its name (Captchaq-Client), its cancel hash
// (Captchaq-Cancel-Hash: a replay of the letter carries it, so the owner
// who holds the secret, and no one else, can still cancel the task), and
// any header of its own.
func copyProducerHeaders(dst, src nats.Header) {
	for k, v := range src {
		ck := http.CanonicalHeaderKey(k)
		if strings.HasPrefix(ck, "Nats-") || (strings.HasPrefix(ck, "Captchaq-") && !producersOwn(ck)) {
			continue
		}
		dst[k] = v
	}
}

// producersOwn reports whether reserved header ck (canonical) is the
// producer's claim about its own task, which its dead letter keeps.
func producersOwn(ck string) bool {
	return ck == wire.HeaderClient || ck == wire.HeaderCancelHash
}

var urlInText = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s"'<>()\[\]{}]*`)

// safeDetail is a dead letter's detail as outcomes and the audit trail may
// carry it: at most 300 bytes, any URL in it replaced by its host.
func safeDetail(s string) string {
	s = urlInText.ReplaceAllStringFunc(s, func(u string) string {
		if h := wire.PageHost(wire.Params{"pageurl": u}); h != "" && h != "invalid-url" {
			return "<url on " + h + ">"
		}
		return "<url>"
	})
	return text.Cut(s, 300)
}

// failureText says more about a failed attempt's code for the dead letter:
// the service's error_text beside its code, or for captchaq's own codes
// (NETWORK, BAD_REPLY, …) what failed. The solver's errors never hold the
// API key; the text is cut to fit an event.
func failureText(err error) string {
	var e *solver.Error
	if !errors.As(err, &e) {
		if err == nil {
			return ""
		}
		return text.Cut(err.Error(), 300)
	}
	switch {
	case e.Text != "":
		return text.Cut(e.Text, 300)
	case e.Err != nil:
		return text.Cut(e.Err.Error(), 300)
	}
	return ""
}
