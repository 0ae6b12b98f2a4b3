// Package pool holds what the workers of a pool share beside the
// tasks: the service's ready times they learned and the plan windows
// (Timings), which worker polls a provider's captcha (Claims), the day's
// spend (Ledger), all in the pool's key-value bucket
// (topology.TimingsBucket), and their estimates of the captchas at the
// service, on core NATS (JoinOccupancy). Package stream names them for
// users (stream.Timings, stream.Claims, stream.Ledger).
package pool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream/internal/topology"
)

// mergeTries is how often a merge is tried when other workers update the
// same key meanwhile.
const mergeTries = 8

var validKey = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Timings is a solver.TimingStore in the pool's bucket
// (topology.TimingsBucket): one key per captcha kind (solver.Kind), its
// value a solver.Learned as JSON. It is safe for concurrent use.
type Timings struct {
	kv jetstream.KeyValue
}

var _ solver.TimingStore = (*Timings)(nil)

// NewTimings is the store in the bucket kv (TimingsBucket).
func NewTimings(kv jetstream.KeyValue) *Timings { return &Timings{kv: kv} }

// OpenTimings binds TimingsBucket, which an admin created. It creates
// nothing: without the bucket it fails with topology.ErrNoTopology, naming
// domain, the one reached.
func OpenTimings(ctx context.Context, js jetstream.JetStream, domain string) (*Timings, error) {
	kv, err := js.KeyValue(ctx, topology.TimingsBucket)
	if err == nil {
		return &Timings{kv: kv}, nil
	}
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("timings bucket %s: %w", topology.TimingsBucket, topology.Missing(ctx, js, domain, "bucket "+topology.TimingsBucket))
	}
	return nil, fmt.Errorf("timings bucket %s: %w", topology.TimingsBucket, err)
}

// MergeTimings merges fresh into the bucket, key by key with
// compare-and-set (a worker that updated a key meanwhile makes this one
// read it again and merge into that), and returns every kind the bucket
// holds. Kinds that are no valid key are skipped.
func (s *Timings) MergeTimings(ctx context.Context, fresh map[string]solver.Learned) (map[string]solver.Learned, error) {
	for kind, l := range fresh {
		if !validKey.MatchString(kind) {
			continue
		}
		if err := s.merge(ctx, kind, l); err != nil {
			return nil, err
		}
	}
	return s.Load(ctx)
}

func (s *Timings) merge(ctx context.Context, kind string, l solver.Learned) error {
	for range mergeTries {
		e, err := s.kv.Get(ctx, kind)
		var stored solver.Learned
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			b, _ := json.Marshal(stored.Merge(l))
			_, err = s.kv.Create(ctx, kind, b)
		case err != nil:
			return fmt.Errorf("timings of %s: %w", kind, err)
		default:
			_ = json.Unmarshal(e.Value(), &stored) // unreadable: replaced
			b, _ := json.Marshal(stored.Merge(l))
			_, err = s.kv.Update(ctx, kind, b, e.Revision())
		}
		switch {
		case err == nil:
			return nil
		case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyRevisionMismatch):
			continue // another worker was first: merge into what it wrote
		default:
			return fmt.Errorf("timings of %s: %w", kind, err)
		}
	}
	return fmt.Errorf("timings of %s: still updated by others after %d tries", kind, mergeTries)
}

// Load returns the timings the bucket holds, by kind. It reads the known
// kinds (solver.Kinds) one by one, which needs no consumer.
func (s *Timings) Load(ctx context.Context) (map[string]solver.Learned, error) {
	out := map[string]solver.Learned{}
	for _, kind := range solver.Kinds() {
		e, err := s.kv.Get(ctx, kind)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("timings of %s: %w", kind, err)
		}
		var l solver.Learned
		if json.Unmarshal(e.Value(), &l) == nil {
			out[kind] = l
		}
	}
	return out, nil
}

// planWindowsKey holds the plan windows the workers learned
// (solver.Config.LearnPlan), by worker name: {"<name>":{"limit":N,"at":T}}.
const planWindowsKey = "plan_windows"

