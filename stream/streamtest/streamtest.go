package streamtest

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/broker"
)

// Defaults of the options.
const (
	// DefaultSolveMin is the emulator's shortest solve time, for every kind
	// of captcha (see WithSolveTime).
	DefaultSolveMin = time.Millisecond
	// DefaultSolveMax is the emulator's longest solve time, likewise.
	DefaultSolveMax = 5 * time.Millisecond
	// DefaultWorkers is how many worker pools Start runs.
	DefaultWorkers = 1
	// DefaultThreads is each worker pool's thread count.
	DefaultThreads = 4
	// DefaultIdleCheck is how often an idle worker looks for retries that
	// came due.
	DefaultIdleCheck = 10 * time.Millisecond
)

// Env is a running captchaq: an embedded JetStream server with the CAPTCHA
// stream and the workers' consumers, an emulator of the solving service,
// workers that solve through it, and a producer client. Start builds it; the
// test's Cleanup tears it down.
type Env struct {
	// Client is a producer on Conn: Submit, Wait, Solve, DeadLetters, Replay…
	Client *stream.Client
	// Conn is the producer's connection (in-process unless WithListen).
	Conn *nats.Conn
	// Server is the embedded nats-server.
	Server *server.Server
	// Emulator is the solving service the workers talk to. Flip faults at
	// run time with Emulator.SetFaults; read its counters with Stats.
	Emulator *fakeapi.Server
	// Solver is a client of Emulator, for workers a test builds itself
	// (see WorkerConfig).
	Solver *solver.Client
	// Topology is the topology of the stream and the workers.
	Topology stream.Topology

	t      testing.TB
	cfg    config
	offset atomic.Int64 // the clock's lead on real time, in nanoseconds
}

