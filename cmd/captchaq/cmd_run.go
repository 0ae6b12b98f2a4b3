package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/captchaq/captchaq/gateway"
	"github.com/captchaq/captchaq/internal/quantile"
	"github.com/captchaq/captchaq/internal/text"
	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/broker"
)

func runRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("run", "[flags] FILE", stdout)
	workers := fs.Int("workers", 2, "worker pools to run in this process")
	threads := fs.Int("threads", 8, "threads per worker pool")
	speed := fs.Float64("fake-speed", 10, "with the emulator: solve this many times faster than the real service (1 = real time)")
	fakeFaults := fs.Float64("fake-unsolvable", 0, "with the emulator: rate of ERROR_CAPTCHA_UNSOLVABLE answers (0..1)")
	store := fs.String("store", "", "JetStream store directory, kept after the run for trace and dead ls (default: a temporary one, removed at exit)")
	asJSON := fs.Bool("json", false, "print each outcome as a JSON line (the default when stdout is not a terminal; on one, a table)")
	timeout := fs.Duration("timeout", 30*time.Minute, "give up waiting after this long")
	var sf solverFlags
	sf.register(fs)
	var pf policyFlags
	pf.register(fs)
	var lf logFlags
	lf.register(fs)
	lf.level = "warn"
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

	// The solver: the real service when there is a key, else the emulator.
	key, err := apiKey(sf.keyFile)
	if err != nil {
		return err
	}
	timing := solver.Timing{}
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
	} else {
		fmt.Fprintf(stderr, "real API: %s (CAPTCHAAI_API_KEY is set: each solve is paid for)\n", urlHost(sf.url))
	}
	sf.log = log
	if timing.Scale == 0 {
		timing.Scale = sf.pollScale
	}
	timing.NoBatch = !sf.batch
	svc, err := sf.profile()
	if err != nil {
		return err
	}
	now := time.Now // one clock for the workers and their solver
	sc, err := solver.NewClient(solver.Config{BaseURL: sf.url, APIKey: key, Timing: timing, Logger: log, Service: svc,
		OutageWarnAfter: sf.outageWarn, Now: now})
	if err != nil {
		return err
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
	nc, err := nats.Connect("", nats.InProcessServer(ns), nats.Name("captchaq-run"))
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
	client, err := stream.NewClient(ctx, nc, stream.ClientConfig{Name: "captchaq-run"})
	if err != nil {
		return err
	}
	tasks, _, err := readTasks(in, client, stderr)
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
		wnc, err := nats.Connect("", nats.InProcessServer(ns), nats.Name(fmt.Sprintf("captchaq-run-worker-%d", i+1)))
		if err != nil {
			return err
		}
		conns = append(conns, wnc)
		w, err := stream.NewWorker(ctx, wnc, stream.WorkerConfig{Solver: sc, Threads: *threads, Policy: pf.policy(),
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
		// service's key is sc's.
		stopReports, err := gateway.ServeReports(ctx, conns[0], stream.Topology{}, sc, log)
		if err != nil {
			return err
		}
		defer stopReports()
		stopGW, err := gf.startIn(wctx, ns, now, stderr, log)
		if err != nil {
			return err
		}
		defer stopGW()
		if fs.NArg() == 0 {
			<-wctx.Done()
			return nil
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
	go func() { defer close(watched); watchService(watchCtx, bar, sc, sf.url) }()
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

// startEmulator serves the solving service's emulator on a free port of
// 127.0.0.1 and returns its URL.
func startEmulator(cfg fakeapi.Config) (string, func(), error) {
	return fakeapi.ServeLocal(fakeapi.New(cfg))
}

// urlHost is the host of a URL, for messages (never its path or query).
func urlHost(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.Host != "" {
		return u.Host
	}
	return "(unparsable --solver-url)"
}

// outcomePrinter prints each outcome as it lands: JSON lines, or a table's
// rows on a terminal (above the progress bar).
type outcomePrinter struct {
	w       io.Writer
	json    bool
	bar     *progress
	headed  bool
	started time.Time
}

func newOutcomePrinter(w io.Writer, asJSON bool, bar *progress) *outcomePrinter {
	return &outcomePrinter{w: w, json: asJSON, bar: bar, started: time.Now()}
}

const outcomeRow = "%-24s %-8s %-14s %8s %8s  %s\n"

func (p *outcomePrinter) print(o stream.Outcome, err error) {
	if p.json {
		_ = json.NewEncoder(p.w).Encode(o)
		return
	}
	p.bar.clear()
	if !p.headed {
		fmt.Fprintf(p.w, outcomeRow, "ID", "STATUS", "METHOD", "ATTEMPTS", "SECONDS", "ANSWER / WHY")
		p.headed = true
	}
	status, why := string(o.Status), truncate(o.Text(), 40)
	switch {
	case errors.Is(err, stream.ErrTokenExpired):
		status, why = "expired", "solved, but the token expired before it was read"
	case err != nil:
		why = strings.TrimSpace(o.Reason + " " + o.Error + " " + o.Detail)
	}
	secs := ""
	if o.SolveSeconds > 0 {
		secs = fmt.Sprintf("%.1f", o.SolveSeconds)
	}
	fmt.Fprintf(p.w, outcomeRow, truncate(o.ID, 24), status, o.Method, fmt.Sprint(o.Attempts), secs, why)
}

// truncate fits s in a table cell of n bytes, "…" included (text.Cut).
func truncate(s string, n int) string { return text.Cut(s, n-1) }

// summary counts outcomes for the end-of-run report.
type summary struct {
	solved, expired, dead int
	reasons               map[string][]string // "reason code" → task ids
	times                 []float64
	elapsed               time.Duration
}

func (s *summary) add(o stream.Outcome, err error) {
	switch {
	case err == nil:
		s.solved++
		s.times = append(s.times, o.SolveSeconds)
	case errors.Is(err, stream.ErrTokenExpired):
		s.expired++
	default:
		s.dead++
		if s.reasons == nil {
			s.reasons = map[string][]string{}
		}
		k := o.Reason + " " + o.Error
		s.reasons[k] = append(s.reasons[k], o.ID)
	}
}

func (s *summary) done() int { return s.solved + s.expired + s.dead }

func (s *summary) print(w io.Writer, total int) {
	slices.Sort(s.times)
	fmt.Fprintf(w, "\ncaptchaq run: %d tasks in %s\n", total, s.elapsed.Round(100*time.Millisecond))
	fmt.Fprintf(w, "  solved   %d\n", s.solved)
	if s.expired > 0 {
		fmt.Fprintf(w, "  expired  %d (solved, but the token expired before it was read)\n", s.expired)
	}
	fmt.Fprintf(w, "  dead     %d\n", s.dead)
	keys := make([]string, 0, len(s.reasons))
	for k := range s.reasons {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		ids := s.reasons[k]
		slices.Sort(ids)
		more := ""
		if len(ids) > 10 {
			ids, more = ids[:10], fmt.Sprintf(" and %d more (captchaq dead ls)", len(ids)-10)
		}
		fmt.Fprintf(w, "           %d × %s: %s%s\n", len(s.reasons[k]), strings.TrimSpace(k), strings.Join(ids, ", "), more)
	}
	if len(s.times) > 0 {
		fmt.Fprintf(w, "  solve time p50 %.1fs, p95 %.1fs\n", quantile.Of(s.times, 0.5), quantile.Of(s.times, 0.95))
	}
	if secs := s.elapsed.Seconds(); secs > 0 {
		fmt.Fprintf(w, "  throughput %.2f tasks/s (%.0f tasks/min)\n", float64(s.done())/secs, float64(s.done())/secs*60)
	}
}

// tryNext, when tasks went dead, names the commands that show a dead
// task's life and replay it: against the store run kept, or how to keep one.
func (s *summary) tryNext(w io.Writer, store, file string) {
	// An id that ran out of attempts first: a replay may well solve it.
	id := ""
	for k, ids := range s.reasons {
		first := slices.Min(ids)
		exhausted := strings.HasPrefix(k, string(retry.ReasonAttemptsExhausted)+" ")
		if id == "" || exhausted && !s.exhausted(id) || exhausted == s.exhausted(id) && first < id {
			id = first
		}
	}
	if id == "" {
		return
	}
	if store == "" {
		fmt.Fprintf(w, "  try      keep the store to look into the dead tasks: `captchaq run --store demo %s`, then\n"+
			"           `captchaq server --config '' --store demo &`, `captchaq trace %s`, `captchaq dead replay %s`\n", file, id, id)
		return
	}
	fmt.Fprintf(w, "  try      with `captchaq server --config '' --store %s` running: `captchaq trace %s` (its whole life), `captchaq dead replay %s` (queue it again: a worker solves it)\n",
		store, id, id)
}

// exhausted reports whether task id went dead for want of attempts.
func (s *summary) exhausted(id string) bool {
	for k, ids := range s.reasons {
		if strings.HasPrefix(k, string(retry.ReasonAttemptsExhausted)+" ") && slices.Contains(ids, id) {
			return true
		}
	}
	return false
}

// progress draws a progress bar on a terminal, and nothing elsewhere. Its
// clock moves every second (tick), outcomes or not.
type progress struct {
	w     io.Writer
	total int
	on    bool
	start time.Time

	mu   sync.Mutex
	done int
}

func newProgress(w io.Writer) *progress {
	return &progress{w: w, on: isTerminal(w), start: time.Now()}
}

// begin draws the bar for total tasks.
func (p *progress) begin(total int) {
	p.mu.Lock()
	p.total = total
	p.mu.Unlock()
	p.update(0)
}

func (p *progress) update(done int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done = done
	p.draw()
}

// tick redraws the bar with the time elapsed.
func (p *progress) tick() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.draw()
}

func (p *progress) draw() {
	if !p.on || p.total == 0 {
		return
	}
	const width = 40
	n := p.done * width / p.total
	fmt.Fprintf(p.w, "\r[%s%s] %d/%d  %s ", strings.Repeat("#", n), strings.Repeat(".", width-n), p.done, p.total,
		time.Since(p.start).Round(time.Second))
}

// clear erases the bar, so that a line can be printed where it was; the
// next update draws it again.
func (p *progress) clear() {
	if p.on {
		p.mu.Lock()
		fmt.Fprint(p.w, "\r\x1b[K")
		p.mu.Unlock()
	}
}

// say prints a line above the bar.
func (p *progress) say(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.on {
		fmt.Fprint(p.w, "\r\x1b[K")
	}
	fmt.Fprintln(p.w, line)
	p.draw()
}

func (p *progress) finish() {
	if p.on {
		fmt.Fprintln(p.w)
	}
}

// unreachableAfter is how long the solving service may fail to answer
// before run says so: long enough to pass over one refused connection,
// short enough that nobody watches a frozen screen wondering.
const unreachableAfter = 2 * time.Second

// watchService moves the bar's clock every second and says on the
// terminal, once per outage, when the solving service cannot be reached,
// and again when it answers. It returns when ctx ends.
func watchService(ctx context.Context, bar *progress, sc *solver.Client, url string) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	said := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		since, err := sc.Unreachable()
		switch {
		case err != nil && !said && time.Since(since) >= unreachableAfter:
			said = true
			bar.say(fmt.Sprintf("captchaq run: the solving service at %s cannot be reached (%v); the tasks wait without spending attempts until it answers",
				urlHost(url), err))
		case err == nil && said:
			said = false
			bar.say("captchaq run: the solving service answers again")
		default:
			bar.tick()
		}
	}
}
