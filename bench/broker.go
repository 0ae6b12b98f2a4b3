package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/captchaq/captchaq/internal/storestatus"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/broker"
)

// load is one broker-bound run: how many tasks, how many worker threads, and
// how they arrive: a burst from Producers goroutines submitting as fast as
// they can (Rate 0), or one producer at a fixed Rate per second.
type load struct {
	Tasks     int
	Threads   int
	Producers int
	Rate      float64
	Timeout   time.Duration
	// TokenLife, when positive, is the token lifetime of captchaq's workers
	// (the product's default otherwise): short, it brings the cost of a
	// token's expiry into a burst, as a pool running for longer than a
	// lifetime pays it.
	TokenLife time.Duration
	// BrokerPID is the broker's process when it is not this one (a
	// redis-server), so that its CPU time counts; 0 for in-process servers.
	BrokerPID int
	// Profile, when not empty, is the file a CPU profile of this process
	// over the run goes to.
	Profile string
}

// outcome is what one run measured.
type outcome struct {
	Tasks    int
	Elapsed  time.Duration // first submit to last completion
	P50, P99 time.Duration // submit → start of solving
	Mean     time.Duration
	CPU      cpuUse // from just before the first submit until the processes settled
}

func (o outcome) rate() float64 { return float64(o.Tasks) / o.Elapsed.Seconds() }

// cpuPerTask is the CPU time the run cost per task.
func (o outcome) cpuPerTask() time.Duration {
	if o.Tasks == 0 {
		return 0
	}
	return o.CPU.Total / time.Duration(o.Tasks)
}

func summarize(clk *clock) (outcome, error) {
	lat := clk.latencies()
	o := outcome{Tasks: int(clk.done.Load()), P50: percentile(lat, 0.50), P99: percentile(lat, 0.99), Mean: mean(lat)}
	o.Elapsed = time.Duration(clk.last.Load() - clk.firstSubmit())
	if o.Tasks < int(clk.n) {
		return o, fmt.Errorf("only %d of %d tasks completed before the timeout", o.Tasks, clk.n)
	}
	return o, nil
}

// benchTask is task i of a broker-bound run: a Turnstile task whose page URL
// ends in its index (the no-op solver sees only method and parameters).
func benchTask(i int) stream.Task {
	return stream.Task{ID: "b" + strconv.Itoa(i), Method: "turnstile",
		Params: stream.Params{"sitekey": "0x4AAAAAAAB", "pageurl": "https://shop.example/checkout/" + strconv.Itoa(i)}}
}

func indexOfID(id string) int {
	i, err := strconv.Atoi(strings.TrimPrefix(id, "b"))
	if err != nil {
		return -1
	}
	return i
}

func indexOfURL(u string) int {
	i, err := strconv.Atoi(u[strings.LastIndexByte(u, '/')+1:])
	if err != nil {
		return -1
	}
	return i
}

