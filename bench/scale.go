package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
)

// child is a subprocess of this program (serve or worker).
type child struct {
	cmd  *exec.Cmd
	line string // the first line it printed
}

// startChild runs this program with args and waits for its first line of
// output (serve prints its URL, worker prints "ready").
func startChild(args ...string) (*child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", args[0], err)
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		for sc.Scan() {
		}
	}()
	select {
	case l, ok := <-lines:
		if !ok {
			_ = cmd.Wait()
			return nil, fmt.Errorf("%s exited before it was ready", args[0])
		}
		return &child{cmd: cmd, line: l}, nil
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("%s not ready within 30s", args[0])
	}
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// stop interrupts the child and waits for it, killing it after 10 s.
func (c *child) stop() {
	_ = c.cmd.Process.Signal(syscall.SIGINT)
	done := make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
	}
}

// serveMain is the serve subcommand: an embedded nats-server on 127.0.0.1
// (LazySync) with its store in dir; prints its URL, runs until interrupted.
func serveMain(ctx context.Context, dir string, lazy bool) error {
	ns, err := stream.StartServer(stream.ServerConfig{StoreDir: dir, LazySync: lazy, Listen: true})
	if err != nil {
		return err
	}
	fmt.Println(ns.ClientURL())
	<-ctx.Done()
	ns.Shutdown()
	ns.WaitForShutdown()
	return nil
}

// workerMain is the worker subcommand: a captchaq worker with threads
// threads solving through the solving service at solverURL.
func workerMain(ctx context.Context, natsURL, solverURL string, threads int, scale float64) error {
	nc, err := nats.Connect(natsURL, nats.Name("bench-rss-worker"))
	if err != nil {
		return err
	}
	defer nc.Close()
	sc, err := solver.NewClient(solver.Config{BaseURL: solverURL, APIKey: fakeapi.TestKey, Timing: solver.Timing{Scale: scale},
		MinSubmitInterval: time.Millisecond, SubmitBurst: -1})
	if err != nil {
		return err
	}
	w, err := stream.NewWorker(ctx, nc, stream.WorkerConfig{Solver: sc, Threads: threads, Name: "bench-rss-worker", ShutdownGrace: time.Millisecond})
	if err != nil {
		return err
	}
	fmt.Println("ready")
	return w.Run(ctx)
}

// depthResult is one queue depth of the scale run.
type depthResult struct {
	Depth        int
	SubmitRate   float64 // whole prefill
	TailRate     float64 // the last 10 % of the prefill
	RSSFilled    int64   // server, after the prefill
	RSSAfter     int64   // server, after the dispatch measurement
	HWM          int64
	P50, P99     time.Duration // submit → start of high-priority tasks
	Mean         time.Duration
	Drained      int // normal tasks solved meanwhile
	DrainSeconds float64
	Disk         int64
}

// runDepth fills a fresh server (a subprocess) with depth normal-priority
// tasks, then starts an 8-thread no-op worker and submits high-priority tasks
// at a steady rate, measuring how long each waits to be dispatched.
func runDepth(ctx context.Context, depth, probes int, rate float64) (depthResult, error) {
	res := depthResult{Depth: depth}
	dir, err := os.MkdirTemp("", "captchaq-bench-scale-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	srv, err := startChild("serve", "-store", dir)
	if err != nil {
		return res, err
	}
	defer srv.stop()
	nc, err := nats.Connect(srv.line, nats.Name("bench-producer"))
	if err != nil {
		return res, err
	}
	defer nc.Close()
	client, err := stream.NewClient(ctx, nc, stream.ClientConfig{Name: "bench", DefaultDeadline: time.Hour})
	if err != nil {
		return res, err
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

	probe := newClock(probes)
	var drained atomic.Int64
	wnc, err := nats.Connect(srv.line, nats.Name("bench-worker"))
	if err != nil {
		return res, err
	}
	defer wnc.Close()
	tok := json.RawMessage(`"tok"`)
	w, err := stream.NewWorker(ctx, wnc, stream.WorkerConfig{Threads: 8, Name: "bench-worker", ShutdownGrace: time.Second,
		Solver: solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
			u := req.Params["pageurl"]
			if strings.Contains(u, "/high/") {
				probe.started(indexOfURL(u))
				probe.completed()
			} else {
				drained.Add(1)
			}
			return solver.Answer{Solution: tok}, nil
		})})
	if err != nil {
		return res, err
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	start := time.Now()
	err = produce(ctx, load{Tasks: probes, Rate: rate}, probe, func(i int) error {
		t := benchTask(i)
		t.ID = "h" + strconv.Itoa(i)
		t.Priority = "high"
		t.Params["pageurl"] = "https://shop.example/high/" + strconv.Itoa(i)
		_, err := client.Submit(ctx, t)
		return err
	})
	if err == nil {
		await(ctx, load{Timeout: 60 * time.Second}, probe)
	}
	res.DrainSeconds = time.Since(start).Seconds()
	cancel()
	<-done
	if err != nil {
		return res, err
	}
	res.Drained = int(drained.Load())
	lat := probe.latencies()
	res.P50, res.P99, res.Mean = percentile(lat, 0.5), percentile(lat, 0.99), mean(lat)
	res.RSSAfter, res.HWM, err = procMem(srv.pid())
	return res, err
}

func dirSize(dir string) int64 {
	var n int64
	_ = walk(dir, func(size int64) { n += size })
	return n
}

func walk(dir string, f func(int64)) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			_ = walk(dir+"/"+e.Name(), f)
			continue
		}
		if info, err := e.Info(); err == nil {
			f(info.Size())
		}
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return res, err
	}
	hs := &http.Server{Handler: emu, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()
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
	wk, err := startChild("worker", "-nats", nc.ConnectedUrl(), "-solver", "http://"+ln.Addr().String(),
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
