package topology

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/stream/internal/jscall"
	"github.com/captchaq/captchaq/stream/wire"
)

// StreamConfig is the configuration of the CAPTCHA stream of t.
func StreamConfig(t Spec) jetstream.StreamConfig {
	storage := t.Storage()
	return jetstream.StreamConfig{
		Name:        t.Stream,
		Description: "captchaq: tasks, their life, outcomes and dead letters",
		Subjects:    wire.StreamSubjects(),
		Retention:   jetstream.WorkQueuePolicy,
		MaxAge:      t.Retention,
		MaxBytes:    orUnlimited(t.MaxBytes),
		MaxMsgs:     -1,
		// Unlimited, said explicitly: the server fills in -1 for what is not
		// set, and the configuration it reports must compare equal to this.
		MaxMsgsPerSubject: -1,
		// Every task message the stream takes fits its own dead letter.
		MaxMsgSize:   int32(wire.MaxTaskMessage(t.MaxPayload)),
		MaxConsumers: -1,
		// At MaxBytes refuse new messages (the producer gets a clear error)
		// rather than drop the oldest, which may be accepted, queued tasks.
		Discard:     jetstream.DiscardNew,
		Storage:     storage,
		Replicas:    t.Replicas,
		Duplicates:  t.DuplicateWindow,
		AllowMsgTTL: true, // tokens expire with their own lifetime
		AllowDirect: true, // reads without a consumer (read.go)
		// Every stored message's headers, for readers that follow (read.go):
		// a producer needs no consumer of its own.
		RePublish: RePublish(),
	}
}

// SameStreamConfig reports whether the stream's configuration, as the
// server reports it, is the one StreamConfig makes: every setting, so that an
// update still sets back what was changed by hand (a limit, a republish, a
// placement, metadata). Where the
// server refuses to (DenyDelete, DenyPurge, Sealed cannot be cleared), the
// update fails and says so, and `captchaq server`/`init` stop: a worker
// could not delete finished tasks on such a stream anyway. The server's own
// metadata (_nats.*) is not a setting.
func SameStreamConfig(have, want jetstream.StreamConfig) bool {
	have.Metadata, want.Metadata = userMetadata(have.Metadata), userMetadata(want.Metadata)
	return reflect.DeepEqual(have, want)
}

// userMetadata is md without the keys the server sets (_nats.*), nil when
// nothing is left.
func userMetadata(md map[string]string) map[string]string {
	var out map[string]string
	for k, v := range md {
		if strings.HasPrefix(k, "_nats.") {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[k] = v
	}
	return out
}

// RePublish is the CAPTCHA stream's RePublish: the headers of everything
// it stores, to captcha.stored.>, for readers that follow without a
// consumer.
func RePublish() *jetstream.RePublish {
	return &jetstream.RePublish{Source: wire.SubjectRoot + ".>", Destination: wire.SubjectStored + ".>", HeadersOnly: true}
}

func orUnlimited(n int64) int64 {
	if n <= 0 {
		return -1
	}
	return n
}

// EnsureStreams creates the CAPTCHA stream and its token stream if they
// do not exist, and returns both, without the workers' consumers. With
// update set it also brings existing streams' configurations to t. Two
// processes racing to create them both succeed. Only admins create
// (producers and workers find them: Open).
// Whoever creates or updates the stream also stores its anchor
// (wire.SubjectAnchor) unless it holds one, when it may publish on it.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, t Spec, update bool) (s, tokens jetstream.Stream, err error) {
	s, put, err := putStream(ctx, js, t, update)
	if err != nil {
		return nil, nil, err
	}
	if put != streamFound {
		TryStoreAnchor(ctx, js, t.Stream)
	}
	if tokens, _, err = putStreamConfig(ctx, js, TokenStreamConfig(t), update); err != nil {
		return nil, nil, err
	}
	return s, tokens, nil
}

// putOutcome is what putStream did.
type putOutcome int

const (
	streamFound   putOutcome = iota // it was there, and no update was asked for
	streamCreated                   // it created the stream
	streamUpdated                   // it was asked to update the stream: updated, or found as it should be
)

// putStream creates the stream if it does not exist and, with update,
// updates it if it does and its configuration differs.
func putStream(ctx context.Context, js jetstream.JetStream, t Spec, update bool) (s jetstream.Stream, put putOutcome, err error) {
	return putStreamConfig(ctx, js, StreamConfig(t), update)
}

