// Where a task's outcome is written: the records that end a generation (the
// solve and its outcome, or the verdict, the dead letter and the outcome),
// then the ack and the erasure of the task message.

package stream

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/nats-io/nats.go"
)

// finishSolved stores the token (token.go), then the outcome without it,
// which is the record of the solve (compare-and-set like every record: one
// per generation), then acks.
func (d *delivery) finishSolved(ctx context.Context, ev Event, ans solver.Answer, start, end time.Time) {
	life := d.w.cfg.TokenLifetimes[d.task.Method]
	if life <= 0 {
		life = 2 * time.Minute
	}
	// On the broker's clock: a producer compares it with its own, and the
	// two machines' clocks need not agree with the worker's.
	ev.Kind, ev.CaptchaID, ev.ExpiresAt = EventSolved, ans.CaptchaID, d.w.brokerTime(end).Add(life)
	out := Outcome{ID: d.id, Status: StatusSolved, Solution: ans.Solution, UserAgent: ans.UserAgent,
		Attempts: ev.Attempts, SolveSeconds: roundSeconds(end.Sub(start)), ExpiresAt: ev.ExpiresAt,
		Method: d.task.Method, CaptchaID: ans.CaptchaID, SolvedAt: end}
	if err := d.storeToken(ctx, out); err != nil {
		d.log.Warn("cannot store the token; the task comes back after the ack wait", slog.Any("error", err))
		return
	}
	if !d.finishWith(ctx, withoutToken(out)) {
		return
	}
	d.observe(ev)
	d.log.Info("solved", slog.Int("attempts", ev.Attempts), slog.Float64("seconds", out.SolveSeconds))
}

// finishWith stores out as the generation's outcome and acks, and reports
// whether it did. When another delivery finished the generation meanwhile,
// it acks; when another holds it, it leaves the task to that one.
func (d *delivery) finishWith(ctx context.Context, out Outcome) bool {
	_, err := d.storeOutcome(ctx, out)
	switch {
	case errors.Is(err, errStateMoved) && d.st.outcome:
		d.done()
		return false
	case errors.Is(err, errStateMoved):
		d.log.Warn("another worker took the task over; dropping this delivery")
		return false
	case err != nil:
		d.log.Warn("cannot store the outcome; the task comes back after the ack wait", slog.Any("error", err))
		return false
	}
	d.done()
	return true
}

// finishExpired stores the outcome of a solve recorded by a solved event
// (records of workers from before the outcome became the solve's record)
// whose worker stopped before storing the outcome, once the token is dead:
// solved, no solution, expired. So a waiter following the wire contract
// learns the end of the generation instead of waiting for an outcome that
// never comes.
func (d *delivery) finishExpired(ctx context.Context) {
	last := d.st.last
	out := Outcome{ID: d.id, Status: StatusSolved, Attempts: last.Attempts, SolveSeconds: last.Seconds,
		ExpiresAt: last.ExpiresAt, Method: last.Method, CaptchaID: last.CaptchaID, SolvedAt: last.At}
	if _, err := d.storeOutcome(ctx, out); err != nil {
		d.log.Warn("cannot store the outcome; the task comes back after the ack wait", slog.Any("error", err))
		return
	}
	d.done()
	d.log.Warn("solved, but the token expired before its outcome was stored", slog.Time("expired", last.ExpiresAt))
}

// done acks a task whose outcome is stored, then erases the task message:
// it holds the page URL, which may be personal data and is not needed any
// more (a dead letter keeps its own copy for replay; the event log keeps the
// host, the submitter and the times for the audit trail). Erased, not only
// deleted: a deleted message's bytes stay in the store's files until its
// block is compacted.
//
// The ack is not confirmed (a lost one brings the task back, and its state
// says it is done) and the erase runs in the background: neither holds up
// the thread.
func (d *delivery) done() {
	if err := d.m.Ack(); err != nil {
		d.log.Warn("ack", slog.Any("error", err))
		return
	}
	d.w.erase(d.gen, "the finished task message")
}

