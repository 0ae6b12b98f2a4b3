// Where a solved task's token lives: in the token stream
// (Topology.TokenStream, memory-backed), on captcha.tokens.<id>.<gen>, as
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

package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/captchaq/captchaq/stream/internal/jscall"
	"github.com/captchaq/captchaq/stream/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// storeToken stores out, a solved outcome with its solution, in the token
// stream until it expires, unless the generation has a token already, and
// returns the generation's token: out, or the one stored before it. The
// write expects no earlier message on the subject (compare-and-set): a
// generation's token is written once, so a late write (a second solve of
// the same generation) never replaces the token its outcome names; the
// outcome is then stored from the token the stream holds.
func (d *delivery) storeToken(ctx context.Context, out Outcome) (Outcome, error) {
	b, err := json.Marshal(out)
	if err != nil {
		return Outcome{}, fmt.Errorf("encode token: %w", err)
	}
	msg := nats.NewMsg(wire.TokenSubject(d.id, d.gen))
	msg.Data = b
	msg.Header.Set(wire.HeaderTaskID, d.id)
	msg.Header.Set(wire.HeaderGen, strconv.FormatUint(d.gen, 10))
	_, err = jscall.PublishRetrying(ctx, d.w.js, msg, jetstream.WithExpectStream(d.w.top.TokenStream()),
		jetstream.WithExpectLastSequencePerSubject(0),
		jetstream.WithMsgTTL(tokenTTL(out.ExpiresAt, d.w.brokerTime(d.w.cfg.Now()))))
	if err == nil {
		return out, nil
	}
	if errors.Is(err, jetstream.ErrStreamMessageExceedsMaximum) {
		return Outcome{}, fmt.Errorf("store the token of task %s: %w: the answer is %d bytes, the token stream takes at most %d", d.id, errTokenTooLarge, len(b), TokenMaxMsgSize)
	}
	if !jscall.WrongLastSequence(err) {
		return Outcome{}, fmt.Errorf("store the token of task %s: %w", d.id, err)
	}
	// There already: ours, whose acknowledgement was lost, or an earlier
	// solve's.
	var (
		stored Outcome
		found  bool
	)
	err = d.patiently(ctx, func() (err error) { stored, found, err = readToken(ctx, d.w.tokens, d.id, d.gen); return err })
	switch {
	case err != nil:
		return Outcome{}, err
	case !found:
		return Outcome{}, fmt.Errorf("store the token of task %s: the stream holds one, then none (expired meanwhile)", d.id)
	}
	if stored.CaptchaID != out.CaptchaID || !stored.SolvedAt.Equal(out.SolvedAt) {
		d.log.Warn("the generation has a token from an earlier solve already: its outcome is that one's")
	}
	return stored, nil
}

// readToken reads the token of generation gen of task id from the token
// stream tokens: the solved outcome with its solution, and whether it is
// there (it is not once expired, or after a broker restart).
func readToken(ctx context.Context, tokens jetstream.Stream, id string, gen uint64) (Outcome, bool, error) {
	m, err := tokens.GetLastMsgForSubject(ctx, wire.TokenSubject(id, gen))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Outcome{}, false, nil
	}
	if err != nil {
		return Outcome{}, false, fmt.Errorf("read the token of task %s: %w", id, err)
	}
	var out Outcome
	if err := json.Unmarshal(m.Data, &out); err != nil {
		return Outcome{}, false, fmt.Errorf("token of task %s: %w", id, err)
	}
	return out, true, nil
}

// withoutToken is out as the CAPTCHA stream keeps it: no solution.
func withoutToken(out Outcome) Outcome {
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
		out   Outcome
		found bool
	)
	err := d.patiently(ctx, func() (err error) { out, found, err = readToken(ctx, d.w.tokens, d.id, d.gen); return err })
	if err != nil {
		d.log.Warn("cannot read the token stream; solving the task again", slog.Any("error", err))
		return false
	}
	if !found || !d.w.brokerTime(d.w.cfg.Now()).Before(out.ExpiresAt) {
		return false
	}
	if d.finishWith(ctx, withoutToken(out)) {
		d.log.Info("solved by an earlier delivery whose worker stopped; recorded from its token", slog.Int("attempts", out.Attempts))
	}
	return true
}

// tokenTTL is the TTL of a token that expires at expires: whole seconds
// (what JetStream takes), rounded up, at least one.
func tokenTTL(expires, now time.Time) time.Duration {
	return max((expires.Sub(now) + time.Second - 1).Truncate(time.Second), time.Second)
}

// tokenStreamConfig is the configuration of the token stream (TokenStream):
// solved tokens, each stored by the worker that solved it with its
// lifetime as its TTL. In memory: a token never reaches the store's files,
// so it needs no erasure when it expires (nats-server erases a message by
// rewriting its whole block file). A broker restart within a token's
// lifetime loses it; the outcome and the solved event stay (file-backed),
// so a waiter learns the task was solved and its token is gone
// (ErrTokenExpired). On a cluster the stream has the topology's replicas,
// so losing one server loses no token.
func (t Topology) tokenStreamConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        t.TokenStream(),
		Description: "captchaq: solved tokens, in memory, each until its expiry",
		Subjects:    []string{wire.SubjectTokens + ".*.*"},
		Retention:   jetstream.LimitsPolicy,
		// A backstop only: every token has its own TTL.
		MaxAge: tokenStreamMaxAge,
		// Only workers write here, at most one token per solve, and each
		// leaves with its lifetime; the limits bound the memory anyway. At
		// MaxBytes the oldest tokens (nearest their expiry) give way, so a
		// solve is never refused for room.
		MaxBytes:          t.tokenMaxBytes(),
		MaxMsgs:           -1,
		MaxMsgsPerSubject: -1,
		MaxMsgSize:        TokenMaxMsgSize,
		MaxConsumers:      -1,
		Discard:           jetstream.DiscardOld,
		Storage:           jetstream.MemoryStorage,
		Replicas:          t.Replicas,
		Duplicates:        DefaultDuplicateWindow,
		AllowMsgTTL:       true,
		// Reads go to the stream's leader: on a cluster a direct get may be
		// answered by a replica that has not stored the token yet, and a
		// waiter would take a token stored just before the outcome for lost.
		AllowDirect: false,
	}
}

// Token stream limits.
const (
	// DefaultTokenMaxBytes is the default Topology.TokenMaxBytes: 64 MiB,
	// about 16,000 tokens of 4 KiB (a reCAPTCHA token and its outcome take
	// 2–3 KiB), which at a 300-s lifetime is 50 solves a second sustained,
	// far beyond any plan (100 threads at one solve each 10 s is 10 a
	// second).
	DefaultTokenMaxBytes = 64 << 20
	// TokenMaxMsgSize is the largest token (the outcome with its solution
	// and headers) the token stream keeps: 64 KiB, tens of times a
	// reCAPTCHA token, a cf_clearance cookie with its user agent, or an
	// image's text answer.
	TokenMaxMsgSize = 64 << 10
)

func (t Topology) tokenMaxBytes() int64 {
	if t.TokenMaxBytes > 0 {
		return t.TokenMaxBytes
	}
	return DefaultTokenMaxBytes
}

// tokenStreamMaxAge is the token stream's MaxAge: past the longest token
// lifetime captchaq knows.
const tokenStreamMaxAge = 15 * time.Minute

// TokenStream is the name of the stream that keeps solved tokens (in
// memory): the topology's stream name with "_TOKENS" ("CAPTCHA_TOKENS").
func (t Topology) TokenStream() string { return t.withDefaults().Stream + "_TOKENS" }
