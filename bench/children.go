package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	httppprof "net/http/pprof"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/captchaq/captchaq/internal/storestatus"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/broker"
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
// (LazySync) with its store in dir, encrypted at rest with key (none:
// plaintext), answering the store's status as `captchaq server` does, so
// workers know whether a finished task's message needs a rewrite of its
// block; prints its URL, runs until interrupted.
// With pprofAddr set it also serves net/http/pprof there and prints the
// address it got after the URL, on the same line.
func serveMain(ctx context.Context, dir string, lazy bool, key, pprofAddr string) error {
	ns, err := broker.Start(broker.Config{StoreDir: dir, LazySync: lazy, Listen: true, StoreKey: key})
	if err != nil {
		return err
	}
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	snc, err := nats.Connect(ns.ClientURL(), nats.Name("bench-store-status"))
	if err != nil {
		return err
	}
	defer snc.Close()
	stopStatus, err := storestatus.Serve(ns, snc, broker.GuardConfig{})
	if err != nil {
		return err
	}
	defer stopStatus()
	line := ns.ClientURL()
	if pprofAddr != "" {
		ln, err := net.Listen("tcp", pprofAddr)
		if err != nil {
			return err
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", httppprof.Index)
		mux.HandleFunc("/debug/pprof/profile", httppprof.Profile)
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = hs.Serve(ln) }()
		defer hs.Close()
		line += " " + ln.Addr().String()
	}
	fmt.Println(line)
	<-ctx.Done()
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
