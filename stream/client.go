package stream

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/stream/internal/jscall"
	"github.com/captchaq/captchaq/stream/internal/room"
	"github.com/captchaq/captchaq/stream/internal/taskstore"
	"github.com/captchaq/captchaq/stream/internal/topology"
	"github.com/captchaq/captchaq/stream/wire"
)

// ClientConfig configures a producer Client. The zero value is usable.
type ClientConfig struct {
	// Topology must match the workers'. Only Stream, Retention and Domain
	// matter to a producer: a producer finds the stream an admin created
	// (Admin.EnsureTopology), and never creates or changes one.
	Topology Topology
	// DefaultDeadline is given to tasks submitted without one. Default 10m.
	DefaultDeadline time.Duration
	// Name identifies this producer in the audit trail (header
	// Captchaq-Client). Default: the NATS connection's name.
	Name string
	// Now is the clock of what the client stamps and decides on (see the
	// package documentation, "Clocks"). Default time.Now.
	Now func() time.Time
}

// validate reports the first field of cfg that is out of range, by name.
// Zero fields take their defaults (withDefaults); nothing else is replaced.
func (cfg ClientConfig) validate() error {
	return validateRole("client", cfg.DefaultDeadline, cfg.Topology)
}

// validateRole checks what the configurations of a Client and an Admin
// share: the deadline given to the tasks they queue, and the topology.
// scope names the role in the error.
func validateRole(scope string, deadline time.Duration, t Topology) error {
	if err := atLeastZero(scope, "DefaultDeadline", deadline, DefaultDeadline); err != nil {
		return err
	}
	if err := t.validate(); err != nil {
		return fmt.Errorf("%s: %w", scope, err)
	}
	return nil
}

// withDefaults is cfg with its zero fields set to their defaults; the
// default Name is nc's.
func (cfg ClientConfig) withDefaults(nc *nats.Conn) ClientConfig {
	if cfg.DefaultDeadline == 0 {
		cfg.DefaultDeadline = DefaultDeadline
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Name == "" {
		cfg.Name = nc.Opts.Name
	}
	return cfg
}

// DefaultDeadline is how long a task stays useful when it names no deadline.
const DefaultDeadline = 10 * time.Minute

// Client submits tasks and waits for their outcomes. It is safe for
// concurrent use.
type Client struct {
	nc *nats.Conn
	js jetstream.JetStream
	s  jetstream.Stream
	// tokens is the token stream (topology.TokenStreamConfig).
	tokens jetstream.Stream
	cfg    ClientConfig
	top    Topology
	// cancelKeys holds the cancel secret of each task Solve submitted, by
	// id, until its outcome arrives.
	cancelKeys sync.Map
	// cancelHashes holds the hash taskMsg puts on a task Solve is submitting.
	cancelHashes sync.Map
	// own is the generation of this Client's latest submission of each id
	// it submitted, for Wait.
	own ownGens
	// rd reads the stream's records without a consumer, w writes a
	// producer's and an admin's.
	rd *taskstore.Reader
	w  *taskstore.Writer
	// room is the last reading of the room a bounded stream has (checkRoom).
	room *room.Producer
	// clock reads the broker's clock (brokerTime), from the stream info
	// NewClient got: token expiry and default deadlines are on it.
	clock jscall.BrokerClock
	// bound is when the client bound to the stream, on the real clock
	// (with its monotonic reading), and boundBroker the broker's clock
	// then: brokerNow counts from them, so a step of the client's clock
	// after it bound moves no instant it stamps for the broker.
	bound, boundBroker time.Time
}

// NewClient binds a producer to the CAPTCHA stream on nc, in
// cfg.Topology.Domain. It creates nothing: without the stream it fails
// with ErrNoTopology, naming the domain it reached.
func NewClient(ctx context.Context, nc *nats.Conn, cfg ClientConfig) (*Client, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults(nc)
	js, err := jetStreamOf(nc, cfg.Topology, jetstream.WithPublishAsyncTimeout(10*time.Second))
	if err != nil {
		return nil, err
	}
	top := cfg.Topology.withDefaults()
	sent := cfg.Now()
	s, tokens, err := topology.Open(ctx, js, top.spec())
	if err != nil {
		return nil, err
	}
	c := &Client{nc: nc, js: js, s: s, tokens: tokens, cfg: cfg, top: top, room: room.NewProducer(s, nc, s.CachedInfo().Config.MaxBytes),
		rd: taskstore.NewReader(nc, top.Domain, s, tokens), w: taskstore.NewWriter(js, s)}
	c.clock.Local = cfg.Now
	// The stream's info carries the broker's clock when it answered: the
	// client's reading of it, for the times it stamps and decides on.
	if at := s.CachedInfo().TimeStamp; !at.IsZero() {
		c.clock.Set(jscall.ClockOffset(at, sent, cfg.Now()))
	}
	c.bound, c.boundBroker = time.Now(), c.brokerTime(cfg.Now())
	return c, nil
}

// brokerNow is the broker's clock now: the later of the client's clock
// moved by its offset and the broker's reading when the client bound plus
// the time that really passed since (a monotonic reading). The first is
// behind after the client's clock stepped back since it bound (an NTP
// correction), the second after the machine was suspended (a monotonic
// clock stands still then); an instant stamped too early would end a task
// at once (SUBMIT_BY_PASSED, DEADLINE_PASSED), one a little late only
// stretches it.
func (c *Client) brokerNow() time.Time {
	return wire.Latest(c.brokerTime(c.cfg.Now()), c.boundBroker.Add(time.Since(c.bound)))
}

// brokerTime is t, a time of the client's clock, on the broker's clock.
func (c *Client) brokerTime(t time.Time) time.Time {
	return c.clock.BrokerTime(t)
}

// localTime is t, a time of the broker's clock, on the client's clock.
func (c *Client) localTime(t time.Time) time.Time {
	return c.clock.LocalTime(t)
}

// Domain is the JetStream domain the client's stream lives in
// (ClientConfig.Topology.Domain).
func (c *Client) Domain() string { return c.top.Domain }

// AuthRequired reports whether the NATS server the client reached asks for
// credentials; false on a server without users (a local trial), where every
// connection, whatever name it gives, has every permission.
func (c *Client) AuthRequired() bool { return c.nc.AuthRequired() }

// Receipt says where a submitted task went.
type Receipt struct {
	// ID is the task's id (generated when the task had none).
	ID string `json:"id"`
	// Seq is the task's stream sequence: its generation.
	Seq uint64 `json:"seq"`
	// Duplicate is true when the stream already had a task with this id in
	// its duplicate window; nothing new was enqueued.
	Duplicate bool `json:"duplicate,omitempty"`
}
