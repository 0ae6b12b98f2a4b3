package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/wire"
)

// depthResult is one queue depth of the scale run.
type depthResult struct {
	Depth      int
	SubmitRate float64 // whole prefill
	TailRate   float64 // the last 10 % of the prefill
	RSSFilled  int64   // server, after the prefill
	RSSAfter   int64   // server, after the dispatch measurements
	HWM        int64
	Disk       int64
	// Phases are the dispatch measurements, one per drain, in drains order.
	Phases []phaseResult
}

// drain is how the backlog is worked off while the high-priority probes are
// measured.
type drain struct {
	name string
	// laneLimit caps the normal-priority fast-lane tasks in solving at once
	// (Topology.LaneLimits); 0 leaves the default.
	laneLimit int
	// solve is how long the solver takes for a backlog task (probes are
	// instant).
	solve time.Duration
}

// drains are the scale run's dispatch measurements, in the order they run
// against the same filled server. The slow drain goes first so that it
// finds the whole backlog queued: with one backlog task at a time, each
// taking 50 ms, the backlog moves at under 20/s and the CPU stays nearly
// idle, so its latencies show what the queue depth itself costs. The full
// drain is the original measurement: 8 no-op threads work off the backlog
// as fast as the 2 cores allow while the probes come in.
var drains = []drain{
	{name: "slow (1 backlog task at a time, 50 ms each)", laneLimit: 1, solve: 50 * time.Millisecond},
	{name: "full speed (8 no-op threads)"},
}

// phaseResult is one dispatch measurement of a depth.
type phaseResult struct {
	Drain           drain
	P50, P99, Max   time.Duration // submit → start of high-priority tasks
	Mean            time.Duration
	Drained         int // normal tasks solved meanwhile
	Seconds         float64
	ServerCPU, Self time.Duration // CPU time used meanwhile by the server and by this process
}

