package stream_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/streamtest"
)

// Submit a task and wait for its outcome. Everything runs in this process
// (streamtest: an embedded JetStream server, the emulator of the solving
// service, a worker pool and a producer). In production the producer
// connects to your NATS server (stream.NewClient on nats.Connect("nats://…")),
// an admin creates the stream once (`captchaq init`), and the workers run
// elsewhere (`captchaq worker`, or stream.NewWorker) with a real API key.
func Example() {
	env, stop := example()
	defer stop()
	ctx := context.Background()

	r, err := env.Client.Submit(ctx, stream.Task{ID: "order-1001", Method: "turnstile",
		Params: stream.Params{"sitekey": "0x4AAAAAAAB", "pageurl": "https://shop.example/checkout"}})
	if err != nil {
		log.Fatal(err)
	}
	out, err := env.Client.Wait(ctx, r.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(out.ID, out.Status, "after", out.Attempts, "attempt")
	fmt.Println("token:", out.Text() != "", "usable until:", out.ExpiresAt.After(env.Now()))
	// Output:
	// order-1001 solved after 1 attempt
	// token: true usable until: true
}

// Solve in a checkout flow: the request's deadline becomes the task's, and
// each way it can end is a sentinel error to branch on.
func ExampleClient_Solve() {
	env, stop := example()
	defer stop()

	// The checkout handler: the customer waits at most 30 seconds.
	checkout := func(ctx context.Context, orderID string) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		out, err := env.Client.Solve(ctx, stream.Task{ID: orderID, Method: "userrecaptcha", Priority: stream.PriorityHigh,
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

	token, err := checkout(context.Background(), "order-1002")
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
	env, stop := example(streamtest.WithWorkers(0)) // this example runs its own
	defer stop()

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
	ctx, sigterm := context.WithCancel(context.Background())
	defer sigterm()

	cfg := env.WorkerConfig() // production: stream.WorkerConfig{Solver: your solver.Client}
	cfg.Threads = 15          // the plan's threads this process may use
	cfg.Logger = logger
	cfg.ShutdownGrace = 20 * time.Second // within your orchestrator's kill timeout
	w, err := stream.NewWorker(ctx, env.Connect(), cfg)
	if err != nil {
		log.Fatal(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(ctx) }()

	// Some producer submits a task.
	r, err := env.Client.Submit(context.Background(), stream.Task{ID: "order-1003", Method: "turnstile",
		Params: stream.Params{"sitekey": "0x4AAAAAAAB", "pageurl": "https://shop.example/checkout"}})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := env.Client.Wait(context.Background(), r.ID); err != nil {
		log.Fatal(err)
	}

	sigterm()
	fmt.Println("worker stopped:", <-stopped)
	// Output:
	// level=INFO msg=solved task_id=order-1003 attempts=1
	// worker stopped: <nil>
}

// List dead letters, and replay them once the cause is gone: here a front
// before the solving service that answered every submission with an HTML
// page, past the attempt budget. (An outage, every call refused or
// answered with a 5xx, spends no attempt: tasks wait it out.) Replaying is
// the admin's (here the in-process server has no users: every connection
// may).
func ExampleAdmin_ReplayAll() {
	env, stop := example(streamtest.WithFaults(fakeapi.Faults{HTML: 1}), streamtest.WithMaxAttempts(2))
	defer stop()
	ctx := context.Background()
	client := env.Client
	admin, err := stream.NewAdmin(env.Conn, stream.AdminConfig{Topology: env.Topology, Name: "operator"})
	if err != nil {
		log.Fatal(err)
	}

	// Past the attempt budget, the task ends in the dead letter.
	_, err = client.Solve(ctx, stream.Task{ID: "order-1004", Method: "turnstile",
		Params: stream.Params{"sitekey": "0x4AAAAAAAB", "pageurl": "https://shop.example/checkout"}})
	fmt.Println("solve:", errors.Is(err, stream.ErrNotSolved))

	dead, err := admin.DeadLetters(ctx, stream.DeadFilter{Pending: true})
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range dead {
		fmt.Println("dead:", d.ID, d.Reason, d.Error, d.Attempts, "attempts", d.Host)
	}

	// The front is fixed: replay every pending letter, with a fresh budget.
	env.Emulator.SetFaults(fakeapi.Faults{})
	receipts, err := admin.ReplayAll(ctx, stream.DeadFilter{Reason: retry.ReasonAttemptsExhausted})
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
	// dead: order-1004 attempts-exhausted BAD_REPLY 2 attempts shop.example
	// replayed: order-1004 solved <nil>
}

// example starts a whole captchaq in this process for an example, as
// streamtest.Start does for a test, and returns it with the function that
// stops it.
func example(opts ...streamtest.Option) (*streamtest.Env, func()) {
	tb := &exampleTB{}
	return streamtest.Start(tb, opts...), tb.stop
}

// exampleTB stands in for a test's testing.TB where an example has none:
// streamtest calls only the methods below (the embedded TB is nil), a
// failure ends the example, and stop runs what Cleanup registered.
type exampleTB struct {
	testing.TB
	cleanups []func()
	dirs     []string
}

func (e *exampleTB) Helper()                   {}
func (e *exampleTB) Fatal(args ...any)         { log.Fatal(args...) }
func (e *exampleTB) Fatalf(f string, a ...any) { log.Fatalf(f, a...) }
func (e *exampleTB) Logf(f string, a ...any)   { log.Printf(f, a...) }
func (e *exampleTB) Cleanup(f func())          { e.cleanups = append(e.cleanups, f) }

func (e *exampleTB) TempDir() string {
	dir, err := os.MkdirTemp("", "captchaq-example-")
	if err != nil {
		log.Fatal(err)
	}
	e.dirs = append(e.dirs, dir)
	return dir
}

func (e *exampleTB) stop() {
	for _, f := range slices.Backward(e.cleanups) {
		f()
	}
	for _, dir := range e.dirs {
		_ = os.RemoveAll(dir)
	}
}
