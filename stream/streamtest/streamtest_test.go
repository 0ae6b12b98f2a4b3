package streamtest_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/streamtest"
)

func turnstile(id, page string) stream.Task {
	return stream.Task{ID: id, Method: "turnstile", Params: stream.Params{"sitekey": "0x4AAAAAAAB", "pageurl": page}}
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// The whole integration test of a producer: three lines.
func TestStreamtestSolve(t *testing.T) {
	t.Parallel()
	env := streamtest.Start(t)
	out, err := env.Client.Solve(t.Context(), turnstile("order-1", "https://shop.example/checkout"))
	require.NoError(t, err)

	require.Equal(t, stream.StatusSolved, out.Status)
	require.Equal(t, 1, out.Attempts)
	require.NotEmpty(t, out.Text())
	require.NotEmpty(t, out.UserAgent, "the emulator's Turnstile answers carry a user agent")
}

func TestStreamtestTenTasks(t *testing.T) {
	t.Parallel()
	start := time.Now()
	env := streamtest.Start(t)
	ctx := testContext(t)
	tasks := make([]stream.Task, 10)
	for i := range tasks {
		tasks[i] = turnstile(fmt.Sprintf("t%02d", i), "https://shop.example/cart")
	}
	rs, err := env.Client.SubmitAll(ctx, tasks)
	require.NoError(t, err)
	solved := 0
	require.NoError(t, env.Client.WaitAll(ctx, rs, func(o stream.Outcome, err error) {
		require.NoError(t, err)
		solved++
	}))
	require.Equal(t, 10, solved)
	require.Equal(t, 10, env.Emulator.Stats().Solved)
	t.Logf("10 tasks, start to last outcome: %s", time.Since(start))
}

func TestStreamtestUnsolvableExhaustsAttempts(t *testing.T) {
	t.Parallel()
	env := streamtest.Start(t, streamtest.WithFaults(fakeapi.Faults{Unsolvable: 1}), streamtest.WithMaxAttempts(2))
	ctx := testContext(t)

	out, err := env.Client.Solve(ctx, turnstile("u1", "https://shop.example/"))
	require.ErrorIs(t, err, stream.ErrNotSolved)
	require.Equal(t, stream.StatusDead, out.Status)
	require.Equal(t, string(retry.ReasonAttemptsExhausted), out.Reason)
	require.Equal(t, "ERROR_CAPTCHA_UNSOLVABLE", out.Error)
	require.Equal(t, 2, out.Attempts)

	dead, err := env.Client.DeadLetters(ctx, stream.DeadFilter{})
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, "u1", dead[0].ID)
}

func TestStreamtestPermanentErrorThenReplay(t *testing.T) {
	t.Parallel()
	env := streamtest.Start(t, streamtest.WithFaults(fakeapi.Faults{Rules: []fakeapi.Rule{
		{Param: "pageurl", Contains: "bad.example", Code: "ERROR_PAGEURL"}}}))
	ctx := testContext(t)

	out, err := env.Client.Solve(ctx, turnstile("p1", "https://bad.example/"))
	require.ErrorIs(t, err, stream.ErrNotSolved)
	require.Equal(t, string(retry.ReasonPermanent), out.Reason)
	require.Equal(t, "ERROR_PAGEURL", out.Error)
	require.Equal(t, 1, out.Attempts, "a permanent error spends no further attempts")

	_, err = env.Client.Solve(ctx, turnstile("p2", "https://good.example/"))
	require.NoError(t, err, "the rule hits only matching tasks")

	env.Emulator.SetFaults(fakeapi.Faults{})
	_, err = env.Client.Replay(ctx, "p1")
	require.NoError(t, err)
	out, err = env.Client.Wait(ctx, "p1")
	require.NoError(t, err)
	require.Equal(t, stream.StatusSolved, out.Status)
}

// An outage of the solving service (every call answered HTTP 500) spends
// no attempt, however small the budget: the task waits it out and is
// solved once the service is back, on its first attempt, paid once.
func TestStreamtestHTTP500Outage(t *testing.T) {
	t.Parallel()
	env := streamtest.Start(t, streamtest.WithFaults(fakeapi.Faults{Outage: true}), streamtest.WithMaxAttempts(2))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	r, err := env.Client.Submit(ctx, turnstile("o1", "https://shop.example/"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return env.Emulator.Stats().Codes[fakeapi.CodeHTTP500] >= 3 },
		20*time.Second, 10*time.Millisecond, "the submissions meet the outage")
	env.Emulator.SetFaults(fakeapi.Faults{})
	out, err := env.Client.Wait(ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, stream.StatusSolved, out.Status)
	require.Equal(t, 1, out.Attempts, "the outage spent no attempt: %+v", out)
	require.Equal(t, 1, env.Emulator.Stats().Submitted, "paid once")
}