func roundSeconds(d time.Duration) float64 {
	return float64(d.Round(time.Millisecond)) / float64(time.Second)
}

// storeOutcome stores out as the outcome of the delivery's generation,
// unless it is stored already, and returns its sequence (0 when it was
// there).
func (d *delivery) storeOutcome(ctx context.Context, out Outcome) (uint64, error) {
	if d.st.outcome {
		return 0, nil
	}
	b, err := json.Marshal(out)
	if err != nil {
		return 0, err
	}
	msg := nats.NewMsg(resultSubject(d.id))
	msg.Data = b
	msg.Header.Set(HeaderTaskID, d.id)
	msg.Header.Set(HeaderGen, strconv.FormatUint(d.gen, 10))
	var seq uint64
	err = d.store(ctx, record{msg: msg,
		apply: func(st *genState, s uint64) { st.outcome, seq = true, s },
		in:    func(st genState) bool { return st.outcome },
	})
	return seq, err
}

// deadLetter records the verdict v on ev, then moves the task to the dead
// letter.
func (d *delivery) deadLetter(ctx context.Context, ev Event, v verdict) {
	now := d.w.cfg.Now()
	ev.Kind, ev.Reason, ev.At, ev.LastCode = EventDead, string(v.reason), now, cmp.Or(v.code, ev.LastCode)
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
func (d *delivery) finishDead(ctx context.Context, reason retry.Reason, code string) {
	ev := d.st.last
	if !d.st.deadLetter {
		dl := nats.NewMsg(deadSubject(d.id))
		dl.Data = d.m.Data()
		copyProducerHeaders(dl.Header, d.m.Headers())
		dl.Header.Set(HeaderTaskID, d.id)
		dl.Header.Set(HeaderGen, strconv.FormatUint(d.gen, 10))
		dl.Header.Set(HeaderAttempts, strconv.Itoa(ev.Attempts))
		dl.Header.Set(HeaderError, code)
		if ev.Detail != "" {
			dl.Header.Set(HeaderDetail, ev.Detail)
		}
		dl.Header.Set(HeaderReason, string(reason))
		dl.Header.Set(HeaderSubject, d.m.Subject())
		dl.Header.Set(HeaderFirstFail, ev.FirstFailure.UTC().Format(time.RFC3339Nano))
		dl.Header.Set(HeaderLastFail, ev.LastFailure.UTC().Format(time.RFC3339Nano))
		err := d.store(ctx, record{msg: dl,
			apply: func(st *genState, _ uint64) { st.deadLetter = true },
			in:    func(st genState) bool { return st.deadLetter },
		})
		if err != nil {
			d.log.Warn("cannot store the dead letter; the task comes back after the ack wait", slog.Any("error", err))
			return
		}
	}
	out := Outcome{ID: d.id, Status: StatusDead, Error: code, Reason: string(reason), Attempts: ev.Attempts,
		Method: d.task.Method, Detail: ev.Detail}
	if _, err := d.storeOutcome(ctx, out); err != nil {
		d.log.Warn("cannot store the outcome; the task comes back after the ack wait", slog.Any("error", err))
		return
	}
	d.done()
	d.log.Warn("dead-lettered", slog.String("reason", string(reason)), slog.String("code", code), slog.Int("attempts", ev.Attempts))
}

// copyProducerHeaders copies a task message's headers onto its dead letter,
// less the reserved ones: JetStream's (Nats-*: a producer's
// Nats-Expected-Last-Sequence would make the dead letter unstorable) and
// those captchaq's workers and replays set (Captchaq-*), which a producer
// must not be able to forge on a record of the workers. The producer's name
// (Captchaq-Client) and any header of its own stay.
func copyProducerHeaders(dst, src nats.Header) {
	for k, v := range src {
		ck := http.CanonicalHeaderKey(k)
		if strings.HasPrefix(ck, "Nats-") || (strings.HasPrefix(ck, "Captchaq-") && ck != HeaderClient) {
			continue
		}
		dst[k] = v
	}
}