// WindowFresh is how long a worker's plan window counts after it wrote it:
// a worker that stopped writing is gone. stream.Stats.LearnedPlan states
// its value to users.
const WindowFresh = 2 * time.Minute

// PlanWindow is one worker's learned plan window.
type PlanWindow struct {
	// Limit is how many captchas the worker keeps on the service's threads
	// at most.
	Limit int `json:"limit"`
	// At is when the worker wrote it, on the broker's clock as the worker
	// reads it (upkeep.Learning.Clock), so that workers whose clocks
	// disagree judge each other's windows alike; a worker of an earlier
	// version wrote its own clock's.
	At time.Time `json:"at"`
	// Told is the plan's threads as the service told the worker
	// (solver.Client.PlanTold); 0 when the window was learned.
	Told int `json:"told,omitempty"`
	// ToldAt is when the service told Told (solver.Client.PlanToldAt), on
	// the broker's clock as At: the latest reading of the pool's workers
	// is the plan (ServiceReading).
	ToldAt time.Time `json:"told_at,omitzero"`
	// Account is which account Told is of (solver.Client.PlanAccount): a
	// fingerprint of its key, never the key. Empty in the readings of
	// workers older than it, which count together as one account apart.
	Account string `json:"account,omitempty"`
	// future marks a reading told beyond the broker's clock
	// (windowsSeen.fresh): it counts its account, not its plan.
	future bool
}

// Readings is the latest reading (PlanWindow.Told, at ToldAt; a tie: the
// most threads; one from the future last) of each account among ws, by
// PlanWindow.Account.
func Readings(ws map[string]PlanWindow) map[string]PlanWindow {
	out := map[string]PlanWindow{}
	for _, w := range ws {
		if w.Told <= 0 {
			continue
		}
		r, ok := out[w.Account]
		switch {
		case !ok, r.future && !w.future:
		case w.future && !r.future:
			continue
		case w.ToldAt.After(r.ToldAt), w.ToldAt.Equal(r.ToldAt) && w.Told > r.Told:
		default:
			continue
		}
		out[w.Account] = w
	}
	return out
}

// ServiceReading is the plan's threads as the service told them at the
// latest reading among ws (Readings), when every reading is of one
// account, and how many accounts the readings are of. Readings of more
// than one account tell no plan of the pool's (told 0): each account's
// plan bounds its own workers' captchas, not the others'. Nor does an
// account's reading from the future (windowsSeen.fresh): told 0.
func ServiceReading(ws map[string]PlanWindow) (told, accounts int) {
	rs := Readings(ws)
	if len(rs) != 1 {
		return 0, len(rs)
	}
	for _, r := range rs {
		if !r.future {
			told = r.Told
		}
	}
	return told, 1
}

// fresh keeps of ws the windows written within WindowFresh of now. Its
// callers give as now their clock or when the windows were written last,
// whichever is earlier (lastWritten): a reader whose clock is ahead of the
// writers' must not find the windows of workers still writing stale (a
// worker on another account, ServiceReading).
func fresh(ws map[string]PlanWindow, now time.Time) {
	for name, w := range ws {
		if now.Sub(w.At) > WindowFresh {
			delete(ws, name)
		}
	}
}

// PlanFollowed reports whether a server follows the service's readings
// (topology.TimingsMetaFollower in the bucket's metadata, renewed within
// topology.PlanFollowerFresh of now, a time of the broker's clock).
func (s *Timings) PlanFollowed(ctx context.Context, now time.Time) (bool, error) {
	st, err := s.kv.Status(ctx)
	if err != nil {
		return false, fmt.Errorf("timings bucket: %w", err)
	}
	return topology.PlanFollowerMarked(st.Metadata()[topology.TimingsMetaFollower], now), nil
}

// FollowWindows calls follow with the plan windows of the workers still
// writing theirs as each write of them lands, from the one stored now
// on, until ctx ends, with an admin's rights (topology.FollowKey), not a
// worker's core subscription (FollowTimings). A window is fresh for
// WindowFresh after the write that set it, by the broker's clock
// (windowsSeen), whatever the worker's clock says.
func FollowWindows(ctx context.Context, js jetstream.JetStream, follow func(map[string]PlanWindow)) error {
	seen := windowsSeen{}
	return topology.FollowKey(ctx, js, planWindowsKey, func(b []byte, stored time.Time) {
		ws := map[string]PlanWindow{}
		if json.Unmarshal(b, &ws) != nil {
			return
		}
		seen.fresh(ws, stored)
		follow(ws)
	})
}