func TestStreamtestTokenLifetime(t *testing.T) {
	t.Parallel()
	env := streamtest.Start(t, streamtest.WithTokenLifetime(time.Nanosecond))
	out, err := env.Client.Solve(testContext(t), turnstile("e1", "https://shop.example/"))
	require.ErrorIs(t, err, stream.ErrTokenExpired)
	require.Equal(t, stream.StatusSolved, out.Status)
	require.Empty(t, out.Solution, "an expired token is never handed out")
}

func TestStreamtestAdvanceExpiresTokens(t *testing.T) {
	t.Parallel()
	env := streamtest.Start(t)
	ctx := testContext(t)
	out, err := env.Client.Solve(ctx, turnstile("a1", "https://shop.example/"))
	require.NoError(t, err)
	require.NotEmpty(t, out.Solution)

	env.Advance(out.ExpiresAt.Sub(env.Now()) + time.Second)
	_, err = env.Client.Wait(ctx, "a1")
	require.ErrorIs(t, err, stream.ErrTokenExpired)
}

func TestStreamtestPlanThreads(t *testing.T) {
	t.Parallel()
	env := streamtest.Start(t, streamtest.WithPlanThreads(1), streamtest.WithThreads(4),
		streamtest.WithSolveTime(2*time.Millisecond, 4*time.Millisecond))
	ctx := testContext(t)
	tasks := make([]stream.Task, 6)
	for i := range tasks {
		tasks[i] = turnstile(fmt.Sprintf("c%d", i), "https://shop.example/")
	}
	rs, err := env.Client.SubmitAll(ctx, tasks)
	require.NoError(t, err)
	require.NoError(t, env.Client.WaitAll(ctx, rs, func(o stream.Outcome, err error) {
		require.NoError(t, err)
		require.Equal(t, 1, o.Attempts, "no free thread at the service spends no attempt")
	}))
	st := env.Emulator.Stats()
	require.Equal(t, 1, st.MaxConcurrent)
	require.Zero(t, st.Codes["ERROR_ZERO_BALANCE"], "the plan quota keeps the workers within the plan")
}

func TestStreamtestOwnWorker(t *testing.T) {
	t.Parallel()
	env := streamtest.Start(t, streamtest.WithWorkers(0))
	var solved atomic.Int32
	observed := make(chan struct{}, 1)
	cfg := env.WorkerConfig()
	cfg.Name = "my-worker"
	cfg.Observer = stream.ObserverFunc(func(o stream.Observation) {
		if o.Kind == stream.EventSolved {
			solved.Add(1)
			select {
			case observed <- struct{}{}:
			default:
			}
		}
	})
	env.StartWorker(cfg)

	ctx := testContext(t)
	_, err := env.Client.Solve(ctx, turnstile("w1", "https://shop.example/"))
	require.NoError(t, err)
	// The worker tells its Observer once the outcome is stored, which is
	// when Solve may already return: wait for the observation.
	select {
	case <-observed:
	case <-ctx.Done():
		t.Fatal("the worker's Observer never saw the solve")
	}
	require.EqualValues(t, 1, solved.Load())
	trace, err := env.Client.Trace(testContext(t), "w1")
	require.NoError(t, err)
	var workers []string
	for _, e := range trace {
		if e.Worker != "" {
			workers = append(workers, e.Worker)
		}
	}
	require.Contains(t, workers, "my-worker")
}

func TestStreamtestListen(t *testing.T) {
	t.Parallel()
	env := streamtest.Start(t, streamtest.WithListen())
	require.True(t, strings.HasPrefix(env.URL(), "nats://127.0.0.1:"), env.URL())

	nc, err := nats.Connect(env.URL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	ctx := testContext(t)
	c, err := stream.NewClient(ctx, nc, stream.ClientConfig{Topology: env.Topology})
	require.NoError(t, err)
	_, err = c.Solve(ctx, turnstile("l1", "https://shop.example/"))
	require.NoError(t, err)
}

// TestExamples runs the tests of example_test.go, written as a user's module
// would have them.
func TestExamples(t *testing.T) {
	t.Parallel()
	for name, fn := range map[string]func(*testing.T){
		"PayOrder":             testPayOrder,
		"PayOrderCaptchaFails": testPayOrderCaptchaFails,
		"PayOrderTokenExpires": testPayOrderTokenExpires,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t)
		})
	}
}
