package gateway

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/captchaq/captchaq/internal/dialect/classic"
	"github.com/captchaq/captchaq/stream"
)

// Config configures a Gateway.
type Config struct {
	// Conn is the gateway's NATS connection: producer credentials are all
	// it needs. Required.
	Conn *nats.Conn
	// Topology must match the workers' (stream.ClientConfig.Topology).
	Topology stream.Topology
	// Keys are the callers. At least one.
	Keys []Key
	// Limits are the per-key rate limits; the zero value mirrors the
	// service's.
	Limits Limits
	// PlanThreads is the plan's thread count that keys' shares divide.
	// 0: read from the stream's plan (stream.PlanThreads) at start; when
	// no plan is set either, shares are not enforced (SharesUnenforced).
	PlanThreads int
	// Pingback configures the callbacks to callers' pingback URLs.
	Pingback Pingback
	// Admission bounds what a request costs before its key is known.
	Admission Admission
	// Logger receives the gateway's log; default slog.Default(). It never
	// gets a key, a token or a page URL beyond its host.
	Logger *slog.Logger
	// Now is the clock of rate limits, deadlines and token expiry; default
	// time.Now. Give the producers' and workers' clock.
	Now func() time.Time
}

// Gateway serves in.php and res.php (ServeHTTP) for its keys. Build it with
// New and Close it when done. It is safe for concurrent use.
type Gateway struct {
	cfg     Config
	log     *slog.Logger
	callers map[[32]byte]*caller
	reader  *stream.Client
	threads int
	// unenforced: some key has a share, and there is no plan to divide.
	unenforced bool
	// guard and pingClient keep callbacks to the addresses allowed.
	guard      *addrGuard
	pingClient *http.Client
	admit      *admission

	mu    sync.Mutex
	tasks map[string]*entry // by captchaq task id
	// past are the generations of the tasks the gateway forgot (sweep),
	// by captchaq task id, for as long as the stream keeps their
	// outcomes: a poll of one reads its own generation's outcome.
	past map[string]pastTask

	stop     context.CancelFunc
	ctx      context.Context
	bg       sync.WaitGroup
	pingwait sync.WaitGroup
}

// caller is a key at run time: its producer client, its limits, and how
// many of its tasks are unfinished (under Gateway.mu).
type caller struct {
	Key
	client   *stream.Client
	submits  *classic.Window
	polls    *classic.Window
	inFlight int
}

// New binds the gateway's producers (one stream.Client per key, named
// after its producer) and starts following the stream's outcomes.
func New(ctx context.Context, cfg Config) (*Gateway, error) {
	if cfg.Conn == nil {
		return nil, errors.New("gateway: Config.Conn: required")
	}
	if len(cfg.Keys) == 0 {
		return nil, errors.New("gateway: Config.Keys: no keys")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.PlanThreads < 0 {
		return nil, fmt.Errorf("gateway: Config.PlanThreads %d: negative", cfg.PlanThreads)
	}
	cfg.Limits = cfg.Limits.withDefaults()
	cfg.Pingback = cfg.Pingback.withDefaults()
	g := &Gateway{cfg: cfg, log: cfg.Logger, callers: map[[32]byte]*caller{}, tasks: map[string]*entry{}, past: map[string]pastTask{}}
	guard, err := newAddrGuard(cfg.Pingback)
	if err != nil {
		return nil, fmt.Errorf("gateway: Config.%w", err)
	}
	g.guard, g.pingClient = guard, guard.client()
	g.admit = newAdmission(cfg.Admission.withDefaults())
	producers := map[string]bool{}
	for i, k := range cfg.Keys {
		if err := k.Validate(); err != nil {
			return nil, fmt.Errorf("gateway: Config.Keys[%d]: %w", i, err)
		}
		// The stream refuses a task whose deadline is further away than
		// it keeps tasks: such a key's every in.php would be refused.
		if keep := cmp.Or(cfg.Topology.Retention, stream.DefaultRetention); time.Duration(k.Deadline) > keep {
			return nil, fmt.Errorf("gateway: Config.Keys[%d] (producer %s): deadline %s: further away than the stream's retention %s",
				i, k.Producer, time.Duration(k.Deadline), keep)
		}
		h := sha256.Sum256([]byte(k.Key))
		if g.callers[h] != nil || producers[k.Producer] {
			return nil, fmt.Errorf("gateway: Config.Keys[%d] (producer %s): key or producer named twice", i, k.Producer)
		}
		producers[k.Producer] = true
		c, err := stream.NewClient(ctx, cfg.Conn, stream.ClientConfig{Topology: cfg.Topology, Name: k.Producer,
			DefaultDeadline: time.Duration(k.Deadline), Now: cfg.Now})
		if err != nil {
			return nil, fmt.Errorf("gateway: producer %s: %w", k.Producer, err)
		}
		g.callers[h] = &caller{Key: k, client: c,
			submits: classic.NewRuleWindow(cfg.Limits.submitRule()),
			polls:   classic.NewWindow(cfg.Limits.Polls, cfg.Limits.PollWindow, 0)}
		if g.reader == nil {
			g.reader = c
		}
	}
	g.threads = cfg.PlanThreads
	if g.threads == 0 {
		g.threads, _ = stream.PlanThreads(ctx, cfg.Conn, cfg.Topology)
	}
	for _, c := range g.callers {
		if c.Share > 0 && g.threads == 0 {
			g.unenforced = true
		}
	}
	g.ctx, g.stop = context.WithCancel(context.Background())
	g.bg.Add(2)
	go g.follow(time.Now().Add(-time.Second))
	go g.janitor()
	return g, nil
}

// Close stops following outcomes and sending pingbacks, and waits for
// both.
// SharesUnenforced reports that some key has a share of the plan but the
// gateway knows no plan thread count (Config.PlanThreads, or the stream's
// plan at New), so no share is enforced: the caller says so, naming its own
// setting.
func (g *Gateway) SharesUnenforced() bool { return g.unenforced }

func (g *Gateway) Close() {
	g.stop()
	g.bg.Wait()
	g.pingwait.Wait()
}