// Start starts an Env for t and returns it once workers are pulling. Every
// part stops when t's Cleanup runs: workers first (their in-flight tasks are
// handed back), then connections, then the server. Start fails t with
// t.Fatal when anything cannot start.
func Start(t testing.TB, opts ...Option) *Env {
	t.Helper()
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	e := &Env{t: t, cfg: cfg, Topology: stream.Topology{Memory: true}}

	// Encrypted at rest, as `captchaq server` runs with the shipped
	// nats.conf; the key lives as long as the store.
	ns, err := broker.Start(broker.Config{StoreDir: t.TempDir(), LazySync: true, Listen: cfg.listen, StoreKey: rand.Text() + rand.Text(),
		MaxPayload: cfg.maxPayload})
	if err != nil {
		t.Fatalf("streamtest: start nats-server: %v", err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	e.Server = ns

	solveTime := map[string]fakeapi.Range{}
	for _, k := range solver.Kinds() {
		solveTime[k] = fakeapi.Range{Min: cfg.solveMin, Max: cfg.solveMax}
	}
	e.Emulator = fakeapi.New(fakeapi.Config{
		Threads:    cfg.planThreads,
		SolveTime:  solveTime,
		Seed:       cfg.seed,
		Faults:     cfg.faults,
		BurstLimit: 1 << 30, // no MAX_USER_TURN bans: tests submit in bursts
	})
	e.Solver, err = solver.NewClient(solver.Config{
		// A name of its own keeps this Env's submit limiter apart from others.
		BaseURL:           fmt.Sprintf("http://streamtest-%d.invalid", envSeq.Add(1)),
		APIKey:            fakeapi.TestKey,
		HTTPClient:        &http.Client{Transport: handlerTransport{e.Emulator}},
		Timing:            pollTiming(cfg.solveMin, cfg.solveMax),
		MinSubmitInterval: -1,
		SubmitBurst:       -1,
		// The emulator is in-process and its time is scaled: an outage's
		// probes 15 s apart would keep a task waiting a minute and more
		// when injected faults fail probe after probe (half of all calls
		// under TestJSONServiceFaultsBehindTheWorkers' faults: 90 s in 3
		// of 200 runs).
		OutageProbeMax: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatalf("streamtest: solver client: %v", err)
	}

	e.Conn = e.Connect(nats.Name("streamtest-producer"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// As `captchaq init` does: producers and workers only find the topology.
	adm, err := stream.NewAdmin(e.Conn, stream.AdminConfig{Topology: e.Topology, Name: "streamtest-admin", Now: e.Now})
	if err != nil {
		t.Fatalf("streamtest: admin: %v", err)
	}
	if _, err := adm.EnsureTopology(ctx, true); err != nil {
		t.Fatalf("streamtest: topology: %v", err)
	} else if _, err := adm.EnsureTimings(ctx); err != nil {
		t.Fatalf("streamtest: timings bucket: %v", err)
	}
	e.Client, err = stream.NewClient(ctx, e.Conn, stream.ClientConfig{Topology: e.Topology, Name: "streamtest-producer", Now: e.Now})
	if err != nil {
		t.Fatalf("streamtest: producer client: %v", err)
	}
	if cfg.planThreads > 0 {
		if err := adm.SetPlan(ctx, cfg.planThreads); err != nil {
			t.Fatalf("streamtest: plan threads: %v", err)
		}
	}
	for i := range cfg.workers {
		wc := e.WorkerConfig()
		wc.Name = fmt.Sprintf("streamtest-worker-%d", i+1)
		e.StartWorker(wc)
	}
	return e
}

var envSeq atomic.Int64

// WorkerConfig returns the configuration of the workers Start runs: the
// Env's solver, topology and clock, a retry policy with millisecond delays
// (no jitter) and the options' attempt budget and token lifetime. Change it
// and pass it to StartWorker to run a worker of your own, or to
// stream.NewWorker on a connection from Connect.
func (e *Env) WorkerConfig() stream.WorkerConfig {
	wc := stream.WorkerConfig{
		Solver:   e.Solver,
		Threads:  e.cfg.threads,
		Topology: e.Topology,
		Policy: retry.Policy{MaxAttempts: e.cfg.maxAttempts, InitialInterval: 10 * time.Millisecond,
			MaxInterval: 50 * time.Millisecond, NoJitter: true,
			CapacityDelay: 10 * time.Millisecond, CapacityMaxDelay: 50 * time.Millisecond},
		Logger:        e.cfg.logger,
		ShutdownGrace: 100 * time.Millisecond,
		IdleCheck:     DefaultIdleCheck,
		Now:           e.Now,
	}
	if e.cfg.tokenLifetime > 0 {
		wc.TokenLifetimes = map[string]time.Duration{}
		for m := range stream.DefaultTokenLifetimes {
			wc.TokenLifetimes[m] = e.cfg.tokenLifetime
		}
	}
	return wc
}

// StartWorker runs a worker pool with cfg on a connection of its own until
// the test ends, and returns it. Zero Solver, Topology, Policy, IdleCheck,
// ShutdownGrace and Now take WorkerConfig's values, so a worker of your own
// is as fast as Start's. If the worker stops with an error before the end (a fatal code
// from the service), the error is logged with t.Log when the test ends.
func (e *Env) StartWorker(cfg stream.WorkerConfig) *stream.Worker {
	e.t.Helper()
	def := e.WorkerConfig()
	if cfg.Solver == nil {
		cfg.Solver = def.Solver
	}
	if cfg.Topology.Stream == "" && !cfg.Topology.Memory {
		cfg.Topology = def.Topology
	}
	if cfg.Policy == (retry.Policy{}) {
		cfg.Policy = def.Policy
	}
	if cfg.IdleCheck == 0 {
		cfg.IdleCheck = def.IdleCheck
	}
	if cfg.ShutdownGrace == 0 {
		cfg.ShutdownGrace = def.ShutdownGrace
	}
	if cfg.Now == nil {
		cfg.Now = def.Now
	}
	nc := e.Connect(nats.Name("streamtest-worker"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := stream.NewWorker(ctx, nc, cfg)
	if err != nil {
		e.t.Fatalf("streamtest: new worker: %v", err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	e.t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			e.t.Logf("streamtest: worker %s stopped: %v", w.Name(), err)
		}
	})
	return w
}

// Connect opens another connection to the Env's server (in-process unless
// WithListen), closed when the test ends.
func (e *Env) Connect(opts ...nats.Option) *nats.Conn {
	e.t.Helper()
	var (
		nc  *nats.Conn
		err error
	)
	if e.cfg.listen {
		nc, err = nats.Connect(e.Server.ClientURL(), opts...)
	} else {
		nc, err = nats.Connect("", append(opts, nats.InProcessServer(e.Server))...)
	}
	if err != nil {
		e.t.Fatalf("streamtest: connect: %v", err)
	}
	e.t.Cleanup(nc.Close)
	return nc
}

// URL is the server's client URL (nats://127.0.0.1:port) for processes that
// must connect over TCP. It fails the test unless Start had WithListen.
func (e *Env) URL() string {
	e.t.Helper()
	if !e.cfg.listen {
		e.t.Fatal("streamtest: URL needs the WithListen option; in-process connections come from Connect")
	}
	return e.Server.ClientURL()
}

// Now is the Env's clock, shared by Client and the workers: real time plus
// whatever Advance added.
func (e *Env) Now() time.Time {
	return time.Now().Add(time.Duration(e.offset.Load()))
}

// Advance moves the Env's clock forward by d, for the producer and the
// workers at once: tokens whose lifetime ends within d are expired for Wait
// (stream.ErrTokenExpired), and queued tasks whose deadline falls within d
// are dead-lettered as expired when a worker takes them before its next
// heartbeat (HeartbeatEvery): workers judge deadlines on the broker's clock,
// which they read from their heartbeats' stamps, and the broker's clock does
// not advance. Real time goes on as usual; nothing sleeps.
func (e *Env) Advance(d time.Duration) {
	if d > 0 {
		e.offset.Add(int64(d))
	}
}

// pollTiming polls the emulator fast enough for solve times in [lo, hi]: the
// first poll at lo, then every hi/10 (at least 1 ms), giving up after a
// generous multiple of hi.
func pollTiming(lo, hi time.Duration) solver.Timing {
	first := map[string]time.Duration{}
	wait := map[string]time.Duration{}
	maxWait := 10*hi + time.Second
	for _, k := range solver.Kinds() {
		first[k] = max(lo, 500*time.Microsecond)
		wait[k] = maxWait
	}
	interval := max(hi/10, time.Millisecond)
	return solver.Timing{
		FirstPoll:    first,
		PollInterval: interval,
		MaxWait:      wait,
		MaxCalls:     int(maxWait/interval) + 1,
		Fixed:        true,
	}
}

// handlerTransport delivers requests straight to an http.Handler: the
// solver talks HTTP to the emulator without a socket.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := req.Context().Err(); err != nil {
		return nil, err
	}
	in := req.Clone(req.Context())
	if in.Body == nil {
		in.Body = http.NoBody
	}
	in.RequestURI = req.URL.RequestURI()
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, in)
	if err := req.Context().Err(); err != nil {
		return nil, err // the handler gave up on a cancelled request
	}
	resp := rec.Result()
	resp.Request = req
	return resp, nil
}

// config is what the options set.
type config struct {
	solveMin, solveMax time.Duration
	faults             fakeapi.Faults
	maxAttempts        int
	planThreads        int
	workers, threads   int
	tokenLifetime      time.Duration
	listen             bool
	seed               int64
	logger             *slog.Logger
	maxPayload         int32
}

func defaultConfig() config {
	return config{solveMin: DefaultSolveMin, solveMax: DefaultSolveMax, workers: DefaultWorkers,
		threads: DefaultThreads, seed: 1}
}

// Option changes what Start builds.
type Option func(*config)

// WithSolveTime makes the emulator solve every captcha in a time drawn
// uniformly from [lo, hi] (hi < lo means lo). Default 1–5 ms.
func WithSolveTime(lo, hi time.Duration) Option {
	return func(c *config) {
		c.solveMin, c.solveMax = max(lo, 0), max(hi, lo, 0)
	}
}

// WithFaults injects faults into the emulator from the start, for example
//
//	fakeapi.Faults{Unsolvable: 1}                                  // every captcha: ERROR_CAPTCHA_UNSOLVABLE
//	fakeapi.Faults{HTTP500: 0.3}                                   // 30 % of requests: an HTML 500 page
//	fakeapi.Faults{Rules: []fakeapi.Rule{{Param: "pageurl",
//		Contains: "bad.example", Code: "ERROR_PAGEURL"}}}          // a permanent error for some tasks
//
// Env.Emulator.SetFaults changes them while the test runs. Default none.
func WithFaults(f fakeapi.Faults) Option {
	return func(c *config) { c.faults = f }
}

// WithMaxAttempts sets the workers' attempt budget per task. Default
// retry.DefaultMaxAttempts (3).
func WithMaxAttempts(n int) Option {
	return func(c *config) { c.maxAttempts = n }
}

// WithPlanThreads gives the solving service a plan of n threads, as in
// production: the emulator solves at most n captchas at once (over it,
// in.php answers ERROR_ZERO_BALANCE and a worker snoozes without spending an
// attempt), and the plan-wide quota (stream.SetPlan) keeps all workers
// together within n, so they never hit that limit. Default 0: unlimited.
func WithPlanThreads(n int) Option {
	return func(c *config) { c.planThreads = n }
}

// WithWorkers sets how many worker pools Start runs, each on its own
// connection. Zero runs none: start your own with StartWorker. Default 1.
func WithWorkers(n int) Option {
	return func(c *config) { c.workers = max(n, 0) }
}

// WithThreads sets each worker pool's thread count. Default 4.
func WithThreads(n int) Option {
	return func(c *config) { c.threads = n }
}

// WithTokenLifetime gives every solved token lifetime d instead of the
// method's real one (120 s for reCAPTCHA, 300 s for Turnstile). A tiny d
// makes Wait and Solve return stream.ErrTokenExpired; Env.Advance expires
// tokens of any lifetime on demand.
func WithTokenLifetime(d time.Duration) Option {
	return func(c *config) { c.tokenLifetime = d }
}

// WithListen makes the server accept TCP connections on a random port of
// 127.0.0.1, for other processes (a Node.js producer, the captchaq CLI);
// Env.URL returns its address. Default: in-process connections only.
func WithListen() Option {
	return func(c *config) { c.listen = true }
}

// WithSeed seeds the emulator's random source (solve times, faults,
// tokens). Default 1.
func WithSeed(seed int64) Option {
	return func(c *config) { c.seed = seed }
}

// WithLogger sends the workers' log lines to l. Default: discarded.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.logger = l }
}

// WithMaxPayload gives the server a max_payload of n bytes (the stream
// then takes messages of wire.MaxTaskMessage(n) at most), for tests of
// what outgrows it. Default 4 MB, as the shipped nats.conf.
func WithMaxPayload(n int32) Option {
	return func(c *config) { c.maxPayload = n }
}
