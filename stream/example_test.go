package stream_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/http/httptest"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/broker"
)

// Submit a task and wait for its outcome. Everything runs in this process: an
// embedded JetStream server, the emulator of the solving service (1000× the
// real speed), one worker pool and a producer. In production the producer
// connects to your NATS server and the workers run elsewhere (captchaq
// worker), with a real API key.
func Example() {
	ctx := context.Background()

	// An embedded nats-server with JetStream, reachable in-process only.
	ns, err := broker.Start(broker.Config{}) // in-process, temporary store
	if err != nil {
		log.Fatal(err)
	}
	defer ns.Shutdown()
	nc, err := nats.Connect("", nats.InProcessServer(ns)) // production: nats.Connect("nats://…")
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()

	// The solving service: here its emulator; production:
	// solver.Config{APIKey: os.Getenv("CAPTCHAAI_API_KEY")}.
	api := httptest.NewServer(fakeapi.New(fakeapi.Config{TimeScale: 0.001}))
	defer api.Close()
	// The admin's part (`captchaq init`): the stream and the workers'
	// consumers. Producers and workers only find them.
	js, err := stream.JetStream(nc, "")
	if err != nil {
		log.Fatal(err)
	}
	if _, err := stream.EnsureTopology(ctx, js, stream.Topology{}, true); err != nil {
		log.Fatal(err)
	}

	sc, err := solver.NewClient(solver.Config{BaseURL: api.URL, APIKey: fakeapi.TestKey,
		Timing: solver.Timing{Scale: 0.001}})
	if err != nil {
		log.Fatal(err)
	}

	// A worker pool, running until the example ends.
	w, err := stream.NewWorker(ctx, nc, stream.WorkerConfig{Solver: sc, Threads: 4})
	if err != nil {
		log.Fatal(err)
	}
	wctx, stopWorker := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(wctx) }()
	defer func() { stopWorker(); <-stopped }()

	// The producer: submit, then wait.
	client, err := stream.NewClient(ctx, nc, stream.ClientConfig{Name: "example-shop"})
	if err != nil {
		log.Fatal(err)
	}
	r, err := client.Submit(ctx, stream.Task{ID: "order-1001", Method: "turnstile",
		Params: stream.Params{"sitekey": "0x4AAAAAAAB", "pageurl": "https://shop.example/checkout"}})
	if err != nil {
		log.Fatal(err)
	}
	out, err := client.Wait(ctx, r.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(out.ID, out.Status, "after", out.Attempts, "attempt")
	fmt.Println("token:", out.Text() != "", "usable until:", out.ExpiresAt.After(time.Now()))
	// Output:
	// order-1001 solved after 1 attempt
	// token: true usable until: true
}

// Solve in a checkout flow: the request's deadline becomes the task's, and
// each way it can end is a sentinel error to branch on.
func ExampleClient_Solve() {
	ctx := context.Background()
	ns, err := broker.Start(broker.Config{}) // in-process, temporary store
	if err != nil {
		log.Fatal(err)
	}
	defer ns.Shutdown()
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	api := httptest.NewServer(fakeapi.New(fakeapi.Config{TimeScale: 0.001}))
	defer api.Close()
	if js, err := stream.JetStream(nc, ""); err != nil {
		log.Fatal(err)
	} else if _, err := stream.EnsureTopology(ctx, js, stream.Topology{}, true); err != nil {
		log.Fatal(err) // as `captchaq init`
	}
	sc, err := solver.NewClient(solver.Config{BaseURL: api.URL, APIKey: fakeapi.TestKey,
		Timing: solver.Timing{Scale: 0.001}})
	if err != nil {
		log.Fatal(err)
	}
	w, err := stream.NewWorker(ctx, nc, stream.WorkerConfig{Solver: sc})
	if err != nil {
		log.Fatal(err)
	}
	wctx, stopWorker := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(wctx) }()
	defer func() { stopWorker(); <-stopped }()
	client, err := stream.NewClient(ctx, nc, stream.ClientConfig{Name: "checkout"})
	if err != nil {
		log.Fatal(err)
	}

	// The checkout handler: the customer waits at most 30 seconds.
	checkout := func(ctx context.Context, orderID string) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		out, err := client.Solve(ctx, stream.Task{ID: orderID, Method: "userrecaptcha", Priority: "high",
			Params: stream.Params{"googlekey": "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-", "pageurl": "https://shop.example/pay"}})
		switch {
		case errors.Is(err, stream.ErrNotSolved):
			return "", fmt.Errorf("captcha failed (%s, %s): ask the customer to retry", out.Reason, out.Error)
		case errors.Is(err, stream.ErrTokenExpired):
			return "", errors.New("the token expired before we used it: solve again")
		case errors.Is(err, context.DeadlineExceeded):
			return "", errors.New("too slow: the task stays queued, its deadline makes it expire")
		case err != nil:
			return "", err
		}
		return out.Text(), nil // post it with the payment form
	}

	token, err := checkout(ctx, "order-1002")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("paid with a token:", token != "")
	// Output: paid with a token: true
}

