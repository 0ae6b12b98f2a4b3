package stream

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nuid"

	"github.com/captchaq/captchaq/captcha"
	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
)

// WorkerConfig configures a worker pool. The zero value of every field but
// Solver (or NewSolver) is usable.
type WorkerConfig struct {
	// Solver solves the captchas. It, or NewSolver, is required.
	Solver solver.Solver
	// NewSolver, instead of Solver, builds the worker's client of the
	// solving service: learnPlan is true, and the client then learns its
	// plan window (solver.Config.LearnPlan) and reads the plan the
	// service tells (solver.Config.PlanFromService); while a plan-wide
	// quota is set (SetPlan, Admin.FollowServicePlan), the quota bounds
	// the client instead of its window (solver.Client.PoolQuota), and
	// once it is removed, the window again, at once. Worker.SolverClient
	// returns the client.
	NewSolver func(learnPlan bool) (*solver.Client, error)
	// WrapSolver, with NewSolver, wraps the client for the worker's calls
	// (metrics, say); the client's learning is shared all the same.
	WrapSolver func(solver.Solver) solver.Solver
	// Learner is the client whose learning the worker shares with the
	// pool: the solve times it learned, merged with the pool's
	// (TimingsBucket, which an admin created) before the first task and
	// every ShareTimingsEvery, and its plan window once the service has
	// refused it for want of threads. Default: the client NewSolver
	// built, or Solver when it learns (a *solver.Client does).
	Learner Learner
	// ShareTimingsEvery is how often the worker shares Learner's learning
	// with the pool. Default DefaultShareTimingsEvery.
	ShareTimingsEvery time.Duration
	// LearnAlone keeps what Learner learns to this worker: nothing is
	// shared, and it is forgotten on exit.
	LearnAlone bool
	// Threads is how many tasks this process solves at once. Default 4.
	// A task's thread is free for the next task as soon as the service is
	// done with it; recording its outcome goes on beside, for up to
	// 4 × Threads tasks at once. A Solver may also give a task's thread
	// back while it goes on solving it (solver.WithDetach: a provider.Set
	// does so for a captcha a per-solve provider holds, up to that
	// provider's max_in_flight), so that Threads, sized for a thread
	// plan, does not bound what a per-solve service takes.
	Threads int
	// Policy decides retries, snoozes and dead letters.
	Policy retry.Policy
	// Topology must match the producers'. Workers find the stream and the
	// consumers an admin created (EnsureTopology) in Topology.Domain, and
	// never create or change them.
	Topology Topology
	// Name identifies this worker in the audit trail. Default host-pid-random.
	Name string
	// Logger receives one line per outcome and per problem. Default: discard.
	Logger *slog.Logger
	// ShutdownGrace is how long in-flight solves may go on after the context
	// passed to Run ends; what is still running then is handed back without
	// spending an attempt. Default 30s.
	ShutdownGrace time.Duration
	// TokenLifetimes is how long a solution stays usable, by method; the
	// token leaves the token stream then. A method it does not name keeps
	// its DefaultTokenLifetimes entry, so that every method captchaq
	// accepts has a known lifetime; a method captchaq does not accept
	// (captcha.Methods) is refused, naming it. Default: DefaultTokenLifetimes.
	TokenLifetimes map[string]time.Duration
	// DefaultDeadline applies to tasks that carry none (raw publishers):
	// publish time plus this. Default 10m.
	DefaultDeadline time.Duration
	// IdleCheck is how often an idle worker looks for retries that came due;
	// new tasks wake it at once. Default 1s.
	IdleCheck time.Duration
	// ScheduleCheck bounds how long a task that is not due yet (use_at,
	// not_before) waits in the stream's waiting room between two looks at
	// it: a cancel that Client.Cancel did not have looked at at once (a raw
	// producer's, say) ends a waiting task within this time. Default 1m.
	ScheduleCheck time.Duration
	// Now is the clock of what the worker records and decides on (see the
	// package documentation, "Clocks"). Default time.Now.
	Now func() time.Time
	// NoErase deletes a finished task's message instead of erasing it: on
	// a store without encryption at rest its page URL then stays in the
	// store's files until the server compacts the block (the last block
	// never is). For such stores whose page URLs are not sensitive, such as
	// a QA suite against its own shop: nats-server erases a message by
	// rewriting its whole block file, which bounds the broker-bound rate
	// (bench/FINDINGS.md, "Erasure"). On an encrypted store (the default)
	// an erasure is a delete already. Default: erase.
	NoErase bool
	// Observer receives every step of every task, for metrics. Default: none.
	Observer Observer
}

