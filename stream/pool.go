// What the workers of a pool share beside the tasks, as users name it;
// package pool holds it.

package stream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/stream/internal/pool"
	"github.com/captchaq/captchaq/stream/internal/topology"
)

// TimingsBucket is the key-value bucket where workers keep what they learned
// of the service's ready times: one key per captcha kind (solver.Kind), its
// value a solver.Learned as JSON (median, spread, how many answers, when).
// It holds no captcha, token or URL. Every worker of a pool merges into it
// and plans with what it holds, so a new or restarted worker starts with
// the pool's timings.
const TimingsBucket = topology.TimingsBucket

// Timings is a solver.TimingStore in TimingsBucket. It is safe for
// concurrent use.
type Timings = pool.Timings

// Claims keeps, in TimingsBucket, which worker polls each captcha a
// provider accepted (provider.Claims): a provider that answers a new
// submission with the id of a captcha another worker polls would otherwise
// hand the second task the first one's answer. It is safe for concurrent
// use.
type Claims = pool.Claims

// Ledger keeps the pool's spend per day and scope (a provider, a
// producer) in TimingsBucket, so that a provider's budget holds across
// workers and restarts (provider.Ledger). It is safe for concurrent use.
type Ledger = pool.Ledger

// ClaimTTL is how long a claim outlives a worker that died holding it: a
// captcha is not polled longer than a task lives (minutes), and an id a
// provider gives again an hour later names a new captcha.
const ClaimTTL = pool.ClaimTTL

// OccupancySubject is where the workers of a pool tell each other, on core
// NATS (nothing is stored), what each estimates of its captchas at the
// service (solver.Occupancy), so that the pool hands plan threads back
// early with one safety margin, not one per worker. It holds no captcha,
// token or URL.
const OccupancySubject = pool.OccupancySubject

// OpenTimings binds TimingsBucket, which an admin created (EnsureTimings).
// It creates nothing: without the bucket it fails with ErrNoTopology,
// naming the domain it reached.
func OpenTimings(ctx context.Context, nc *nats.Conn, t Topology) (*Timings, error) {
	return openPool(ctx, nc, t, pool.OpenTimings)
}

// OpenClaims binds the claims of the pool's TimingsBucket, which an admin
// created (EnsureTimings); it creates nothing.
func OpenClaims(ctx context.Context, nc *nats.Conn, t Topology) (*Claims, error) {
	return openPool(ctx, nc, t, pool.OpenClaims)
}

// OpenLedger binds the spend ledger of the pool's TimingsBucket, which an
// admin created (EnsureTimings); it creates nothing.
func OpenLedger(ctx context.Context, nc *nats.Conn, t Topology) (*Ledger, error) {
	return openPool(ctx, nc, t, pool.OpenLedger)
}

// openPool is open of the pool's bucket in t's domain on nc.
func openPool[T any](ctx context.Context, nc *nats.Conn, t Topology, open func(context.Context, jetstream.JetStream, string) (*T, error)) (*T, error) {
	js, err := jetStreamOf(nc, t)
	if err != nil {
		return nil, err
	}
	return open(ctx, js, t.Domain)
}

// ensureTimings is Admin.EnsureTimings of topology t on nc.
func ensureTimings(ctx context.Context, nc *nats.Conn, t Topology) (*Timings, error) {
	js, err := jetStreamOf(nc, t)
	if err != nil {
		return nil, err
	}
	kv, err := topology.EnsureTimings(ctx, js, t.spec())
	if err != nil {
		return nil, err
	}
	return pool.NewTimings(kv), nil
}

// learnedPlan fills st's LearnedPlan and ToldPlan from the plan windows of the workers
// in st.Workers that have not stopped; a missing bucket means none learns.
func (c *Client) learnedPlan(ctx context.Context, st *Stats, now time.Time) error {
	kv, err := c.js.KeyValue(ctx, TimingsBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("timings bucket %s: %w", TimingsBucket, err)
	}
	ws, err := pool.NewTimings(kv).Windows(ctx, now)
	if err != nil {
		return err
	}
	for name, w := range ws {
		if !slices.ContainsFunc(st.Workers, func(wi WorkerInfo) bool { return wi.Name == name && !wi.Stopped }) {
			delete(ws, name)
			continue
		}
		if w.Told == 0 {
			st.LearnedPlan += w.Limit
			st.LearnedPlanWorkers++
		}
	}
	// Each worker reads its account's plan: the plan, not a share; the
	// accounts' plans add up.
	rs := pool.Readings(ws)
	for _, r := range rs {
		st.ToldPlan += r.Told
	}
	if len(rs) > 1 {
		st.ToldAccounts = len(rs)
	}
	return nil
}
