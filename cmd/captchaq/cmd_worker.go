package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/captchaq/captchaq/gateway"
	"github.com/captchaq/captchaq/internal/httpguard"
	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/provider"
	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/metrics"
)

func runWorker(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("worker", "[flags]", stdout)
	threads := fs.Int("threads", 4, "tasks this process solves at once (with --providers, a captcha a per-solve provider accepted waits there without one, up to its max_in_flight)")
	grace := fs.Duration("shutdown-grace", 30*time.Second, "on SIGTERM, how long in-flight solves may finish before they are handed back")
	name := fs.String("name", "", "worker name in the audit trail (default host-pid-random)")
	noErase := fs.Bool("no-erase", false, "delete finished tasks' messages without erasing them: on a store without encryption at rest their page URLs stay in its files until compaction (2.6-6x the broker-bound rate there); an encrypted store (the default) never erases")
	metricsAddr := fs.String("metrics-addr", "", "serve Prometheus /metrics, /healthz and /readyz on this address (e.g. 127.0.0.1:9464); empty: off")
	planFromService := fs.Bool("plan-from-service", true,
		"with --learn-plan on CaptchaAI: read the plan the service tells (res.php?action=threadsinfo, at start and every 5 min); captchaq server makes it the plan-wide quota, as --plan-threads would (which wins over it), and without a server that does, this worker holds its share of it; a service that tells nothing leaves the plan learned from refusals; false: learn it from refusals always")
	learnPlan := fs.Bool("learn-plan", true,
		"when no plan-wide quota is set (--plan-threads on server/init, or the server's from the plan CaptchaAI tells: --plan-from-service), keep this worker's captchas at the service within a window learned from its capacity refusals; `captchaq stats` shows the pool's sum")
	pingbackListen := fs.String("pingback-listen", "", "receive the service's callbacks (in.php's pingback; CaptchaAI and 2captcha) on this address, e.g. 0.0.0.0:8089; needs --pingback-url")
	pingbackURL := fs.String("pingback-url", "", "the public URL the service calls back, routed to --pingback-listen (2captcha: registered in its pingback settings); a secret path segment is added")
	shareEvery := fs.Duration("share-timings", 30*time.Second,
		"merge the solve times this worker learned into the pool's (KV bucket "+stream.TimingsBucket+") this often, and poll with the pool's; 0: learn alone, forget on exit")
	providersFile := fs.String("providers", "", "solve through the providers of this file (docs/providers.md): failover to the fallback while the primary is out, and the cost of every solve; --solver-url, --key-file and --service are then each entry's")
	overflow := fs.String("overflow", "deadline", "with --providers, when a task that finds every primary's plan full goes to an overflow provider: deadline (only when waiting for a plan thread would miss its deadline), always, or never")
	nf := addFlags[natsFlags](fs)
	sf := addFlags[solverFlags](fs)
	pf := addFlags[policyFlags](fs)
	top := addFlags[topoFlags](fs)
	lf := addFlags[logFlags](fs)
	log, err := lf.parseArgs(fs, args, 0, stderr)
	if err != nil {
		return err
	}
	if *threads < 1 {
		return usageError("--threads %d: want 1 or more", *threads)
	}
	if (*pingbackListen == "") != (*pingbackURL == "") {
		return usageError("--pingback-listen and --pingback-url go together")
	}
	if *pingbackListen != "" {
		pb, err := solver.NewPingback(*pingbackURL)
		if err != nil {
			return usageError("--pingback-url: %v", err)
		}
		stop, addr, err := serveHTTP(*pingbackListen, "callbacks", httpguard.Callbacks(), pb, log)
		if err != nil {
			return fmt.Errorf("--pingback-listen: %w", err)
		}
		defer stop()
		sf.pingback = pb
		log.Info("receiving the service's callbacks", slog.String("addr", addr), slog.String("url_host", hostOf(*pingbackURL)))
	}
	m := metrics.NewWorker(*threads)
	sf.log = log
	// The solver reports each call itself: its own transport (connection
	// reuse, timeouts) stays, and no reply is read twice.
	sf.onCall = m.SolverCall
	sf.now = time.Now // one clock for the worker and its solver
	var (
		sc  *solver.Client
		set *provider.Set
	)
	if *providersFile != "" {
		if set, err = sf.openProviders(*providersFile, *overflow); err != nil {
			return err
		}
		sc = firstClassic(set) // its timings are the worker's; nil: none is classic
	}
	nc, ae, err := nf.connectPatiently(ctx, "captchaq-worker", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	ae.setLogger(log)
	// Without providers the worker builds the solving client (sc) once it
	// knows whether a plan-wide quota is set, and shares what it learns.
	// Readiness: connected to NATS, bound to the consumers, and taking tasks.
	var running atomic.Bool
	var worker atomic.Pointer[stream.Worker]
	ready := func() error {
		switch {
		case !nc.IsConnected():
			return fmt.Errorf("not connected to NATS (%s)", nc.Status())
		case !running.Load():
			return errors.New("not taking tasks")
		}
		if err := worker.Load().StoreRefusing(ctx); err != nil {
			return err
		}
		if set != nil {
			return unreachable(set)
		}
		if since, err := sc.Unreachable(); err != nil {
			return fmt.Errorf("the solving service is unreachable since %s: %v (--solver-url %s); %d captchas held at the service",
				since.UTC().Format(time.RFC3339), err, redactURL(sf.url), sc.Held())
		}
		return nil
	}
	if *metricsAddr != "" {
		stopMetrics, addr, err := serveHTTP(*metricsAddr, "metrics", httpguard.Metrics(), metrics.Mux(m.Registry(), ready), log)
		if err != nil {
			return fmt.Errorf("--metrics-addr: %w", err)
		}
		defer stopMetrics()
		log.Info("serving metrics", slog.String("addr", addr))
	}

	wc := stream.WorkerConfig{
		// learn: no quota is set, or the server set it from the plan the
		// service told (stream.WorkerConfig.NewSolver).
		NewSolver: func(learn bool) (*solver.Client, error) {
			sf.learnPlan = learn && *learnPlan
			sf.planFromService = *planFromService
			return sf.client(solver.Timing{})
		},
		WrapSolver: m.Solver, ShareTimingsEvery: *shareEvery, LearnAlone: *shareEvery == 0,
		Threads: *threads, Policy: pf.policy(), Topology: nf.topology(top.topology()), Name: *name, Logger: log,
		ShutdownGrace: *grace, Observer: m, NoErase: *noErase, Now: sf.now}
	if set != nil {
		wc.NewSolver, wc.WrapSolver = nil, nil
		wc.Solver = providerSolver{m.Solver(set), set}
		if sc != nil {
			wc.Learner = sc
		}
	}
	w, err := newWorkerPatiently(ctx, nc, ae, wc, log)
	if err != nil {
		return explain(err, ae)
	}
	if set == nil {
		sc = w.SolverClient()
	} else if err := sharePool(ctx, set, nc, nf.topology(top.topology())); err != nil {
		return explain(err, ae)
	}
	// Reports a gateway asks for (its callers' reportgood/reportbad):
	// the service's key stays here. With a nats.conf that does not let
	// workers take them, the server's refusal is logged and the gateway
	// answers its callers ERROR_REPORT_NOT_RECORDED.
	if rep := reporterOf(set, sc); rep != nil {
		stopReports, err := gateway.ServeReports(ctx, nc, nf.topology(top.topology()), rep, log)
		if err != nil {
			return explain(err, ae)
		}
		defer stopReports()
	}
	svc, _ := sf.profile()
	if set != nil {
		log.Info("worker started", slog.Int("threads", *threads), slog.String("nats", nc.ConnectedUrlRedacted()),
			slog.String("providers", *providersFile))
	} else {
		log.Info("worker started", slog.Int("threads", *threads), slog.String("nats", nc.ConnectedUrlRedacted()),
			slog.String("service", string(svc)), slog.String("solver", redactURL(sf.url)))
	}
	worker.Store(w)
	running.Store(true)
	if set != nil {
		watchProviders(ctx, set, log, false)
	} else {
		go checkService(ctx, sc, log)
		go probeOutages(ctx, sc)
	}
	// A user that may not pull tasks (the producer's credentials, by
	// mistake) can do nothing: stop, and say which role a worker needs,
	// rather than run on refused every second while nothing is solved.
	runCtx, stopRun := context.WithCancelCause(ctx)
	defer stopRun(nil)
	ae.onRefused(func(pe *PermissionError) {
		if pe.Op == "publish" && strings.HasPrefix(pe.Subject, "$JS.API.CONSUMER.MSG.NEXT.") {
			stopRun(pe)
		}
	})
	err = w.Run(runCtx)
	running.Store(false)
	var pe *PermissionError
	if errors.As(context.Cause(runCtx), &pe) {
		return &exitError{code: 3, err: fmt.Errorf("%w: this user may not take tasks: a worker needs the worker role of nats.conf (CAPTCHAQ_USER=worker)", pe)}
	}
	if err != nil {
		var fe *stream.FatalError
		if errors.As(err, &fe) {
			if why := svc.Explain(fe.Code); why != "" {
				err = fmt.Errorf("%w: %s", err, why)
			}
		}
		return &exitError{code: 3, err: err}
	}
	log.Info("worker stopped")
	return nil
}

// checkService asks the solving service for the account's balance once, a
// free call, so that the log says within seconds of the start whether the
// service answers and takes the key, before any task arrives. It only says:
// an unreachable service is logged by the solver's outage tracking (tasks
// wait for it), and a worker the service refuses stops at the first task it
// takes, handing it back with the refusal recorded.
func checkService(ctx context.Context, sc *solver.Client, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err := sc.Balance(ctx)
	var se *solver.Error
	switch {
	case err == nil:
		log.Info("the solving service answers and takes the key")
	case ctx.Err() != nil:
	case errors.As(err, &se) && solver.ClassOf(err) == retry.Fatal:
		log.Error("the solving service refuses this worker: it stops at the first task it takes, handing the task back",
			slog.String("code", se.Code), slog.String("error", serviceWords(se)))
	}
}

// probeOutages lets the solving client probe the service during an
// outage on its schedule (solver.Client.Probe), so that the outage ends,
// in the log, /readyz and stats, once the service answers, even while no
// task comes to be submitted.
func probeOutages(ctx context.Context, sc *solver.Client) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			pctx, cancel := context.WithTimeout(ctx, solver.DefaultHTTPTimeout)
			sc.Probe(pctx)
			cancel()
		}
	}
}

