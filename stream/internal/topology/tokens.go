// The token stream: where solved tokens live (memory-backed), one per
// solved generation on captcha.tokens.<id>.<gen>, for the token's lifetime.

package topology

import (
	"cmp"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/stream/wire"
)

// TokenStreamConfig is the configuration of t's token stream:
// solved tokens, each stored by the worker that solved it with its
// lifetime as its TTL. In memory: a token never reaches the store's files,
// so it needs no erasure when it expires (nats-server erases a message by
// rewriting its whole block file). A broker restart within a token's
// lifetime loses it; the outcome and the solved event stay (file-backed),
// so a waiter learns the task was solved and its token is gone
// (ErrTokenExpired). On a cluster the stream has the topology's replicas,
// so losing one server loses no token.
func TokenStreamConfig(t Spec) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        TokenStreamName(t.Stream),
		Description: "captchaq: solved tokens, in memory, each until its expiry",
		Subjects:    []string{wire.SubjectTokens + ".*.*"},
		Retention:   jetstream.LimitsPolicy,
		// A backstop only: every token has its own TTL.
		MaxAge: tokenStreamMaxAge,
		// Only workers write here, at most one token per solve, and each
		// leaves with its lifetime; the limits bound the memory anyway. At
		// MaxBytes the oldest tokens (nearest their expiry) give way, so a
		// solve is never refused for room.
		MaxBytes:          cmp.Or(t.TokenMaxBytes, DefaultTokenMaxBytes),
		MaxMsgs:           -1,
		MaxMsgsPerSubject: -1,
		MaxMsgSize:        wire.TokenMaxMsgSize,
		MaxConsumers:      -1,
		Discard:           jetstream.DiscardOld,
		Storage:           jetstream.MemoryStorage,
		Replicas:          t.Replicas,
		Duplicates:        tokenDuplicateWindow,
		AllowMsgTTL:       true,
		// Reads go to the stream's leader: on a cluster a direct get may be
		// answered by a replica that has not stored the token yet, and a
		// waiter would take a token stored just before the outcome for lost.
		AllowDirect: false,
	}
}

// DefaultTokenMaxBytes is the token stream's MaxBytes when the topology
// sets none (stream.DefaultTokenMaxBytes says why).
const DefaultTokenMaxBytes = 64 << 20

// tokenStreamMaxAge is the token stream's MaxAge: past the longest token
// lifetime captchaq knows.
const tokenStreamMaxAge = 15 * time.Minute

// TokenStreamName is the name of the token stream of the stream named
// stream: its name with "_TOKENS" ("CAPTCHA_TOKENS").
func TokenStreamName(stream string) string { return stream + "_TOKENS" }

// tokenDuplicateWindow is the token stream's duplicate window: the
// default of the CAPTCHA stream's (stream.DefaultDuplicateWindow).
const tokenDuplicateWindow = 2 * time.Minute
