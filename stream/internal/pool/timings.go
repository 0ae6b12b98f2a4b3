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
	// At is when the worker wrote it.
	At time.Time `json:"at"`
	// Told is the plan's threads as the service told the worker
	// (solver.Client.PlanTold); 0 when the window was learned.
	Told int `json:"told,omitempty"`
	// ToldAt is when the service told Told (solver.Client.PlanToldAt):
	// the latest reading of the pool's workers is the plan
	// (ServiceReading).
	ToldAt time.Time `json:"told_at,omitzero"`
	// Account is which account Told is of (solver.Client.PlanAccount): a
	// fingerprint of its key, never the key. Empty in the readings of
	// workers older than it, which count together as one account apart.
	Account string `json:"account,omitempty"`
}

// Readings is the latest reading (PlanWindow.Told, at ToldAt; a tie: the
// most threads) of each account among ws, by PlanWindow.Account.
func Readings(ws map[string]PlanWindow) map[string]PlanWindow {
	out := map[string]PlanWindow{}
	for _, w := range ws {
		if w.Told <= 0 {
			continue
		}
		if r, ok := out[w.Account]; !ok || w.ToldAt.After(r.ToldAt) || (w.ToldAt.Equal(r.ToldAt) && w.Told > r.Told) {
			out[w.Account] = w
		}
	}
	return out
}

// ServiceReading is the plan's threads as the service told them at the
// latest reading among ws (Readings), when every reading is of one
// account, and how many accounts the readings are of. Readings of more
// than one account tell no plan of the pool's (told 0): each account's
// plan bounds its own workers' captchas, not the others'.
func ServiceReading(ws map[string]PlanWindow) (told, accounts int) {
	rs := Readings(ws)
	if len(rs) != 1 {
		return 0, len(rs)
	}
	for _, r := range rs {
		told = r.Told
	}
	return told, 1
}

// fresh keeps of ws the windows written within WindowFresh of now.
func fresh(ws map[string]PlanWindow, now time.Time) {
	for name, w := range ws {
		if now.Sub(w.At) > WindowFresh {
			delete(ws, name)
		}
	}
}

// noFuture drops of ws the windows written, and the readings (Told)
// told, after now+WindowFresh: they are no one's. A worker's credentials
// may write any, and one stamped a century ahead would count as fresh,
// and as the latest reading, for a century (ServiceReading). Only the
// server's follower drops them (FollowWindows): a worker whose clock is
// behind keeps the others' windows as it did.
func noFuture(ws map[string]PlanWindow, now time.Time) {
	for name, w := range ws {
		switch {
		case w.At.Sub(now) > WindowFresh:
			delete(ws, name)
		case w.ToldAt.Sub(now) > WindowFresh:
			w.Told, w.ToldAt = 0, time.Time{}
			ws[name] = w
		}
	}
}

// PlanFollowed reports whether a server follows the service's readings
// (topology.TimingsMetaFollower in the bucket's metadata, renewed within
// topology.PlanFollowerFresh of now).
func (s *Timings) PlanFollowed(ctx context.Context, now time.Time) (bool, error) {
	st, err := s.kv.Status(ctx)
	if err != nil {
		return false, fmt.Errorf("timings bucket: %w", err)
	}
	return topology.PlanFollowerMarked(st.Metadata()[topology.TimingsMetaFollower], now), nil
}

// FollowWindows calls follow with the fresh plan windows (WindowFresh,
// now its clock) as each write of them lands, from the one stored now
// on, until ctx ends, with an admin's rights (topology.FollowKey), not a
// worker's core subscription (FollowTimings).
func FollowWindows(ctx context.Context, js jetstream.JetStream, now func() time.Time, follow func(map[string]PlanWindow)) error {
	return topology.FollowKey(ctx, js, planWindowsKey, func(b []byte) {
		followWindows(b, now, func(ws map[string]PlanWindow) {
			noFuture(ws, now())
			follow(ws)
		})
	})
}

// PutWindow records worker's learned plan window limit at now, and drops
// the windows of workers silent for 2 minutes.
func (s *Timings) PutWindow(ctx context.Context, worker string, limit int, now time.Time) error {
	return s.PutPlanWindow(ctx, worker, PlanWindow{Limit: limit, At: now})
}

// PutPlanWindow records worker's plan window w (w.At its time), and drops
// the windows of workers silent for 2 minutes.
func (s *Timings) PutPlanWindow(ctx context.Context, worker string, w PlanWindow) error {
	now := w.At
	for range mergeTries {
		e, err := s.kv.Get(ctx, planWindowsKey)
		ws := map[string]PlanWindow{}
		if err == nil {
			_ = json.Unmarshal(e.Value(), &ws) // unreadable: replaced
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
	fresh(ws, now)
	return ws, nil
}
