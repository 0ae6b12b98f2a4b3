package stream

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/stream/internal/topology"
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
// headers, never with a consumer. nats-server cannot change a
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
	// DefaultTokenMaxBytes is the default Topology.TokenMaxBytes: 64 MiB,
	// about 16,000 tokens of 4 KiB (a reCAPTCHA token and its outcome take
	// 2–3 KiB), which at a 300-s lifetime is 50 solves a second sustained,
	// far beyond any plan (100 threads at one solve each 10 s is 10 a
	// second).
	DefaultTokenMaxBytes = topology.DefaultTokenMaxBytes
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

// spec is t with its defaults, as the broker objects are made from it
// (package topology).
func (t Topology) spec() topology.Spec {
	t = t.withDefaults()
	return topology.Spec{Stream: t.Stream, Replicas: t.Replicas, Retention: t.Retention, MaxBytes: t.MaxBytes,
		TokenMaxBytes: t.TokenMaxBytes, DuplicateWindow: t.DuplicateWindow, AckWait: t.AckWait, LaneLimits: t.LaneLimits,
		MaxInFlight: t.MaxInFlight, Memory: t.Memory, Domain: t.Domain}
}

// TokenStream is the name of the stream that keeps solved tokens (in
// memory): the topology's stream name with "_TOKENS" ("CAPTCHA_TOKENS").
func (t Topology) TokenStream() string { return topology.TokenStreamName(t.withDefaults().Stream) }

// atLeastZero is the error of a field of scope's configuration that must
// not be negative (zero takes its default, dflt); nil when it is not.
func atLeastZero[T ~int | ~int64](scope, field string, v T, dflt any) error {
	if v >= 0 {
		return nil
	}
	return fmt.Errorf("%s: %s %v: want 0 (default %v) or more", scope, field, v, dflt)
}

// jetStreamOf is the JetStream handle of nc in t's domain, once t is
// known to be valid: every entry point takes the connection and finds the
// domain in the topology, so that one value says where the queue is.
func jetStreamOf(nc *nats.Conn, t Topology, opts ...jetstream.JetStreamOpt) (jetstream.JetStream, error) {
	if err := t.validate(); err != nil {
		return nil, err
	}
	js, err := topology.JetStream(nc, t.Domain, opts...)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	return js, nil
}
