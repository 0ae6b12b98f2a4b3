// What a worker composes around its client of the solving service: the
// plan check (whether the client must learn the plan's window, because no
// plan-wide quota bounds it) and sharing what the client learns with the
// pool (TimingsBucket).

package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream/internal/dispatcher"
	"github.com/captchaq/captchaq/stream/internal/pool"
)

// Learner is a client of the solving service that learns: its solve
// times, which it merges with a store's, and the plan window it keeps
// (solver.Client).
type Learner interface {
	// ShareTimings merges what the client learned into store and polls
	// with the result.
	ShareTimings(ctx context.Context, store solver.TimingStore) error
	// PlanWindow is the plan window learned so far; 0 when it learns none.
	PlanWindow() int
	// PlanReached reports whether the service refused the client for want
	// of plan threads: only then is PlanWindow a plan size learned.
	PlanReached() bool
	// ShareSoon receives when what the client learned should be shared
	// before the next periodic share (the first answers of a kind).
	ShareSoon() <-chan struct{}
	// AdoptTimings plans with the timings another worker merged into the
	// pool's store.
	AdoptTimings(pooled map[string]solver.Learned)
	// JoinPool makes the client's early hand-back of plan threads keep
	// one margin with the pool's other workers (solver.Pool).
	JoinPool(p solver.Pool)
}

var _ Learner = (*solver.Client)(nil)

// DefaultShareTimingsEvery is the default WorkerConfig.ShareTimingsEvery.
const DefaultShareTimingsEvery = 30 * time.Second

// solver builds the client NewSolver makes, if it is set, telling it to
// learn the plan's window when no plan-wide quota is set, and returns the
// client (nil without NewSolver) and the learner whose learning the worker
// shares (nil: none).
func (cfg WorkerConfig) solver(ctx context.Context, js jetstream.JetStream) (*solver.Client, Learner, error) {
	learner := cfg.Learner
	if cfg.NewSolver == nil {
		if l, ok := cfg.Solver.(Learner); ok && learner == nil {
			learner = l
		}
		return nil, learner, nil
	}
	quota, _, err := dispatcher.PlanSettings(ctx, js)
	if err != nil {
		return nil, nil, fmt.Errorf("worker: read the plan quota: %w", err)
	}
	client, err := cfg.NewSolver(quota == 0)
	if err != nil {
		return nil, nil, err
	}
	if client == nil {
		return nil, nil, errors.New("worker: NewSolver returned no client (and no error)")
	}
	if learner == nil {
		learner = client
	}
	return client, learner, nil
}

// SolverClient is the client of the solving service that
// WorkerConfig.NewSolver built; nil when the configuration gave a Solver.
func (w *Worker) SolverClient() *solver.Client { return w.built }

// shareLearning starts the learner with the pool's learned solve times and
// shares what it learns with the pool every ShareTimingsEvery and when the
// learner asks (the first answers of a kind), and plans with what other
// workers merge as they merge it, until the returned function is called,
// which shares once more. It also joins the pool's occupancy reports
// (OccupancySubject). Without the bucket (a server whose admin has not run
// init since it exists) the worker says so once and learns alone.
func (w *Worker) shareLearning(ctx context.Context) func() {
	if w.learner == nil || w.cfg.LearnAlone {
		return func() {}
	}
	var leave []func()
	leaveAll := func() {
		for _, f := range leave {
			f()
		}
	}
	if occ, stop, err := pool.JoinOccupancy(w.nc, w.cfg.Name); err != nil {
		w.log.Warn("plan threads are handed back with this worker's own margin", slog.Any("error", err))
	} else {
		w.learner.JoinPool(occ)
		leave = append(leave, stop)
	}
	// The bucket only: without it, no more requests (a worker's role may
	// not ask which domain it reached, as OpenTimings does to say so).
	kv, err := w.js.KeyValue(ctx, TimingsBucket)
	if err != nil {
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			err = fmt.Errorf("timings bucket %s not found: an admin creates it (`captchaq init`)", TimingsBucket)
		}
		w.log.Warn("solve times are not shared with the pool: this worker learns alone", slog.Any("error", err))
		return leaveAll
	}
	store := pool.NewTimings(kv)
	if stop, err := pool.FollowTimings(w.nc, w.top.Domain, w.learner.AdoptTimings); err != nil {
		w.log.Warn("other workers' solve times reach this worker only at its periodic share", slog.Any("error", err))
	} else {
		leave = append(leave, stop)
	}
	warned := false
	share := func(ctx context.Context) {
		err := w.learner.ShareTimings(ctx, store)
		// A window is a plan size only once the service has refused a
		// submission for want of threads.
		if n := w.learner.PlanWindow(); n > 0 && w.learner.PlanReached() && err == nil {
			err = store.PutWindow(ctx, w.cfg.Name, n, w.cfg.Now())
		}
		if err != nil && ctx.Err() == nil && !warned {
			warned = true
			w.log.Warn("could not share learned solve times; polling on with this worker's own", slog.Any("error", err))
		}
	}
	// The pool's timings before the first task, then every interval.
	share(ctx)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(w.cfg.ShareTimingsEvery)
		defer t.Stop()
		soon := w.learner.ShareSoon()
		for ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-t.C:
				share(ctx)
			case <-soon:
				share(ctx)
			}
		}
	}()
	return func() {
		cancel()
		<-done
		leaveAll()
		// What this worker learned since the last share outlives it.
		last, stop := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer stop()
		share(last)
	}
}
