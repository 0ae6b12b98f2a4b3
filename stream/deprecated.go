package stream

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The admin's calls as they were before Admin: each does what the Admin
// method it names does.

// EnsureTopology creates (or, with update, updates) the topology t.
//
// Deprecated: use Admin.EnsureTopology.
func EnsureTopology(ctx context.Context, nc *nats.Conn, t Topology, update bool) (jetstream.Stream, error) {
	return (&Admin{nc: nc, cfg: AdminConfig{Topology: t}}).EnsureTopology(ctx, update)
}

// EnsureTimings creates the timings bucket of t if it does not exist.
//
// Deprecated: use Admin.EnsureTimings.
func EnsureTimings(ctx context.Context, nc *nats.Conn, t Topology) (*Timings, error) {
	return (&Admin{nc: nc, cfg: AdminConfig{Topology: t}}).EnsureTimings(ctx)
}

// SetPlan sets the plan-wide thread quota of t.
//
// Deprecated: use Admin.SetPlan.
func SetPlan(ctx context.Context, nc *nats.Conn, t Topology, threads int, opts ...PlanOption) error {
	return (&Admin{nc: nc, cfg: AdminConfig{Topology: t}}).SetPlan(ctx, threads, opts...)
}

// PauseLane stops workers from taking the lane's tasks until until.
//
// Deprecated: use Admin.PauseLane.
func (c *Client) PauseLane(ctx context.Context, lane Lane, until time.Time) error {
	return c.admin().PauseLane(ctx, lane, until)
}

// ResumeLane lets workers take the lane's tasks again.
//
// Deprecated: use Admin.ResumeLane.
func (c *Client) ResumeLane(ctx context.Context, lane Lane) error {
	return c.admin().ResumeLane(ctx, lane)
}

// Replay puts the latest dead letter of task id back on the queue.
//
// Deprecated: use Admin.Replay.
func (c *Client) Replay(ctx context.Context, id string) (Receipt, error) {
	return c.admin().Replay(ctx, id)
}

// ReplayAll replays every dead letter that matches f and was not replayed yet.
//
// Deprecated: use Admin.ReplayAll.
func (c *Client) ReplayAll(ctx context.Context, f DeadFilter) ([]Receipt, error) {
	return c.admin().ReplayAll(ctx, f)
}

// ReplayWhere replays every dead letter keep selects among those not yet
// replayed.
//
// Deprecated: use Admin.ReplayWhere.
func (c *Client) ReplayWhere(ctx context.Context, keep func(DeadLetter) bool) ([]Receipt, error) {
	return c.admin().ReplayWhere(ctx, keep)
}

// PurgeDead deletes the dead letters that match f and returns how many.
//
// Deprecated: use Admin.PurgeDead.
func (c *Client) PurgeDead(ctx context.Context, f DeadFilter) (int, error) {
	return c.admin().PurgeDead(ctx, f)
}

// PurgeDeadLetters deletes exactly the dead letters ds and returns how many.
//
// Deprecated: use Admin.PurgeDeadLetters.
func (c *Client) PurgeDeadLetters(ctx context.Context, ds []DeadLetter) (int, error) {
	return c.admin().PurgeDeadLetters(ctx, ds)
}

// PurgeWhere deletes the dead letters keep selects and returns how many.
//
// Deprecated: use Admin.PurgeWhere.
func (c *Client) PurgeWhere(ctx context.Context, keep func(DeadLetter) bool) (int, error) {
	return c.admin().PurgeWhere(ctx, keep)
}
