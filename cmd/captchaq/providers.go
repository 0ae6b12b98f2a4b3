package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/captchaq/captchaq/gateway"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/provider"
	"github.com/captchaq/captchaq/stream"
)

// openProviders builds the Set of a providers file (--providers): a
// client per provider with every solver flag but --solver-url, the key
// flags and --service, which each entry states itself; overflow is the
// --overflow policy.
func (s *solverFlags) openProviders(path, overflow string) (*provider.Set, error) {
	policy := provider.OverflowPolicy(overflow)
	switch policy {
	case "deadline":
		policy = provider.OverflowAtDeadline
	case provider.OverflowAlways, provider.OverflowNever:
	default:
		return nil, usageError("--overflow %q: want deadline, always or never", overflow)
	}
	f, err := provider.Load(path)
	if err != nil {
		return nil, usageError("--providers: %v", err)
	}
	base, err := s.baseConfig(solver.Timing{}, nil)
	if err != nil {
		return nil, err
	}
	set, err := provider.Open(f, base, provider.Config{Logger: s.log, Now: s.now, Overflow: policy})
	if err != nil {
		return nil, fmt.Errorf("--providers %s: %w", path, err)
	}
	return set, nil
}

// sharePool gives set the pool's record of the captcha ids its workers
// poll (stream.Claims), so that a provider that gives this worker the id
// of a captcha another worker polls does not hand this task the other's
// answer, and the pool's spend of the day (stream.Ledger), which the
// budgets are checked against; both in the timings bucket.
func sharePool(ctx context.Context, set *provider.Set, nc *nats.Conn, t stream.Topology) error {
	claims, err := stream.OpenClaims(ctx, nc, t)
	if err != nil {
		return fmt.Errorf("the pool's captcha claims: %w", err)
	}
	set.ShareClaims(claims)
	ledger, err := stream.OpenLedger(ctx, nc, t)
	if err != nil {
		return fmt.Errorf("the pool's spend ledger: %w", err)
	}
	set.ShareLedger(ledger)
	return nil
}

// providerSolver is a Set as the worker calls it (wrapped for the
// metrics), still saying that it solves elsewhere while one provider
// holds a captcha (stream.WorkerConfig).
type providerSolver struct {
	solver.Solver
	set *provider.Set
}

func (p providerSolver) SolvesElsewhere() bool { return p.set.SolvesElsewhere() }

// unreachable is the readiness check of a worker with providers: an error
// only while every provider is out of reach.
func unreachable(set *provider.Set) error {
	var errs []error
	for _, m := range set.Members() {
		since, err := m.Client.Unreachable()
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("provider %s unreachable since %s: %v", m.Entry.Name, since.UTC().Format(time.RFC3339), err))
	}
	return errors.Join(errs...)
}

// watchProviders checks each classic provider's key at the start (before
// it returns when wait is set: `run` may end before a check in the
// background would) and probes each during its outages (checkService,
// probeOutages).
func watchProviders(ctx context.Context, set *provider.Set, log *slog.Logger, wait bool) {
	for _, m := range set.Members() {
		if c, ok := m.Client.(*solver.Client); ok {
			plog := log.With(slog.String("provider", m.Entry.Name))
			if wait {
				checkService(ctx, c, plog)
			} else {
				go checkService(ctx, c, plog)
			}
			go probeOutages(ctx, c)
		}
	}
}

// reporterOf is who reports answers for the gateway: the set (each
// report to the provider that solved the captcha), else sc; nil when
// neither is.
func reporterOf(set *provider.Set, sc *solver.Client) gateway.Reporter {
	switch {
	case set != nil:
		return set
	case sc != nil:
		return sc
	}
	return nil
}

// firstClassic is the client of the set's first classic provider; nil
// when none is.
func firstClassic(set *provider.Set) *solver.Client {
	for _, m := range set.Members() {
		if c, ok := m.Client.(*solver.Client); ok {
			return c
		}
	}
	return nil
}

// printRunSpend prints the spend table of a run's solves.
func printRunSpend(ctx context.Context, w io.Writer, client *stream.Client) {
	st, err := client.Stats(ctx, 0)
	if err != nil {
		fmt.Fprintf(w, "spend: cannot read the stats: %v\n", err)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	printSpend(tw, st)
	_ = tw.Flush()
}