// newWorkerPatiently binds the worker to the topology, waiting for it
// (untilQueue).
func newWorkerPatiently(ctx context.Context, nc *nats.Conn, ae *asyncErrors, cfg stream.WorkerConfig, log *slog.Logger) (w *stream.Worker, err error) {
	err = untilQueue(ctx, log, func() error {
		setup, cancel := ae.failFast(ctx)
		defer cancel()
		w, err = stream.NewWorker(setup, nc, cfg)
		return err
	})
	return w, err
}

// untilQueue runs do until it succeeds or fails for another reason than a
// queue not there yet: while there is no topology to find (the admin's
// server has not created it yet) or no JetStream answers (a leaf site's
// link to the hub is down) it waits, with backoff, and says so, as a
// worker waits for its NATS server: start order does not matter.
func untilQueue(ctx context.Context, log *slog.Logger, do func() error) error {
	b := newBackoff()
	for {
		err := do()
		if err == nil || ctx.Err() != nil || !(errors.Is(err, stream.ErrNoTopology) || errors.Is(err, nats.ErrNoResponders)) {
			return err
		}
		log.Warn("waiting for the queue", slog.Any("error", err),
			slog.Duration("for", b.waited()), slog.Duration("retry_in", b.wait))
		if !b.sleep(ctx) {
			return err
		}
	}
}

// hostOf is a URL's host, all that logs show of it.
func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(invalid)"
	}
	return u.Host
}

// serveHTTP serves h on addr (the listener name, bounded by lim) in the
// background and returns a function that stops it, and the address it
// listens on.
func serveHTTP(addr, name string, lim httpguard.Limits, h http.Handler, log *slog.Logger) (func(), string, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", err
	}
	l, lim = guardListener(l, name, lim, log)
	srv := httpguard.Server(h, lim)
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("HTTP listener stopped", slog.String("addr", l.Addr().String()), slog.Any("error", err))
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, l.Addr().String(), nil
}

// redactURL shows a base URL by scheme and host only.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(invalid URL)"
	}
	return u.Scheme + "://" + u.Host
}
