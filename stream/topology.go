package stream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/stream/internal/jscall"
	"github.com/captchaq/captchaq/stream/wire"
)

// Topology describes the CAPTCHA stream and the workers' consumers. The zero
// value is usable: every zero field takes the default written beside it.
//
// Retention is WorkQueue: the workers' ack of a finished task removes its
// message inside the server's ack path (no delete request per task), and
// with it the page URL. Every other record (events, outcomes, dead letters,
// replays, the anchor) matches no consumer's filter, so WorkQueue keeps it
// until the stream's limits, as Limits retention would: the stream is the
// audit trail for Retention. WorkQueue allows only the workers' consumers
// (explicit ack, deliver all, one per lane and priority, filters that do
// not overlap); every reader reads with direct gets and the republished
// headers (read.go), never with a consumer. nats-server cannot change a
// stream's retention in place, so a stream created with Limits retention by
// an earlier version keeps it: updates leave its retention as it is,
// workers then delete each finished task themselves, and each worker says
// in its log how to move to WorkQueue.
type Topology struct {
	// Stream is the stream's name. Default "CAPTCHA".
	Stream string
	// Replicas is the stream's replication factor (3 on a cluster). Default 1.
	Replicas int
	// Retention is how long tasks, outcomes without tokens and dead letters
	// stay (the stream's MaxAge). Default 24h. Tokens leave earlier, with
	// their own lifetime.
	Retention time.Duration
	// MaxBytes bounds the stream's size: once full, it refuses new tasks
	// (and outcomes) until Retention frees room, rather than drop accepted
	// ones. Default 0: bounded by Retention alone.
	MaxBytes int64
	// TokenMaxBytes bounds the memory the token stream (TokenStream) may
	// hold; at the bound the oldest tokens give way. Default
	// DefaultTokenMaxBytes.
	TokenMaxBytes int64
	// DuplicateWindow is how long a task id is remembered to drop a
	// re-published task: at most Retention. Default 2m, or Retention when
	// that is shorter.
	DuplicateWindow time.Duration
	// AckWait is how long a worker may stay silent before its task is handed
	// to another. Workers send a heartbeat every AckWait/3. Default 30s.
	AckWait time.Duration
	// LaneLimits caps how many normal-priority tasks of a lane are solved at
	// once across all workers (the consumer's MaxAckPending), so that a
	// backlog in one lane leaves threads to the others. High-priority tasks
	// are capped only by the plan. Default: no cap beyond MaxInFlight.
	LaneLimits map[Lane]int
	// MaxInFlight caps tasks handed out at once per consumer when no lane
	// limit is set. Default 10000.
	MaxInFlight int
	// Memory keeps the stream in memory instead of on disk (tests).
	Memory bool
	// Domain is the JetStream domain the stream lives in: the hub's, for a
	// client at a site linked to it as a leaf node. Default "": the
	// JetStream of the account this connection reaches.
	Domain string

	// maxPayload is the server's max_payload, which sets the stream's
	// MaxMsgSize (wire.MaxTaskMessage); ensureTopology reads it from the
	// connection.
	maxPayload int64
}

// Defaults of Topology's zero fields.
const (
	// DefaultStream is the default Topology.Stream.
	DefaultStream = "CAPTCHA"
	// DefaultRetention is the default Topology.Retention.
	DefaultRetention = 24 * time.Hour
	// DefaultDuplicateWindow is the default Topology.DuplicateWindow.
	DefaultDuplicateWindow = 2 * time.Minute
	// DefaultAckWait is the default Topology.AckWait.
	DefaultAckWait = 30 * time.Second
	// DefaultMaxInFlight is the default Topology.MaxInFlight.
	DefaultMaxInFlight = 10000
)