// validate reports the first field of cfg that is out of range, by name.
// Zero fields take their defaults; nothing else is replaced.
func (cfg WorkerConfig) validate() error {
	switch {
	case cfg.Solver == nil && cfg.NewSolver == nil:
		return errors.New("worker: no Solver (or NewSolver)")
	case cfg.Solver != nil && cfg.NewSolver != nil:
		return errors.New("worker: both Solver and NewSolver: set one")
	case cfg.WrapSolver != nil && cfg.NewSolver == nil:
		return errors.New("worker: WrapSolver without NewSolver: wrap the Solver you give yourself")
	}
	const scope = "worker"
	if err := cmp.Or(
		atLeastZero(scope, "Threads", cfg.Threads, 4),
		atLeastZero(scope, "ShutdownGrace", cfg.ShutdownGrace, 30*time.Second),
		atLeastZero(scope, "DefaultDeadline", cfg.DefaultDeadline, DefaultDeadline),
		atLeastZero(scope, "IdleCheck", cfg.IdleCheck, time.Second),
		atLeastZero(scope, "ScheduleCheck", cfg.ScheduleCheck, DefaultScheduleCheck),
		atLeastZero(scope, "ShareTimingsEvery", cfg.ShareTimingsEvery, DefaultShareTimingsEvery),
	); err != nil {
		return err
	}
	methods := captcha.Methods()
	for method, d := range cfg.TokenLifetimes {
		if d <= 0 {
			return fmt.Errorf("worker: TokenLifetimes[%q] %s: want a positive duration", method, d)
		}
		if !slices.Contains(methods, method) {
			return fmt.Errorf("worker: TokenLifetimes[%q]: not a method captchaq accepts (%s)", method, strings.Join(methods, ", "))
		}
	}
	if err := cfg.Policy.Validate(); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	if err := cfg.Topology.validate(); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	return nil
}

// withDefaults is cfg with its zero fields set to their defaults.
func (cfg WorkerConfig) withDefaults() WorkerConfig {
	if cfg.Threads == 0 {
		cfg.Threads = 4
	}
	if cfg.Name == "" {
		host, _ := os.Hostname()
		cfg.Name = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), nuid.Next()[16:])
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ShutdownGrace == 0 {
		cfg.ShutdownGrace = 30 * time.Second
	}
	lifetimes := maps.Clone(DefaultTokenLifetimes)
	maps.Copy(lifetimes, cfg.TokenLifetimes)
	cfg.TokenLifetimes = lifetimes
	if cfg.DefaultDeadline == 0 {
		cfg.DefaultDeadline = DefaultDeadline
	}
	if cfg.IdleCheck == 0 {
		cfg.IdleCheck = time.Second
	}
	if cfg.ScheduleCheck == 0 {
		cfg.ScheduleCheck = DefaultScheduleCheck
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Observer == nil {
		cfg.Observer = nopObserver{}
	}
	cfg.Policy = cfg.Policy.WithDefaults()
	if cfg.ShareTimingsEvery == 0 {
		cfg.ShareTimingsEvery = DefaultShareTimingsEvery
	}
	return cfg
}

// DefaultTokenLifetimes are the token lifetimes by method, the method
// catalogue's (captcha.TokenLifetimes): reCAPTCHA 120 s, Turnstile 300 s,
// GeeTest (v3 and v4) 120 s, hCaptcha 120 s; a cloudflare_challenge cookie
// 300 s (the site sets its real lifetime, often longer; the outcome need not
// outlive the first use); text answers of images and BLS cells 300 s. It
// names every method captchaq accepts (captcha.Methods), and only those.
var DefaultTokenLifetimes = captcha.TokenLifetimes()

// DefaultScheduleCheck is the default WorkerConfig.ScheduleCheck.
const DefaultScheduleCheck = time.Minute
