package stream

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
)

// WorkerConfig configures a worker pool. The zero value of every field but
// Solver is usable.
type WorkerConfig struct {
	// Solver solves the captchas. Required.
	Solver solver.Solver
	// Threads is how many tasks this process solves at once. Default 4.
	// A task's thread is free for the next task as soon as the service is
	// done with it; recording its outcome goes on beside, for up to
	// finishingPerThread × Threads tasks at once.
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
	// token leaves the token stream then. Default: DefaultTokenLifetimes.
	TokenLifetimes map[string]time.Duration
	// DefaultDeadline applies to tasks that carry none (raw publishers):
	// publish time plus this. Default 10m.
	DefaultDeadline time.Duration
	// IdleCheck is how often an idle worker looks for retries that came due;
	// new tasks wake it at once. Default 1s.
	IdleCheck time.Duration
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
	case cfg.Solver == nil:
		return errors.New("worker: no Solver")
	case cfg.Threads < 0:
		return fmt.Errorf("worker: Threads %d: want 0 (default 4) or more", cfg.Threads)
	case cfg.ShutdownGrace < 0:
		return fmt.Errorf("worker: ShutdownGrace %s: want 0 (default 30s) or more", cfg.ShutdownGrace)
	case cfg.DefaultDeadline < 0:
		return fmt.Errorf("worker: DefaultDeadline %s: want 0 (default %s) or more", cfg.DefaultDeadline, DefaultDeadline)
	case cfg.IdleCheck < 0:
		return fmt.Errorf("worker: IdleCheck %s: want 0 (default 1s) or more", cfg.IdleCheck)
	}
	for method, d := range cfg.TokenLifetimes {
		if d <= 0 {
			return fmt.Errorf("worker: TokenLifetimes[%q] %s: want a positive duration", method, d)
		}
	}
	if err := cfg.Policy.Validate(); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	return nil
}

// DefaultTokenLifetimes are the token lifetimes by method: reCAPTCHA 120 s,
// Turnstile 300 s, GeeTest (v3 and v4) 120 s, hCaptcha 120 s; a
// cloudflare_challenge cookie 300 s (the site sets its real lifetime, often
// longer; the outcome need not outlive the first use); text answers of
// images and BLS cells 300 s.
var DefaultTokenLifetimes = map[string]time.Duration{
	"userrecaptcha":        120 * time.Second,
	"turnstile":            300 * time.Second,
	"geetest":              120 * time.Second,
	"hcaptcha":             120 * time.Second,
	"cloudflare_challenge": 300 * time.Second,
	"post":                 300 * time.Second,
	"base64":               300 * time.Second,
	"bls":                  300 * time.Second,
}
