package stream

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/stream/internal/topology"
	"github.com/captchaq/captchaq/stream/wire"
)

// AdminConfig configures an Admin. The zero value is usable.
type AdminConfig struct {
	// Topology names the stream, its domain and, for EnsureTopology, how
	// it is made. Default: the default topology.
	Topology Topology
	// DefaultDeadline is given to a replayed task (counted from when it may
	// start). Default 10m.
	DefaultDeadline time.Duration
	// Name identifies this admin in the records of its replays and
	// cancels. Default: the NATS connection's name.
	Name string
	// Now is the clock of what the admin stamps and decides on. Default
	// time.Now.
	Now func() time.Time
}

// Admin runs the queue, with the admin's credentials (docs/security.md):
// it creates the topology and the timings bucket, sets the plan quota,
// pauses and resumes lanes, lists, replays and purges dead letters, and
// reads and cancels any task. It is safe for concurrent use.
//
// NewAdmin makes no request: an Admin binds to the stream at its first call
// that needs it (EnsureTopology and SetPlan need none), so one Admin can
// create the topology it then works on.
type Admin struct {
	nc  *nats.Conn
	cfg AdminConfig
	// mu guards c, the client bound to the stream on first use.
	mu sync.Mutex
	c  *Client
	// healEvery is how often FollowServicePlan looks for lost plan
	// threads (planHealEvery when 0); tests shorten it.
	healEvery time.Duration
}

// NewAdmin returns an admin of the CAPTCHA stream on nc, in
// cfg.Topology.Domain. It fails only on a configuration out of range,
// naming the field.
func NewAdmin(nc *nats.Conn, cfg AdminConfig) (*Admin, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Admin{nc: nc, cfg: cfg}, nil
}

// validate reports the first field of cfg that is out of range, by name.
func (cfg AdminConfig) validate() error {
	return validateRole("admin", cfg.DefaultDeadline, cfg.Topology)
}

// clientConfig is the configuration of the client an Admin binds.
func (cfg AdminConfig) clientConfig() ClientConfig {
	return ClientConfig{Topology: cfg.Topology, DefaultDeadline: cfg.DefaultDeadline, Name: cfg.Name, Now: cfg.Now}
}

// client is the admin's client, bound to the stream on the first call; a
// failed bind is tried again on the next.
func (a *Admin) client(ctx context.Context) (*Client, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.c == nil {
		c, err := NewClient(ctx, a.nc, a.cfg.clientConfig())
		if err != nil {
			return nil, err
		}
		a.c = c
	}
	return a.c, nil
}

// admin is an Admin that works through c, for the deprecated admin methods
// of Client.
func (c *Client) admin() *Admin {
	return &Admin{nc: c.nc, cfg: AdminConfig{Topology: c.cfg.Topology, DefaultDeadline: c.cfg.DefaultDeadline, Name: c.cfg.Name, Now: c.cfg.Now}, c: c}
}

// withClient runs fn with a's client, bound first when it is not yet.
func withClient[T any](ctx context.Context, a *Admin, fn func(c *Client) (T, error)) (T, error) {
	c, err := a.client(ctx)
	if err != nil {
		var zero T
		return zero, err
	}
	return fn(c)
}

// EnsureTopology creates (or, with update, updates) the stream and the
// workers' consumers of the admin's Topology. When it creates the stream,
// or runs with update, it also stores the stream's anchor
// (wire.SubjectAnchor) unless the stream holds one. It is idempotent; start
// order never matters.
func (a *Admin) EnsureTopology(ctx context.Context, update bool) (jetstream.Stream, error) {
	js, err := jetStreamOf(a.nc, a.cfg.Topology)
	if err != nil {
		return nil, err
	}
	s, _, err := topology.Ensure(ctx, js, a.cfg.Topology.spec(), update)
	return s, err
}

// EnsureTimings creates TimingsBucket (file storage, or memory with the
// Topology's Memory; its replicas) if it does not exist, and returns the
// store. Admins (`captchaq server`, `captchaq init`) create it; workers,
// whose role may not create streams, find it with OpenTimings.
func (a *Admin) EnsureTimings(ctx context.Context) (*Timings, error) {
	return ensureTimings(ctx, a.nc, a.cfg.Topology)
}

// SetPlan sets the plan-wide thread quota: at most threads captchas are at
// the solving service at once, across all workers. Zero removes the quota
// (each worker's --threads alone limits it). It is the one place the quota is
// set; workers pick a change up within 10 seconds. A change never takes a
// thread from a captcha at the service: a larger quota adds the threads it
// lacks, a smaller one removes free threads and retires held ones, each
// leaving when its captcha ends. So however many changes are made, the
// service never holds more captchas than the largest quota set while they
// were submitted, and a smaller quota holds once the captchas taken under
// the larger have ended. A thread the stream loses (a worker's ack of a
// retiring thread landing just after a larger quota took it back) is put
// back by `captchaq server` (FollowServicePlan) within about 20 seconds,
// or by the next SetPlan. Of two operators setting quotas at
// the same moment, the one recorded last holds for the workers, whichever
// call returns last, and both calls return nil; PlanHeld tells the caller
// which one holds.
func (a *Admin) SetPlan(ctx context.Context, threads int, opts ...PlanOption) error {
	return setPlan(ctx, a.nc, a.cfg.Topology, threads, opts...)
}