// windowsSeen is when the broker stored each worker's window, by worker
// name: the write in which its At changed, or its At when that is
// earlier. A worker's clock may be minutes off the others': its window
// must still count while it writes (a worker on another account beside
// the readings of one: ServiceReading), and must neither outlive it nor
// make the others' look stale.
type windowsSeen map[string]windowSeen

type windowSeen struct{ at, since time.Time }

// fresh keeps of ws, the windows of a write the broker stored at stored,
// those set within WindowFresh of it, and marks the readings told after
// stored+WindowFresh as from the future (PlanWindow.future): a worker's
// credentials may write any, and one told a century ahead would be the
// latest reading for a century; they count their account, never its
// plan.
func (s windowsSeen) fresh(ws map[string]PlanWindow, stored time.Time) {
	for name := range s {
		if _, ok := ws[name]; !ok {
			delete(s, name)
		}
	}
	for name, w := range ws {
		seen, ok := s[name]
		if !ok || !seen.at.Equal(w.At) {
			seen = windowSeen{at: w.At, since: stored}
			if w.At.Before(stored) {
				seen.since = w.At
			}
			s[name] = seen
		}
		switch {
		case stored.Sub(seen.since) > WindowFresh:
			delete(ws, name)
		case w.ToldAt.Sub(stored) > WindowFresh:
			w.future = true
			ws[name] = w
		}
	}
}

// PutWindow records worker's learned plan window limit at now, and drops
// the windows of workers silent for 2 minutes.
func (s *Timings) PutWindow(ctx context.Context, worker string, limit int, now time.Time) error {
	return s.PutPlanWindow(ctx, worker, PlanWindow{Limit: limit, At: now})
}

// PutPlanWindow records worker's plan window w (w.At its time), and drops
// the windows of workers silent for 2 minutes: by w.At, or by when the
// broker stored the windows last, whichever is earlier. A worker whose
// clock is ahead drops no window its writer wrote since (a worker on
// another account, which the server counts: FollowWindows).
func (s *Timings) PutPlanWindow(ctx context.Context, worker string, w PlanWindow) error {
	for range mergeTries {
		e, err := s.kv.Get(ctx, planWindowsKey)
		ws := map[string]PlanWindow{}
		now := w.At
		if err == nil {
			_ = json.Unmarshal(e.Value(), &ws) // unreadable: replaced
			now = earliest(now, e.Created())
		} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("plan windows: %w", err)
		}
		fresh(ws, now)
		ws[worker] = w
		b, _ := json.Marshal(ws)
		if e == nil {
			_, err = s.kv.Create(ctx, planWindowsKey, b)
		} else {
			_, err = s.kv.Update(ctx, planWindowsKey, b, e.Revision())
		}
		switch {
		case err == nil:
			return nil
		case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyRevisionMismatch):
			continue
		default:
			return fmt.Errorf("plan windows: %w", err)
		}
	}
	return fmt.Errorf("plan windows: still updated by others after %d tries", mergeTries)
}

// Windows returns the plan windows of the workers that wrote theirs within
// 2 minutes of now, by worker name.
func (s *Timings) Windows(ctx context.Context, now time.Time) (map[string]PlanWindow, error) {
	e, err := s.kv.Get(ctx, planWindowsKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("plan windows: %w", err)
	}
	ws := map[string]PlanWindow{}
	_ = json.Unmarshal(e.Value(), &ws)
	fresh(ws, earliest(now, e.Created()))
	return ws, nil
}

// earliest is the earlier of a and b.
func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// lastWritten is when ws, as a write of them holds them, was written by
// its writer's reading of the broker's clock (PlanWindow.At): the latest
// window's At (zero for none).
func lastWritten(ws map[string]PlanWindow) time.Time {
	var last time.Time
	for _, w := range ws {
		if w.At.After(last) {
			last = w.At
		}
	}
	return last
}
