// What a worker composes around its client of the solving service: the
// plan check (whether the client must learn the plan's window, because no
// plan-wide quota bounds it); sharing what the client learns with the pool
// is upkeep.Learning.

package stream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream/internal/dispatcher"
	"github.com/captchaq/captchaq/stream/internal/upkeep"
)

// Learner is a client of the solving service that learns, as a
// *solver.Client does: it merges its solve times into a store and polls
// with the result (ShareTimings), plans with the timings other workers
// merged (AdoptTimings), keeps the plan window it learned (PlanWindow,
// PlanReached), asks to share before the next periodic share (ShareSoon),
// and keeps one hand-back margin with the pool's other workers (JoinPool).
type Learner = upkeep.Learner

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
		if c, ok := cfg.Solver.(*solver.Client); ok {
			// A client told to learn its plan (Config.LearnPlan) reads
			// the one the service tells, before the first task and the
			// first report to the pool; any other reads nothing.
			c.ReadToldPlan(ctx)
		}
		return nil, learner, nil
	}
	plan, err := dispatcher.ReadPlan(ctx, js)
	if err != nil {
		return nil, nil, fmt.Errorf("worker: read the plan quota: %w", err)
	}
	// A quota set from the plan the service told is followed as the
	// service tells it: the client reads it as without a quota, and the
	// quota bounds it (upkeep.Learning, solver.Client.PoolQuota).
	learn := plan.Threads == 0 || plan.FromService
	client, err := cfg.NewSolver(learn)
	if err != nil {
		return nil, nil, err
	}
	if client == nil {
		return nil, nil, errors.New("worker: NewSolver returned no client (and no error)")
	}
	if learn {
		// The plan the service tells, before the first task and the
		// first report to the pool.
		client.ReadToldPlan(ctx)
	}
	if learner == nil {
		learner = client
	}
	return client, learner, nil
}

// SolverClient is the client of the solving service that
// WorkerConfig.NewSolver built; nil when the configuration gave a Solver.
func (w *Worker) SolverClient() *solver.Client { return w.built }