// putStreamConfig creates the stream cfg names if it does not exist and,
// with update, updates it to cfg if it does and its configuration differs.
func putStreamConfig(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig, update bool) (s jetstream.Stream, put putOutcome, err error) {
	for range 3 {
		s, err = LookupStream(ctx, js, cfg.Name)
		if err == nil {
			// nats-server cannot change a retention to or from WorkQueue
			// in place: an update keeps the stream's.
			cfg.Retention = s.CachedInfo().Config.Retention
		}
		switch {
		case err == nil && !update:
			return s, streamFound, nil
		case err == nil && SameStreamConfig(s.CachedInfo().Config, cfg):
			// Nothing to change, so no update: besides sparing the write,
			// nats-server v2.15.3 races (a data race in its file store)
			// between a stream update and a consumer being created on it,
			// as racing `captchaq server`/`init` runs would do.
			return s, streamUpdated, nil
		case err == nil:
			s, err = js.UpdateStream(ctx, cfg)
			if err != nil {
				return nil, 0, fmt.Errorf("update stream %s: %w", cfg.Name, err)
			}
			return s, streamUpdated, nil
		case !errors.Is(err, jetstream.ErrStreamNotFound):
			return nil, 0, fmt.Errorf("look up stream %s: %w", cfg.Name, err)
		}
		s, err = js.CreateStream(ctx, cfg)
		if err == nil {
			return s, streamCreated, nil
		}
		if !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return nil, 0, fmt.Errorf("create stream %s: %w", cfg.Name, err)
		}
		// Someone else created it between our look-up and our create: look again.
	}
	return nil, 0, fmt.Errorf("create stream %s: lost the race three times", cfg.Name)
}

// LimitsRetentionAdvice says, for a stream with Limits retention (created
// by an earlier version), what it costs and how to move it to WorkQueue
// retention; "" for any other stream.
func LimitsRetentionAdvice(s jetstream.Stream) string {
	cfg := s.CachedInfo().Config
	if cfg.Retention != jetstream.LimitsPolicy {
		return ""
	}
	return fmt.Sprintf("stream %s has Limits retention (made by an earlier captchaq), which nats-server cannot change in place: "+
		"workers delete each finished task with a request of its own, slower than an ack that removes it (WorkQueue retention). "+
		"To move: stop producers, let workers drain the queue, note the outcomes and dead letters you still need, "+
		"then `nats stream rm %s` and start `captchaq server` again, which creates it with WorkQueue retention", cfg.Name, cfg.Name)
}

// LookupTimeout bounds one look-up of the stream or a consumer, and
// createTimeout one request to create or update a consumer.
const (
	LookupTimeout = time.Second
	createTimeout = 2 * time.Second
)

// LookupStream looks the stream up, asking again until it is answered.
func LookupStream(ctx context.Context, js jetstream.JetStream, name string) (jetstream.Stream, error) {
	return jscall.UntilAnswered(ctx, LookupTimeout, func(ctx context.Context) (jetstream.Stream, error) { return js.Stream(ctx, name) })
}

// Ensure creates (or, with update, updates) every object of topology t
// but the plan and the timings bucket: the stream, its token stream, the
// workers' consumers and the waiting room's, and the stream's anchor. It
// returns the stream and the token stream.
func Ensure(ctx context.Context, js jetstream.JetStream, t Spec, update bool) (s, tokens jetstream.Stream, err error) {
	if t.MaxPayload == 0 {
		t.MaxPayload = js.Conn().MaxPayload()
	}
	s, put, err := putStream(ctx, js, t, update)
	if err != nil {
		return nil, nil, err
	}
	if put == streamCreated {
		// At once, before producers fill the new stream.
		TryStoreAnchor(ctx, js, t.Stream)
	}
	if tokens, _, err = putStreamConfig(ctx, js, TokenStreamConfig(t), update); err != nil {
		return nil, nil, err
	}
	var cfgs []jetstream.ConsumerConfig
	for _, wc := range WorkerConsumers() {
		cfgs = append(cfgs, ConsumerConfig(t, wc))
	}
	// The waiting room's consumer, once the stream stores its subjects (an
	// update puts them there): before that, workers wait for a task's time
	// on its lane's consumer, as earlier versions did.
	if HasWaitingRoom(s.CachedInfo().Config.Subjects) {
		cfgs = append(cfgs, WaitingRoomConfig(t))
	}
	for _, cfg := range cfgs {
		if !update {
			_, err := jscall.UntilAnswered(ctx, LookupTimeout, func(ctx context.Context) (jetstream.Consumer, error) {
				return s.Consumer(ctx, cfg.Durable)
			})
			if err == nil {
				continue
			}
		}
		// CreateOrUpdate is idempotent for an identical config, so racing
		// processes all succeed, and a request left unanswered can be sent
		// again.
		_, err := jscall.UntilAnswered(ctx, createTimeout, func(ctx context.Context) (jetstream.Consumer, error) {
			return s.CreateOrUpdateConsumer(ctx, cfg)
		})
		if err != nil {
			return nil, nil, fmt.Errorf("create consumer %s: %w", cfg.Durable, err)
		}
	}
	// Put back (after a purge, a restart) once the consumers are done: a
	// role that may do neither (a producer running `captchaq init`) is then
	// refused for what init is for, not for the anchor.
	if put == streamUpdated {
		TryStoreAnchor(ctx, js, t.Stream)
	}
	return s, tokens, nil
}