// produce submits tasks 0..Tasks-1 with submit, stamping each just before.
func produce(ctx context.Context, l load, clk *clock, submit func(i int) error) error {
	if l.Rate > 0 {
		t0 := time.Now()
		for i := range l.Tasks {
			if d := time.Until(t0.Add(time.Duration(float64(i) / l.Rate * float64(time.Second)))); d > 0 {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(d):
				}
			}
			clk.submitted(i)
			if err := submit(i); err != nil {
				return fmt.Errorf("submit task %d: %w", i, err)
			}
		}
		return nil
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, l.Producers)
	for range max(l.Producers, 1) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= l.Tasks || ctx.Err() != nil {
					return
				}
				clk.submitted(i)
				if err := submit(i); err != nil {
					errs <- fmt.Errorf("submit task %d: %w", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// measure submits the load with submit, waits until every task completed
// (or the load's timeout passed) and returns what the run measured, with the
// CPU time from just before the first submit until the processes settled
// after the last completion.
func measure(ctx context.Context, l load, clk *clock, submit func(i int) error) (outcome, error) {
	m, err := startMeter(l.BrokerPID, l.Profile)
	if err != nil {
		return outcome{}, err
	}
	err = produce(ctx, l, clk, submit)
	if err == nil {
		await(ctx, l, clk)
	}
	cpu, cerr := m.settle()
	if err != nil {
		return outcome{}, err
	}
	if cerr != nil {
		return outcome{}, cerr
	}
	o, err := summarize(clk)
	o.CPU = cpu
	return o, err
}

// await waits until every task completed or the load's timeout passed.
func await(ctx context.Context, l load, clk *clock) {
	t := time.NewTimer(l.Timeout)
	defer t.Stop()
	select {
	case <-clk.all:
	case <-t.C:
	case <-ctx.Done():
	}
}

// embedded starts a nats-server for one run, listening on 127.0.0.1 when tcp
// is set, with a plaintext store (nats-server's default) that is removed by
// the returned stop function.
func embedded(lazy, tcp bool) (*server.Server, func(...nats.Option) (*nats.Conn, error), func(), error) {
	return embeddedStore(lazy, tcp, "")
}

// benchStoreKey encrypts the store of the captchaq rows, as the shipped
// nats.conf does with CAPTCHAQ_STORE_KEY.
const benchStoreKey = "bench-store-key-0123456789abcdef0123456789"

// embeddedStore is embedded with the store encrypted at rest by key (none:
// plaintext).
func embeddedStore(lazy, tcp bool, key string) (*server.Server, func(...nats.Option) (*nats.Conn, error), func(), error) {
	dir, err := os.MkdirTemp("", "captchaq-bench-js-")
	if err != nil {
		return nil, nil, nil, err
	}
	ns, err := broker.Start(broker.Config{StoreDir: dir, LazySync: lazy, Listen: tcp, StoreKey: key})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, nil, err
	}
	connect := func(opts ...nats.Option) (*nats.Conn, error) {
		if tcp {
			return nats.Connect(ns.ClientURL(), opts...)
		}
		return nats.Connect("", append(opts, nats.InProcessServer(ns))...)
	}
	// The store's status, as `captchaq server` answers it: workers learn
	// from it whether the store is encrypted at rest.
	snc, err := connect(nats.Name("bench-store-status"))
	if err != nil {
		ns.Shutdown()
		os.RemoveAll(dir)
		return nil, nil, nil, err
	}
	stopStatus, err := storestatus.Serve(ns, snc, broker.GuardConfig{})
	if err != nil {
		snc.Close()
		ns.Shutdown()
		os.RemoveAll(dir)
		return nil, nil, nil, err
	}
	stop := func() {
		stopStatus()
		snc.Close()
		ns.Shutdown()
		ns.WaitForShutdown()
		os.RemoveAll(dir)
	}
	return ns, connect, stop, nil
}

// runCaptchaq runs the load through captchaq: Client.Submit, a Worker with
// l.Threads threads and a no-op solver, on an encrypted store (the shipped
// default), or on a plaintext one, where workers erase each finished task's
// message by a rewrite of its block.
func runCaptchaq(ctx context.Context, l load, lazy, tcp, plaintext bool) (outcome, error) {
	key := benchStoreKey
	if plaintext {
		key = ""
	}
	_, connect, stop, err := embeddedStore(lazy, tcp, key)
	if err != nil {
		return outcome{}, err
	}
	defer stop()
	pnc, err := connect(nats.Name("bench-producer"))
	if err != nil {
		return outcome{}, err
	}
	defer pnc.Close()
	wnc, err := connect(nats.Name("bench-worker"))
	if err != nil {
		return outcome{}, err
	}
	defer wnc.Close()
	// The admin's part: producers and workers only find the topology.
	if _, err := adminOf(pnc, stream.Topology{}).EnsureTopology(ctx, true); err != nil {
		return outcome{}, err
	}
	client, err := stream.NewClient(ctx, pnc, stream.ClientConfig{Name: "bench"})
	if err != nil {
		return outcome{}, err
	}
	clk := newClock(l.Tasks)
	tok := json.RawMessage(`"tok"`)
	w, err := stream.NewWorker(ctx, wnc, stream.WorkerConfig{
		Threads: l.Threads,
		Name:    "bench-worker",
		Solver: solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
			clk.started(indexOfURL(req.Params["pageurl"]))
			return solver.Answer{Solution: tok}, nil
		}),
		Observer: stream.ObserverFunc(func(o stream.Observation) {
			if o.Kind == stream.EventSolved {
				clk.completed()
			}
		}),
		ShutdownGrace:  time.Second,
		TokenLifetimes: tokenLifetimes(l.TokenLife),
	})
	if err != nil {
		return outcome{}, err
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() { cancel(); <-done }()
	return measure(ctx, l, clk, func(i int) error {
		_, err := client.Submit(ctx, benchTask(i))
		return err
	})
}

// tokenLifetimes is the workers' token lifetimes for a load: life for every
// method when positive, the product's defaults otherwise.
func tokenLifetimes(life time.Duration) map[string]time.Duration {
	if life <= 0 {
		return nil
	}
	out := map[string]time.Duration{}
	for m := range stream.DefaultTokenLifetimes {
		out[m] = life
	}
	return out
}
