// The token stream: where solved tokens live (memory-backed), one per
// solved generation on captcha.tokens.<id>.<gen>, for the token's lifetime.

package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/stream/wire"
)

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
		MaxMsgSize:        wire.TokenMaxMsgSize,
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