// PlanThreads returns the plan-wide thread quota, 0 when none is set.
func (a *Admin) PlanThreads(ctx context.Context) (int, error) {
	return PlanThreads(ctx, a.nc, a.cfg.Topology)
}

// PauseLane stops workers from taking the lane's tasks (both priorities)
// until until, or until ResumeLane: the lane's consumers are paused
// (nats-server 2.11 or newer). Tasks already taken finish as usual; new ones
// queue.
func (a *Admin) PauseLane(ctx context.Context, lane Lane, until time.Time) error {
	if !slices.Contains(Lanes, lane) {
		return fmt.Errorf("lane %q: want one of %v", lane, Lanes)
	}
	_, err := withClient(ctx, a, func(c *Client) (struct{}, error) {
		for _, p := range wire.Priorities {
			name := topology.ConsumerName(lane, p)
			if _, err := c.s.PauseConsumer(ctx, name, until); err != nil {
				return struct{}{}, fmt.Errorf("pause %s: %w", name, err)
			}
		}
		return struct{}{}, nil
	})
	return err
}

// ResumeLane lets workers take the lane's tasks again.
func (a *Admin) ResumeLane(ctx context.Context, lane Lane) error {
	if !slices.Contains(Lanes, lane) {
		return fmt.Errorf("lane %q: want one of %v", lane, Lanes)
	}
	_, err := withClient(ctx, a, func(c *Client) (struct{}, error) {
		for _, p := range wire.Priorities {
			name := topology.ConsumerName(lane, p)
			if _, err := c.s.ResumeConsumer(ctx, name); err != nil {
				return struct{}{}, fmt.Errorf("resume %s: %w", name, err)
			}
		}
		return struct{}{}, nil
	})
	return err
}

// DeadLetters lists the dead letters that match f, oldest first.
func (a *Admin) DeadLetters(ctx context.Context, f DeadFilter) ([]DeadLetter, error) {
	return withClient(ctx, a, func(c *Client) ([]DeadLetter, error) { return c.DeadLetters(ctx, f) })
}

// DeadLetterOf returns the latest dead letter of task id, with its replay
// status.
func (a *Admin) DeadLetterOf(ctx context.Context, id string) (DeadLetter, error) {
	return withClient(ctx, a, func(c *Client) (DeadLetter, error) { return c.DeadLetterOf(ctx, id) })
}

// Tasks lists the tasks that wait or run (Client.Tasks).
func (a *Admin) Tasks(ctx context.Context, f TaskFilter) ([]TaskInfo, error) {
	return withClient(ctx, a, func(c *Client) ([]TaskInfo, error) { return c.Tasks(ctx, f) })
}

// TaskOf says where task id stands (Client.TaskOf).
func (a *Admin) TaskOf(ctx context.Context, id string) (TaskInfo, error) {
	return withClient(ctx, a, func(c *Client) (TaskInfo, error) { return c.TaskOf(ctx, id) })
}

// Cancel asks that any task id's latest submission not be solved, as
// Client.Cancel does for a producer's own tasks; the reason is recorded.
func (a *Admin) Cancel(ctx context.Context, id, reason string) (TaskInfo, error) {
	return withClient(ctx, a, func(c *Client) (TaskInfo, error) { return c.Cancel(ctx, id, reason) })
}

// Workers lists the workers alive, from their heartbeats (Client.Workers).
func (a *Admin) Workers(ctx context.Context) ([]WorkerInfo, error) {
	return withClient(ctx, a, func(c *Client) ([]WorkerInfo, error) { return c.Workers(ctx) })
}

// Trace is the life of task id, for audits (Client.Trace).
func (a *Admin) Trace(ctx context.Context, id string) ([]TraceEntry, error) {
	return withClient(ctx, a, func(c *Client) ([]TraceEntry, error) { return c.Trace(ctx, id) })
}

// Stats is the queue's depth, work in flight, outcomes and solve times
// over window (Client.Stats).
func (a *Admin) Stats(ctx context.Context, window time.Duration) (Stats, error) {
	return withClient(ctx, a, func(c *Client) (Stats, error) { return c.Stats(ctx, window) })
}

// History is the queue's outcomes since since, in steps of step
// (Client.History).
func (a *Admin) History(ctx context.Context, since time.Time, step time.Duration) ([]HistoryPoint, error) {
	return withClient(ctx, a, func(c *Client) ([]HistoryPoint, error) { return c.History(ctx, since, step) })
}