// runDepth fills a fresh server (a subprocess) with depth normal-priority
// tasks, then, for each drain in turn, starts an 8-thread worker and submits
// high-priority tasks at a steady rate, measuring how long each waits to be
// dispatched. With noAnchor set, the stream's anchor (wire.SubjectAnchor)
// is deleted as soon as the stream exists, and again after each drain's
// EnsureTopology, which puts it back: the behaviour before the product stored
// it. With profileDir set, the server's CPU profile of each phase is written
// there.
func runDepth(ctx context.Context, depth, probes int, rate float64, noAnchor, plaintext bool, profileDir string) (depthResult, error) {
	res := depthResult{Depth: depth}
	dir, err := os.MkdirTemp("", "captchaq-bench-scale-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	args := []string{"serve", "-store", dir}
	if plaintext {
		args = append(args, "-plaintext")
	}
	if profileDir != "" {
		args = append(args, "-pprof", "127.0.0.1:0")
	}
	srv, err := startChild(args...)
	if err != nil {
		return res, err
	}
	defer srv.stop()
	natsURL, pprofAddr, _ := strings.Cut(srv.line, " ")
	nc, err := nats.Connect(natsURL, nats.Name("bench-producer"))
	if err != nil {
		return res, err
	}
	defer nc.Close()
	// The admin's part: producers and workers only find the topology.
	if _, err := adminOf(nc, stream.Topology{}).EnsureTopology(ctx, true); err != nil {
		return res, err
	}
	client, err := stream.NewClient(ctx, nc, stream.ClientConfig{Name: "bench", DefaultDeadline: time.Hour})
	if err != nil {
		return res, err
	}
	if noAnchor {
		if err := dropAnchor(ctx, nc); err != nil {
			return res, err
		}
	}
	fill := newClock(depth)
	tail := depth - depth/10
	var tailStart atomic.Int64
	t0 := time.Now()
	if err := produce(ctx, load{Tasks: depth, Producers: 8}, fill, func(i int) error {
		if i == tail {
			tailStart.Store(int64(time.Since(t0)))
		}
		_, err := client.Submit(ctx, benchTask(i))
		return err
	}); err != nil {
		return res, fmt.Errorf("prefill %d: %w", depth, err)
	}
	elapsed := time.Since(t0)
	res.SubmitRate = float64(depth) / elapsed.Seconds()
	res.TailRate = float64(depth-tail) / (elapsed - time.Duration(tailStart.Load())).Seconds()
	if res.RSSFilled, _, err = procMem(srv.pid()); err != nil {
		return res, err
	}
	res.Disk = dirSize(dir)

	for k, d := range drains {
		var profile string
		if profileDir != "" {
			profile = fmt.Sprintf("%s/server-%d-%d.pprof", profileDir, depth, k)
		}
		p, err := measureDispatch(ctx, client, natsURL, srv.pid(), d, k, probes, rate, noAnchor, pprofAddr, profile)
		if err != nil {
			return res, fmt.Errorf("%s drain: %w", d.name, err)
		}
		res.Phases = append(res.Phases, p)
	}
	res.RSSAfter, res.HWM, err = procMem(srv.pid())
	return res, err
}

// measureDispatch runs one drain against a filled server: an 8-thread worker
// with that drain's lane limit and backlog solve time, and probes
// high-priority tasks (ids h<round>-<i>) submitted at rate. With noAnchor
// set, it deletes the anchor that EnsureTopology puts back.
func measureDispatch(ctx context.Context, client *stream.Client, natsURL string, serverPID int, d drain, round, probes int, rate float64, noAnchor bool, pprofAddr, profile string) (phaseResult, error) {
	res := phaseResult{Drain: d}
	wnc, err := nats.Connect(natsURL, nats.Name("bench-worker"))
	if err != nil {
		return res, err
	}
	defer wnc.Close()
	// A worker never changes existing consumers: set this drain's lane limit
	// (or lift the previous one) the way an operator would.
	var top stream.Topology
	if d.laneLimit > 0 {
		top.LaneLimits = map[stream.Lane]int{stream.LaneFast: d.laneLimit}
	}
	if _, err := adminOf(wnc, top).EnsureTopology(ctx, true); err != nil {
		return res, err
	}
	if noAnchor {
		if err := dropAnchor(ctx, wnc); err != nil {
			return res, err
		}
	}
	probe := newClock(probes)
	var drained atomic.Int64
	tok := json.RawMessage(`"tok"`)
	w, err := stream.NewWorker(ctx, wnc, stream.WorkerConfig{Threads: 8, Name: "bench-worker", ShutdownGrace: time.Second, Topology: top,
		Solver: solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
			u := req.Params["pageurl"]
			if strings.Contains(u, "/high/") {
				probe.started(indexOfURL(u))
				probe.completed()
				return solver.Answer{Solution: tok}, nil
			}
			if d.solve > 0 {
				select {
				case <-ctx.Done():
					return solver.Answer{}, ctx.Err()
				case <-time.After(d.solve):
				}
			}
			drained.Add(1)
			return solver.Answer{Solution: tok}, nil
		})})
	if err != nil {
		return res, err
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	profiled := make(chan error, 1)
	if profile != "" {
		go func() {
			profiled <- fetchProfile(ctx, pprofAddr, profile, time.Duration(float64(probes)/rate*float64(time.Second)))
		}()
	} else {
		profiled <- nil
	}
	serverCPU0, self0 := cpuTime(serverPID), cpuTime(0)
	start := time.Now()
	err = produce(ctx, load{Tasks: probes, Rate: rate}, probe, func(i int) error {
		t := benchTask(i)
		t.ID = "h" + strconv.Itoa(round) + "-" + strconv.Itoa(i)
		t.Priority = "high"
		t.Params["pageurl"] = "https://shop.example/high/" + strconv.Itoa(i)
		_, err := client.Submit(ctx, t)
		return err
	})
	if err == nil {
		await(ctx, load{Timeout: 60 * time.Second}, probe)
	}
	res.Seconds = time.Since(start).Seconds()
	res.Drained = int(drained.Load())
	res.ServerCPU, res.Self = cpuTime(serverPID)-serverCPU0, cpuTime(0)-self0
	cancel()
	<-done
	if err != nil {
		return res, err
	}
	if err := <-profiled; err != nil {
		return res, err
	}
	lat := probe.latencies()
	res.P50, res.P99, res.Mean = percentile(lat, 0.5), percentile(lat, 0.99), mean(lat)
	if len(lat) > 0 {
		res.Max = lat[len(lat)-1]
	}
	return res, nil
}