// Run workers inside your own service: your slog.Logger, your shutdown
// signal, and in-flight solves finished (or handed back to other workers)
// before Run returns.
func ExampleWorker_Run() {
	// Your service's logger. Here: text on stdout with a few fields, so that
	// the example's output is stable.
	keep := map[string]bool{slog.LevelKey: true, slog.MessageKey: true, "task_id": true, "attempts": true}
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if !keep[a.Key] {
				return slog.Attr{}
			}
			return a
		}}))

	// In a service: ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	ns, err := broker.Start(broker.Config{}) // in-process, temporary store
	if err != nil {
		log.Fatal(err)
	}
	defer ns.Shutdown()
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	api := httptest.NewServer(fakeapi.New(fakeapi.Config{TimeScale: 0.001}))
	defer api.Close()
	if js, err := stream.JetStream(nc, ""); err != nil {
		log.Fatal(err)
	} else if _, err := stream.EnsureTopology(ctx, js, stream.Topology{}, true); err != nil {
		log.Fatal(err) // as `captchaq init`
	}
	sc, err := solver.NewClient(solver.Config{BaseURL: api.URL, APIKey: fakeapi.TestKey,
		Timing: solver.Timing{Scale: 0.001}})
	if err != nil {
		log.Fatal(err)
	}

	w, err := stream.NewWorker(ctx, nc, stream.WorkerConfig{
		Solver:        sc,
		Threads:       15, // the plan's threads this process may use
		Logger:        logger,
		ShutdownGrace: 20 * time.Second, // within your orchestrator's kill timeout
	})
	if err != nil {
		log.Fatal(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(ctx) }()

	// Some producer submits a task.
	client, err := stream.NewClient(context.Background(), nc, stream.ClientConfig{})
	if err != nil {
		log.Fatal(err)
	}
	r, err := client.Submit(context.Background(), stream.Task{ID: "order-1003", Method: "turnstile",
		Params: stream.Params{"sitekey": "0x4AAAAAAAB", "pageurl": "https://shop.example/checkout"}})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := client.Wait(context.Background(), r.ID); err != nil {
		log.Fatal(err)
	}

	stop() // SIGTERM
	fmt.Println("worker stopped:", <-stopped)
	// Output:
	// level=INFO msg=solved task_id=order-1003 attempts=1
	// worker stopped: <nil>
}

// List dead letters, and replay them once the cause is gone: here an outage
// of the solving service that outlasted the attempt budget.
func ExampleClient_DeadLetters() {
	ctx := context.Background()
	ns, err := broker.Start(broker.Config{}) // in-process, temporary store
	if err != nil {
		log.Fatal(err)
	}
	defer ns.Shutdown()
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	emulator := fakeapi.New(fakeapi.Config{TimeScale: 0.001, Faults: fakeapi.Faults{Outage: true}})
	api := httptest.NewServer(emulator)
	defer api.Close()
	if js, err := stream.JetStream(nc, ""); err != nil {
		log.Fatal(err)
	} else if _, err := stream.EnsureTopology(ctx, js, stream.Topology{}, true); err != nil {
		log.Fatal(err) // as `captchaq init`
	}
	sc, err := solver.NewClient(solver.Config{BaseURL: api.URL, APIKey: fakeapi.TestKey,
		Timing: solver.Timing{Scale: 0.001}})
	if err != nil {
		log.Fatal(err)
	}
	w, err := stream.NewWorker(ctx, nc, stream.WorkerConfig{Solver: sc,
		// Two attempts, 10 ms apart: the example's outage is over quickly.
		Policy:    retry.Policy{MaxAttempts: 2, InitialInterval: 10 * time.Millisecond, NoJitter: true},
		IdleCheck: 10 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	wctx, stopWorker := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(wctx) }()
	defer func() { stopWorker(); <-stopped }()
	client, err := stream.NewClient(ctx, nc, stream.ClientConfig{})
	if err != nil {
		log.Fatal(err)
	}

	// During the outage, the task ends in the dead letter.
	_, err = client.Solve(ctx, stream.Task{ID: "order-1004", Method: "turnstile",
		Params: stream.Params{"sitekey": "0x4AAAAAAAB", "pageurl": "https://shop.example/checkout"}})
	fmt.Println("solve:", errors.Is(err, stream.ErrNotSolved))

	dead, err := client.DeadLetters(ctx, stream.DeadFilter{Pending: true})
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range dead {
		fmt.Println("dead:", d.ID, d.Reason, d.Error, d.Attempts, "attempts", d.Host)
	}

	// The service is back: replay every pending letter, with a fresh budget.
	emulator.SetFaults(fakeapi.Faults{})
	receipts, err := client.ReplayAll(ctx, stream.DeadFilter{Reason: retry.ReasonAttemptsExhausted})
	if err != nil {
		log.Fatal(err)
	}
	err = client.WaitAll(ctx, receipts, func(out stream.Outcome, err error) {
		fmt.Println("replayed:", out.ID, out.Status, err)
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// solve: true
	// dead: order-1004 attempts-exhausted HTTP_500 2 attempts shop.example
	// replayed: order-1004 solved <nil>
}
