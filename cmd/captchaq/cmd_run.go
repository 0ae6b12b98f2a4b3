package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/captchaq/captchaq/gateway"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/solver/provider"
	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/broker"
)

func runRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("run", "[flags] FILE\n       captchaq run --gateway ADDR [flags] [FILE]  (serves the gateway until interrupted; FILE is optional)", stdout)
	workers := fs.Int("workers", 2, "worker pools to run in this process")
	threads := fs.Int("threads", 8, "threads per worker pool")
	speed := fs.Float64("fake-speed", 10, "with the emulator: solve this many times faster than the real service (1 = real time)")
	fakeFaults := fs.Float64("fake-unsolvable", 0, "with the emulator: rate of ERROR_CAPTCHA_UNSOLVABLE answers (0..1)")
	store := fs.String("store", "", "JetStream store directory, kept after the run for trace and dead ls (default: a temporary one, removed at exit)")
	asJSON := fs.Bool("json", false, "print each outcome as a JSON line (the default when stdout is not a terminal; on one, a table)")
	timeout := fs.Duration("timeout", 30*time.Minute, "give up waiting after this long")
	providersFile := fs.String("providers", "", "solve through the providers of this file (docs/providers.md) instead of one service; the spend table follows the outcomes")
	overflow := fs.String("overflow", "deadline", "with --providers: deadline, always or never (see captchaq worker); with --fake-providers, always unless given")
	fakeProviders := fs.Bool("fake-providers", false, "without a key: solve through two emulated providers, a CaptchaAI plan of 3 threads and a per-solve 2captcha overflow, and end with the spend table and each emulator's bill")
	sf := addFlags[solverFlags](fs)
	pf := addFlags[policyFlags](fs)
	lf := addFlags[logFlags](fs)
	// run prints its outcomes on stdout and a summary on stderr: its log
	// says only what goes wrong, and its help says so.
	lf.level = "warn"
	fs.Lookup("log-level").DefValue = "warn"
	var gf gatewayFlags
	gf.register(fs, "gateway-")
	if err := parseArgs(fs, args, 1); err != nil {
		return err
	}
	if fs.NArg() != 1 && (gf.addr == "" || fs.NArg() != 0) {
		return usageError("want one task file (JSON lines); with --gateway, none serves until interrupted")
	}
	if gf.addr != "" {
		if err := gf.check("gateway-"); err != nil {
			return err
		}
	}
	if *workers < 1 || *threads < 1 {
		return usageError("--workers %d --threads %d: want 1 or more of each", *workers, *threads)
	}
	log, err := lf.logger(stderr)
	if err != nil {
		return err
	}
	in := io.NopCloser(strings.NewReader("")) // --gateway alone: no file
	if fs.NArg() == 1 {
		if in, err = openInput(fs.Arg(0)); err != nil {
			return err
		}
	}
	defer in.Close()

	// The solver: the providers of --providers; else the real service when
	// there is a key, else the emulator.
	now := time.Now // one clock for the workers and their solver
	var (
		solve solver.Solver
		sc    *solver.Client
		set   *provider.Set
		bills func(io.Writer)
	)
	if *fakeProviders {
		if *providersFile != "" {
			return usageError("--fake-providers and --providers: one or the other")
		}
		if key, err := apiKey(sf.keyFile); err != nil || key != "" {
			return usageError("--fake-providers solves with emulators only: unset CAPTCHAAI_API_KEY (and --key-file)")
		}
		if *speed <= 0 {
			return usageError("--fake-speed must be positive")
		}
		policy := provider.OverflowAlways // a run's tasks have no deadline: overflow as soon as the plan is full
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "overflow" {
				policy = provider.OverflowPolicy(*overflow)
			}
		})
		switch policy {
		case "deadline":
			policy = provider.OverflowAtDeadline
		case provider.OverflowAlways, provider.OverflowNever:
		default:
			return usageError("--overflow %q: want deadline, always or never", *overflow)
		}
		sf.log, sf.now = log, now
		var stop func()
		if set, bills, stop, err = sf.fakeProviders(*speed, policy); err != nil {
			return err
		}
		defer stop()
		solve, sc = providerSolver{set, set}, firstClassic(set)
		fmt.Fprintf(stderr, "no key: solving through two emulated providers, captchaai (a plan of %d threads) and 2captcha (per solve, past the plan), %gx real speed\n", fakePlanThreads, *speed)
		watchProviders(ctx, set, log, true)
	} else if *providersFile != "" {
		sf.log, sf.now = log, now
		if set, err = sf.openProviders(*providersFile, *overflow); err != nil {
			return err
		}
		solve, sc = providerSolver{set, set}, firstClassic(set)
		fmt.Fprintf(stderr, "solving through the providers of %s\n", *providersFile)
		watchProviders(ctx, set, log, true)
	} else {
		key, err := apiKey(sf.keyFile)
		if err != nil {
			return err
		}
		timing := solver.Timing{}
		if err := refuseTestKey(key, sf.url); err != nil {
			return err
		}
		if key == "" && sf.url != solver.DefaultBaseURL {
			return usageError("--solver-url %s needs CAPTCHAAI_API_KEY (or --key-file); without a key run uses its built-in emulator", sf.url)
		}
		if key == "" {
			if *speed <= 0 {
				return usageError("--fake-speed must be positive")
			}
			url, stop, err := startEmulator(fakeapi.Config{TimeScale: 1 / *speed, Seed: time.Now().UnixNano(),
				Faults: fakeapi.Faults{Unsolvable: *fakeFaults}})
			if err != nil {
				return err
			}
			defer stop()
			sf.url, key, timing = url, fakeapi.TestKey, solver.Timing{Scale: 1 / *speed}
			fmt.Fprintf(stderr, "no CAPTCHAAI_API_KEY: solving with the emulator at %s, %gx real speed\n", url, *speed)
		} else if sf.url == solver.DefaultBaseURL {
			fmt.Fprintf(stderr, "real API: %s (CAPTCHAAI_API_KEY is set: each solve is paid for)\n", urlHost(sf.url))
		} else {
			fmt.Fprintf(stderr, "solving service at %s (--solver-url or CAPTCHAQ_SOLVER_URL; CAPTCHAAI_API_KEY is set: a paid service charges each solve)\n", urlHost(sf.url))
		}
		sf.log = log
		if timing.Scale == 0 {
			timing.Scale = sf.pollScale
		}
		sf.now = now
		sc, err = sf.clientWithKey(key, timing, nil)
		if err != nil {
			return err
		}
		if err := serviceAnswers(ctx, sc, sf.url); err != nil {
			return err
		}
		solve = sc
	}

	dir, key := *store, os.Getenv(storeKeyEnv)
	if dir == "" {
		dir, err = os.MkdirTemp("", "captchaq-run-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		// The store lives as long as this run, so can its key: nothing
		// it holds is readable from its files, even before they go.
		key = rand.Text() + rand.Text()
	}
	ns, err := broker.Start(broker.Config{StoreDir: dir, Logger: log, StoreKey: key})
	if err != nil {
		return err
	}
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	nc, err := connectInProcess(ns, "captchaq-run", "", "")
	if err != nil {
		return err
	}
	defer nc.Close()
	stopGuard, err := guardStore(ns, nc, stream.Topology{}, log, func() error {
		return ensureTopology(ctx, nc, stream.Topology{}, -1, false)
	})
	if err != nil {
		return err
	}
	defer stopGuard()
	// This run is its own admin: producers and workers only find the topology.
	if err := ensureTopology(ctx, nc, stream.Topology{}, -1, false); err != nil {
		return err
	}
	if set != nil {
		if err := sharePool(ctx, set, nc, stream.Topology{}); err != nil {
			return err
		}
	}
	client, err := stream.NewClient(ctx, nc, stream.ClientConfig{Name: "captchaq-run"})
	if err != nil {
		return err
	}
	tasks, _, err := readTasks(in, client, stream.When{}, stream.When{})
	if err != nil {
		return &exitError{code: 2, err: err}
	}

	// A worker that stops (the service refuses the key) stops the run, and
	// its error says why.
	wctx, stopWorkersCause := context.WithCancelCause(ctx)
	stopWorkers := func() { stopWorkersCause(nil) }
	var wg sync.WaitGroup
	var conns []*nats.Conn
	defer func() {
		stopWorkers()
		wg.Wait() // workers finish their last writes before their connections close
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range *workers {
		wnc, err := connectInProcess(ns, fmt.Sprintf("captchaq-run-worker-%d", i+1), "", "")
		if err != nil {
			return err
		}
		conns = append(conns, wnc)
		// One solving client for every worker of this process: it learns
		// for all of them, with no pool to share with.
		w, err := stream.NewWorker(ctx, wnc, stream.WorkerConfig{Solver: solve, LearnAlone: true, Threads: *threads, Policy: pf.policy(),
			Logger: log, Name: fmt.Sprintf("run-worker-%d", i+1), ShutdownGrace: time.Second, Now: now})
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.Run(wctx); err != nil {
				log.Error("worker stopped", slog.Any("error", err))
				stopWorkersCause(err)
			}
		}()
	}

	if gf.addr != "" {
		// The workers' side of the gateway's reportgood/reportbad: the
		// service's key is sc's, or each provider's (a report goes to the
		// provider that solved the captcha).
		if rep := reporterOf(set, sc); rep != nil {
			stopReports, err := gateway.ServeReports(ctx, conns[0], stream.Topology{}, rep, log)
			if err != nil {
				return err
			}
			defer stopReports()
		}
		stopGW, err := gf.startIn(wctx, ns, now, stderr, log)
		if err != nil {
			return err
		}
		defer stopGW()
		if fs.NArg() == 0 {
			<-wctx.Done()
			return gatewayStopped(ctx, wctx, client, *store, dir, stderr)
		}
	}

	start := time.Now()
	bar := newProgress(stderr)
	receipts, err := client.SubmitAll(ctx, tasks)
	if err != nil {
		if sig, ok := interruptOf(ctx); ok {
			return &exitError{code: sig.exitCode(), err: fmt.Errorf("%s while submitting: nothing was solved", sig)}
		}
		return err
	}
	if !bar.on {
		fmt.Fprintf(stderr, "submitted %d tasks; waiting for their outcomes\n", len(receipts))
	}
	bar.begin(len(receipts))
	watchCtx, stopWatch := context.WithCancel(wctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		if set == nil {
			watchService(watchCtx, bar, sc, sf.url)
		}
	}()
	rows := newOutcomePrinter(stdout, *asJSON || !isTerminal(stdout), bar)
	var sum summary
	wait, cancel := context.WithTimeout(wctx, *timeout)
	defer cancel()
	err = client.WaitAll(wait, receipts, func(o stream.Outcome, err error) {
		sum.add(o, err)
		rows.print(o, err)
		bar.update(sum.done())
	})
	stopWatch()
	<-watched
	bar.finish()
	sum.elapsed = time.Since(start)
	sum.print(stderr, len(receipts))
	if set != nil {
		printRunSpend(ctx, stderr, client)
	}
	if bills != nil {
		bills(stderr)
	}
	if *store != "" {
		fmt.Fprintf(stderr, "  store    kept in %s: `captchaq server --config '' --store %s`, then `captchaq trace ID`, `captchaq dead ls`\n", dir, dir)
	}
	sum.tryNext(stderr, *store, fs.Arg(0))
	if err != nil {
		lost := len(receipts) - sum.done()
		what := fmt.Sprintf("%d task(s) had no outcome yet and are lost with this run's temporary store (--store DIR keeps them)", lost)
		if *store != "" {
			what = fmt.Sprintf("%d task(s) had no outcome yet; they stay queued in %s, and `captchaq run --store %s` with the same file solves them (ids submitted again within %s are not queued twice; later, a worker against that store does)",
				lost, dir, dir, stream.DefaultDuplicateWindow)
		}
		if sig, ok := interruptOf(ctx); ok {
			return &exitError{code: sig.exitCode(), err: fmt.Errorf("%s: %s", sig, what)}
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("--timeout %s passed: %s", *timeout, what)
		}
		if cause := context.Cause(wctx); cause != nil && !errors.Is(cause, context.Canceled) {
			return fmt.Errorf("%v; %s", cause, what)
		}
		return fmt.Errorf("%s: %w", what, err)
	}
	if sum.solved < len(receipts) {
		return &exitError{code: 1, err: fmt.Errorf("%d of %d tasks not solved", len(receipts)-sum.solved, len(receipts))}
	}
	return nil
}

