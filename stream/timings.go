package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/solver"
)

// TimingsBucket is the key-value bucket where workers keep what they learned
// of the service's ready times: one key per captcha kind (solver.Kind), its
// value a solver.Learned as JSON (median, spread, how many answers, when).
// It holds no captcha, token or URL. Every worker of a pool merges into it
// and plans with what it holds, so a new or restarted worker starts with
// the pool's timings.
const TimingsBucket = "captchaq-timings"

// timingsMaxValue bounds one value: a Learned is under 100 bytes, the plan
// windows about 80 bytes a worker.
const timingsMaxValue = 64 * 1024

// mergeTries is how often a merge is tried when other workers update the
// same key meanwhile.
const mergeTries = 8

var validKey = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Timings is a solver.TimingStore in TimingsBucket. It is safe for
// concurrent use.
type Timings struct {
	kv jetstream.KeyValue
}

var _ solver.TimingStore = (*Timings)(nil)

// ensureTimings is Admin.EnsureTimings of topology t on nc.
func ensureTimings(ctx context.Context, nc *nats.Conn, t Topology) (*Timings, error) {
	js, err := jetStreamOf(nc, t)
	if err != nil {
		return nil, err
	}
	t = t.withDefaults()
	storage := t.storage()
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:       TimingsBucket,
		Description:  "captchaq: the solving service's ready times learned by the workers, by captcha kind",
		MaxValueSize: timingsMaxValue,
		History:      1,
		// Keys may expire (the captcha claims, ClaimTTL): a released
		// claim's marker goes after claimMarkerTTL.
		LimitMarkerTTL: claimMarkerTTL,
		Storage:        storage,
		Replicas:       t.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("timings bucket %s: %w", TimingsBucket, err)
	}
	return &Timings{kv: kv}, nil
}

// OpenTimings binds TimingsBucket, which an admin created (EnsureTimings).
// It creates nothing: without the bucket it fails with ErrNoTopology,
// naming the domain it reached.
func OpenTimings(ctx context.Context, nc *nats.Conn, t Topology) (*Timings, error) {
	js, err := jetStreamOf(nc, t)
	if err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, TimingsBucket)
	if err == nil {
		return &Timings{kv: kv}, nil
	}
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("timings bucket %s: %w", TimingsBucket, missingTopology(ctx, js, t, "bucket "+TimingsBucket))
	}
	return nil, fmt.Errorf("timings bucket %s: %w", TimingsBucket, err)
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

// windowFresh is how long a worker's plan window counts after it wrote it:
// a worker that stopped writing is gone. Stats.LearnedPlan states its
// value to users.
const windowFresh = 2 * time.Minute

// planWindow is one worker's learned plan window.
type planWindow struct {
	// Limit is how many captchas the worker keeps on the service's threads
	// at most.
	Limit int `json:"limit"`
	// At is when the worker wrote it.
	At time.Time `json:"at"`
}

// putWindow records worker's learned plan window limit at now, and drops
// the windows of workers silent for 2 minutes.
func (s *Timings) putWindow(ctx context.Context, worker string, limit int, now time.Time) error {
	for range mergeTries {
		e, err := s.kv.Get(ctx, planWindowsKey)
		ws := map[string]planWindow{}
		if err == nil {
			_ = json.Unmarshal(e.Value(), &ws) // unreadable: replaced
		} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("plan windows: %w", err)
		}
		for name, w := range ws {
			if now.Sub(w.At) > windowFresh {
				delete(ws, name)
			}
		}
		ws[worker] = planWindow{Limit: limit, At: now}
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

// windows returns the plan windows of the workers that wrote theirs within
// 2 minutes of now, by worker name.
func (s *Timings) windows(ctx context.Context, now time.Time) (map[string]planWindow, error) {
	e, err := s.kv.Get(ctx, planWindowsKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("plan windows: %w", err)
	}
	ws := map[string]planWindow{}
	_ = json.Unmarshal(e.Value(), &ws)
	for name, w := range ws {
		if now.Sub(w.At) > windowFresh {
			delete(ws, name)
		}
	}
	return ws, nil
}

// learnedPlan fills st's LearnedPlan from the plan windows of the workers
// in st.Workers that have not stopped; a missing bucket means none learns.
func (c *Client) learnedPlan(ctx context.Context, st *Stats, now time.Time) error {
	kv, err := c.js.KeyValue(ctx, TimingsBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("timings bucket %s: %w", TimingsBucket, err)
	}
	ws, err := (&Timings{kv: kv}).windows(ctx, now)
	if err != nil {
		return err
	}
	for name, w := range ws {
		if !slices.ContainsFunc(st.Workers, func(wi WorkerInfo) bool { return wi.Name == name && !wi.Stopped }) {
			continue
		}
		st.LearnedPlan += w.Limit
		st.LearnedPlanWorkers++
	}
	return nil
}
