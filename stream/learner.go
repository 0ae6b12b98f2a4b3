// What a worker composes around its client of the solving service: the
// plan check (whether the client must learn the plan's window, because no
// plan-wide quota bounds it); sharing what the client learns with the pool
// is upkeep.Learning.

package stream

import (
	"context"
	"errors"
	"time"

	"github.com/captchaq/captchaq/solver"
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
// learn the plan's window, and returns the client (nil without NewSolver)
// and the learner whose learning the worker shares (nil: none).
func (cfg WorkerConfig) solver(ctx context.Context) (*solver.Client, Learner, error) {
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
	// Whatever quota is set now, the client learns its plan window and
	// reads the plan the service tells, and the quota bounds it instead
	// while one is set (upkeep.Learning, solver.Client.PoolQuota): an
	// operator's quota may be removed while the worker runs, which hands
	// the plan back to the service's reading, and the window bounds the
	// worker again at once.
	client, err := cfg.NewSolver(true)
	if err != nil {
		return nil, nil, err
	}
	if client == nil {
		return nil, nil, errors.New("worker: NewSolver returned no client (and no error)")
	}
	// The plan the service tells, before the first task and the first
	// report to the pool.
	client.ReadToldPlan(ctx)
	if learner == nil {
		learner = client
	}
	return client, learner, nil
}

// SolverClient is the client of the solving service that
// WorkerConfig.NewSolver built; nil when the configuration gave a Solver.
func (w *Worker) SolverClient() *solver.Client { return w.built }