// validate reports the first field of t that is out of range, by name.
// Zero fields take their defaults (withDefaults); nothing else is replaced.
func (t Topology) validate() error {
	const scope = "topology"
	if err := cmp.Or(
		atLeastZero(scope, "Replicas", t.Replicas, 1),
		atLeastZero(scope, "Retention", t.Retention, DefaultRetention),
		atLeastZero(scope, "MaxBytes", t.MaxBytes, "none: Retention alone bounds the stream"),
		atLeastZero(scope, "TokenMaxBytes", t.TokenMaxBytes, DefaultTokenMaxBytes),
		atLeastZero(scope, "DuplicateWindow", t.DuplicateWindow, DefaultDuplicateWindow),
		atLeastZero(scope, "AckWait", t.AckWait, DefaultAckWait),
		atLeastZero(scope, "MaxInFlight", t.MaxInFlight, DefaultMaxInFlight),
	); err != nil {
		return err
	}
	if retention := cmp.Or(t.Retention, DefaultRetention); t.DuplicateWindow > retention {
		return fmt.Errorf("%s: DuplicateWindow %s: longer than the Retention %s (JetStream keeps no id longer than its messages)", scope, t.DuplicateWindow, retention)
	}
	for lane, n := range t.LaneLimits {
		if !slices.Contains(Lanes, lane) {
			return fmt.Errorf("%s: LaneLimits[%q]: no such lane, want one of %v", scope, lane, Lanes)
		}
		if err := atLeastZero(scope, fmt.Sprintf("LaneLimits[%q]", lane), n, "no lane limit"); err != nil {
			return err
		}
	}
	return nil
}

// withDefaults is t with its zero fields set to their defaults. A zero
// DuplicateWindow is the default or the Retention, whichever is shorter.
func (t Topology) withDefaults() Topology {
	if t.Stream == "" {
		t.Stream = DefaultStream
	}
	if t.Replicas == 0 {
		t.Replicas = 1
	}
	if t.Retention == 0 {
		t.Retention = DefaultRetention
	}
	if t.DuplicateWindow == 0 {
		t.DuplicateWindow = min(DefaultDuplicateWindow, t.Retention)
	}
	if t.AckWait == 0 {
		t.AckWait = DefaultAckWait
	}
	if t.MaxInFlight == 0 {
		t.MaxInFlight = DefaultMaxInFlight
	}
	return t
}

func (t Topology) streamConfig() jetstream.StreamConfig {
	storage := t.storage()
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
		MaxMsgSize:   int32(wire.MaxTaskMessage(t.maxPayload)),
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
		RePublish: rePublish(),
	}
}

