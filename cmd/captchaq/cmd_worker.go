package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream"
)

// solverFlags choose the solving service and its key.
type solverFlags struct {
	url, keyFile string
}

func (s *solverFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&s.url, "solver-url", solver.DefaultBaseURL, "base URL of the 2captcha-compatible service (in.php, res.php)")
	fs.StringVar(&s.keyFile, "key-file", "", "file holding the API key (default: env CAPTCHAAI_API_KEY)")
}

func (s *solverFlags) client(timing solver.Timing) (*solver.Client, error) {
	key, err := apiKey(s.keyFile)
	if err != nil {
		return nil, err
	}
	if key == "" {
		return nil, fmt.Errorf("no API key: set CAPTCHAAI_API_KEY or --key-file")
	}
	return solver.NewClient(solver.Config{BaseURL: s.url, APIKey: key, Timing: timing})
}

// policyFlags tune the retry policy.
type policyFlags struct {
	maxAttempts int
	initial     time.Duration
	maxInterval time.Duration
}

func (p *policyFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&p.maxAttempts, "max-attempts", retry.DefaultMaxAttempts, "attempts per task before it goes to the dead letter")
	fs.DurationVar(&p.initial, "retry-initial", retry.DefaultInitialInterval, "delay after the first failed attempt (doubles per attempt, with jitter)")
	fs.DurationVar(&p.maxInterval, "retry-max", retry.DefaultMaxInterval, "longest delay between attempts")
}

func (p *policyFlags) policy() retry.Policy {
	return retry.Policy{MaxAttempts: p.maxAttempts, InitialInterval: p.initial, MaxInterval: p.maxInterval}
}

func runWorker(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("worker", "[flags]", stderr)
	threads := fs.Int("threads", 4, "tasks this process solves at once")
	grace := fs.Duration("shutdown-grace", 30*time.Second, "on SIGTERM, how long in-flight solves may finish before they are handed back")
	name := fs.String("name", "", "worker name in the audit trail (default host-pid-random)")
	var nf natsFlags
	nf.register(fs)
	var sf solverFlags
	sf.register(fs)
	var pf policyFlags
	pf.register(fs)
	var top topoFlags
	top.register(fs)
	var lf logFlags
	lf.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log, err := lf.logger(stderr)
	if err != nil {
		return err
	}
	sc, err := sf.client(solver.Timing{})
	if err != nil {
		return err
	}
	nc, ae, err := nf.connect(ctx, "captchaq-worker")
	if err != nil {
		return err
	}
	defer nc.Close()
	w, err := stream.NewWorker(ctx, nc, stream.WorkerConfig{Solver: sc, Threads: *threads, Policy: pf.policy(),
		Topology: top.topology(), Name: *name, Logger: log, ShutdownGrace: *grace})
	if err != nil {
		return explain(err, ae)
	}
	log.Info("worker started", "threads", *threads, "nats", nc.ConnectedUrlRedacted())
	if err := w.Run(ctx); err != nil {
		return &exitError{code: 3, err: err}
	}
	log.Info("worker stopped")
	return nil
}