// dropAnchor deletes the stream's anchor, so that the stream's first
// sequence catches up with the consumers as the backlog at its head is
// worked off (FINDINGS.md, "Scale: dispatch latency").
func dropAnchor(ctx context.Context, nc *nats.Conn) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	s, err := js.Stream(ctx, stream.DefaultStream)
	if err != nil {
		return err
	}
	if err := s.Purge(ctx, jetstream.WithPurgeSubject(wire.SubjectAnchor)); err != nil {
		return fmt.Errorf("delete the anchor: %w", err)
	}
	return nil
}

// rssResult is the worker's memory at rest and at 100 concurrent solves.
type rssResult struct {
	Threads            int
	Idle, Busy, Peak   int64
	Concurrent         int
	BenchSelfRSS       int64
	ReachedConcurrency time.Duration
}

// runWorkerRSS runs a worker subprocess with threads threads against the
// emulator (long solve times, no plan cap), submits threads reCAPTCHA tasks,
// and reads the worker's RSS once all are being solved at once.
func runWorkerRSS(ctx context.Context, threads int) (rssResult, error) {
	res := rssResult{Threads: threads}
	const scale = 0.1 // reCAPTCHA 60 s → 6 s: long enough to hold them all at once
	emu := fakeapi.New(fakeapi.Config{TimeScale: scale, BurstLimit: 100000, Seed: 3,
		SolveTime: map[string]fakeapi.Range{fakeapi.KindRecaptcha: {Min: 60 * time.Second, Max: 60 * time.Second}}})
	emuURL, stopEmu, err := fakeapi.ServeLocal(emu)
	if err != nil {
		return res, err
	}
	defer stopEmu()
	_, connect, stop, err := embedded(true, true)
	if err != nil {
		return res, err
	}
	defer stop()
	nc, err := connect()
	if err != nil {
		return res, err
	}
	defer nc.Close()
	client, err := stream.NewClient(ctx, nc, stream.ClientConfig{Name: "bench"})
	if err != nil {
		return res, err
	}
	wk, err := startChild("worker", "-nats", nc.ConnectedUrl(), "-solver", emuURL,
		"-threads", strconv.Itoa(threads), "-scale", strconv.FormatFloat(scale, 'g', -1, 64))
	if err != nil {
		return res, err
	}
	defer wk.stop()
	if res.Idle, _, err = procMem(wk.pid()); err != nil {
		return res, err
	}
	tasks := make([]stream.Task, threads)
	for i := range tasks {
		tasks[i] = mixedTask(3 * i) // reCAPTCHA v2
		tasks[i].ID = "r" + strconv.Itoa(i)
	}
	t0 := time.Now()
	if _, err := client.SubmitAll(ctx, tasks); err != nil {
		return res, err
	}
	// No event says "all solving": poll the emulator's counter.
	for {
		res.Concurrent = emu.Stats().Concurrent
		if res.Concurrent >= threads || time.Since(t0) > 5*time.Second {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	res.ReachedConcurrency = time.Since(t0)
	res.Busy, res.Peak, err = procMem(wk.pid())
	res.BenchSelfRSS, _, _ = procMem(0)
	return res, err
}