// gatewayStopped says what a run that only served the gateway leaves
// behind when it stops: nothing, or tasks that are lost with a temporary
// store (an interrupt then exits with its code), or that stay in the one
// --store kept.
func gatewayStopped(ctx, wctx context.Context, client *stream.Client, store, dir string, stderr io.Writer) error {
	sig, interrupted := interruptOf(ctx)
	cause := context.Cause(wctx)
	if !interrupted && (cause == nil || errors.Is(cause, context.Canceled)) {
		return nil
	}
	lctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ts, err := client.Tasks(lctx, stream.TaskFilter{})
	var what string
	switch {
	case err != nil:
		what = fmt.Sprintf("the gateway stopped; the tasks left could not be listed (%v)", err)
	case len(ts) > 0 && store == "":
		what = fmt.Sprintf("the gateway stopped with %d task(s) it accepted and no outcome yet; they are lost with this run's temporary store (--store DIR keeps them)", len(ts))
	case len(ts) > 0:
		what = fmt.Sprintf("the gateway stopped with %d task(s) it accepted and no outcome yet; they stay queued in %s (`captchaq server --config '' --store %s` and a worker solve them)", len(ts), dir, dir)
	default:
		msg := "the gateway stopped; no task it accepted was left without an outcome"
		if store != "" {
			msg += fmt.Sprintf("; the store is kept in %s (`captchaq server --config '' --store %s`, then `captchaq trace ID`)", dir, dir)
		}
		fmt.Fprintln(stderr, "captchaq run: "+msg)
		if interrupted {
			return nil
		}
		return cause
	}
	if interrupted {
		return &exitError{code: sig.exitCode(), err: fmt.Errorf("%s: %s", sig, what)}
	}
	return fmt.Errorf("%v; %s", cause, what)
}

// startEmulator serves the solving service's emulator on a free port of
// 127.0.0.1 and returns its URL.
func startEmulator(cfg fakeapi.Config) (string, func(), error) {
	return fakeapi.ServeLocal(fakeapi.New(cfg))
}

// serviceAnswers asks the solving service for the balance once (a free
// call) and refuses to start the run when the service cannot be reached at
// all: a run is a batch that someone waits for, and a URL left over from an
// emulator that is gone (the README's exports) must fail at once, naming
// the way back to the built-in emulator, not queue the file and wait.
func serviceAnswers(ctx context.Context, sc *solver.Client, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	_, _ = sc.Balance(ctx)
	if since, err := sc.Unreachable(); !since.IsZero() {
		return fmt.Errorf("the solving service at %s cannot be reached (%v): start it, or unset CAPTCHAQ_SOLVER_URL and CAPTCHAAI_API_KEY to solve with the built-in emulator; nothing was submitted", urlHost(url), err)
	}
	return nil
}

// urlHost is the host of a URL, for messages (never its path or query).
func urlHost(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.Host != "" {
		return u.Host
	}
	return "(unparsable --solver-url)"
}