// sameStreamConfig reports whether the stream's configuration, as the
// server reports it, is the one streamConfig makes: every setting, so that an
// update still sets back what was changed by hand (a limit, a republish, a
// placement, metadata). Where the
// server refuses to (DenyDelete, DenyPurge, Sealed cannot be cleared), the
// update fails and says so, and `captchaq server`/`init` stop: a worker
// could not delete finished tasks on such a stream anyway. The server's own
// metadata (_nats.*) is not a setting.
func sameStreamConfig(have, want jetstream.StreamConfig) bool {
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

func orUnlimited(n int64) int64 {
	if n <= 0 {
		return -1
	}
	return n
}

// ensureStream creates the CAPTCHA stream and its token stream if they do
// not exist, and returns both, without the workers' consumers. With update
// set it also brings existing streams' configurations to t. Two processes
// racing to create them both succeed. Only admins create (producers and
// workers find them: openTopology).
// Whoever creates or updates the stream also stores its anchor
// (wire.SubjectAnchor) unless it holds one, when it may publish on it.
func ensureStream(ctx context.Context, js jetstream.JetStream, t Topology, update bool) (s, tokens jetstream.Stream, err error) {
	t = t.withDefaults()
	s, put, err := putStream(ctx, js, t, update)
	if err != nil {
		return nil, nil, err
	}
	if put != streamFound {
		tryStoreAnchor(ctx, js, t.Stream)
	}
	if tokens, _, err = putStreamConfig(ctx, js, t.tokenStreamConfig(), update); err != nil {
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
func putStream(ctx context.Context, js jetstream.JetStream, t Topology, update bool) (s jetstream.Stream, put putOutcome, err error) {
	return putStreamConfig(ctx, js, t.streamConfig(), update)
}

// putStreamConfig creates the stream cfg names if it does not exist and,
// with update, updates it to cfg if it does and its configuration differs.
func putStreamConfig(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig, update bool) (s jetstream.Stream, put putOutcome, err error) {
	for range 3 {
		s, err = lookupStream(ctx, js, cfg.Name)
		if err == nil {
			// nats-server cannot change a retention to or from WorkQueue
			// in place: an update keeps the stream's.
			cfg.Retention = s.CachedInfo().Config.Retention
		}
		switch {
		case err == nil && !update:
			return s, streamFound, nil
		case err == nil && sameStreamConfig(s.CachedInfo().Config, cfg):
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

// limitsRetentionAdvice says, for a stream with Limits retention (created
// by an earlier version), what it costs and how to move it to WorkQueue
// retention; "" for any other stream.
func limitsRetentionAdvice(s jetstream.Stream) string {
	cfg := s.CachedInfo().Config
	if cfg.Retention != jetstream.LimitsPolicy {
		return ""
	}
	return fmt.Sprintf("stream %s has Limits retention (made by an earlier captchaq), which nats-server cannot change in place: "+
		"workers delete each finished task with a request of its own, slower than an ack that removes it (WorkQueue retention). "+
		"To move: stop producers, let workers drain the queue, note the outcomes and dead letters you still need, "+
		"then `nats stream rm %s` and start `captchaq server` again, which creates it with WorkQueue retention", cfg.Name, cfg.Name)
}

// lookupTimeout bounds one look-up of the stream or a consumer, and
// createTimeout one request to create or update a consumer.
const (
	lookupTimeout = time.Second
	createTimeout = 2 * time.Second
)

// lookupStream looks the stream up, asking again until it is answered.
func lookupStream(ctx context.Context, js jetstream.JetStream, name string) (jetstream.Stream, error) {
	return jscall.UntilAnswered(ctx, lookupTimeout, func(ctx context.Context) (jetstream.Stream, error) { return js.Stream(ctx, name) })
}

// ensureTopology is Admin.EnsureTopology on js, returning the token stream
// too.
func ensureTopology(ctx context.Context, js jetstream.JetStream, t Topology, update bool) (s, tokens jetstream.Stream, err error) {
	t = t.withDefaults()
	if t.maxPayload == 0 {
		t.maxPayload = js.Conn().MaxPayload()
	}
	s, put, err := putStream(ctx, js, t, update)
	if err != nil {
		return nil, nil, err
	}
	if put == streamCreated {
		// At once, before producers fill the new stream.
		tryStoreAnchor(ctx, js, t.Stream)
	}
	if tokens, _, err = putStreamConfig(ctx, js, t.tokenStreamConfig(), update); err != nil {
		return nil, nil, err
	}
	var cfgs []jetstream.ConsumerConfig
	for _, wc := range workerConsumers() {
		cfgs = append(cfgs, t.consumerConfig(wc))
	}
	// The waiting room's consumer, once the stream stores its subjects (an
	// update puts them there): before that, workers wait for a task's time
	// on its lane's consumer, as earlier versions did.
	if hasWaitingRoom(s.CachedInfo().Config.Subjects) {
		cfgs = append(cfgs, t.waitingRoomConfig())
	}
	for _, cfg := range cfgs {
		if !update {
			_, err := jscall.UntilAnswered(ctx, lookupTimeout, func(ctx context.Context) (jetstream.Consumer, error) {
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
		tryStoreAnchor(ctx, js, t.Stream)
	}
	return s, tokens, nil
}

// atLeastZero is the error of a field of scope's configuration that must
// not be negative (zero takes its default, dflt); nil when it is not.
func atLeastZero[T ~int | ~int64](scope, field string, v T, dflt any) error {
	if v >= 0 {
		return nil
	}
	return fmt.Errorf("%s: %s %v: want 0 (default %v) or more", scope, field, v, dflt)
}
