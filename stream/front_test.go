package stream

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/internal/logbuf"
	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
)

// A front passes every in.php call to the service, which takes the
// captcha and is paid, and answers the worker 504 after waiting for it
// in place of the reply, while the service answers everything else. Each submission may have
// been paid, the trace says so, and each sent once the service answered
// other calls spends the task's attempt, as a lost reply does: the task
// ends dead when its budget is spent, having paid at most three times
// more (the run of 5xx that begins the outage). As an outage it was
// submitted again after every probe, and paid, until its deadline.
func TestGatewayTimeoutsOnInPHPSpendTheAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	api := fakeapi.New(fakeapi.Config{SolveTime: fastSolve(10 * time.Millisecond), BurstLimit: 1 << 20})
	url, stop, err := fakeapi.ServeLocal(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/in.php" {
			api.ServeHTTP(httptest.NewRecorder(), r) // taken, and paid
			time.Sleep(500 * time.Millisecond)       //nolint:forbidigo // the front's wait for the origin is the test's input
			http.Error(w, "<html><body><h1>504 Gateway Time-out</h1></body></html>", http.StatusGatewayTimeout)
			return
		}
		api.ServeHTTP(w, r)
	}))
	require.NoError(t, err)
	t.Cleanup(stop)
	sc, err := solver.NewClient(solver.Config{BaseURL: url, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1,
		Timing: solver.Timing{Scale: 0.001}, StallAfter: 2 * time.Second}) // a call is held from 400 ms on
	require.NoError(t, err)
	const budget = 2
	b.startWorker(t, WorkerConfig{Solver: sc, Threads: 1, Policy: retry.Policy{MaxAttempts: budget,
		InitialInterval: 50 * time.Millisecond, MaxInterval: 200 * time.Millisecond, NoJitter: true,
		CapacityDelay: 50 * time.Millisecond, CapacityMaxDelay: 200 * time.Millisecond}})

	task := turnstileTask("gw504")
	task.Deadline = time.Now().Add(40 * time.Second)
	out, err := b.client.Solve(ctx, task)
	require.Error(t, err)
	require.Equal(t, StatusDead, out.Status, "%+v", out)
	require.Equal(t, string(retry.ReasonAttemptsExhausted), out.Reason, "dead of its attempts, not of its deadline: %+v", out)
	require.Equal(t, budget, out.Attempts, "%+v", out)
	maybe := 0
	for _, ev := range b.events(t, task.ID) {
		if ev.Code == "HTTP_504" {
			require.Contains(t, ev.Detail, "may have been paid", "%+v", ev)
			maybe++
		}
	}
	st := api.Stats()
	t.Logf("1 task: in.php calls %d, accepted (paid) %d, ends told may-be-paid %d", st.InCalls, st.Submitted, maybe)
	require.Equal(t, st.InCalls, st.Submitted, "every call was paid")
	require.Equal(t, st.Submitted, maybe, "each payment is told in the trace")
	require.LessOrEqual(t, st.Submitted, budget+3, "paid past the attempt budget")
}

// A WAF in front of the service answers every call 403 with its own HTML
// page for a while, then lets the calls through: the worker does not stop;
// its tasks wait without spending attempts, its heartbeat names the outage;
// then each is solved on its first attempt and paid once. The service's
// own refusal of the key (its code in the body) still stops it.
func TestFrontForbiddenHoldsTheTasks(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	api := fakeapi.New(fakeapi.Config{SolveTime: fastSolve(10 * time.Millisecond), BurstLimit: 1 << 20})
	var waf atomic.Bool
	waf.Store(true)
	url, stop, err := fakeapi.ServeLocal(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if waf.Load() {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte("<html><head><title>403 Forbidden</title></head><body><center><h1>403 Forbidden</h1></center></body></html>"))
			return
		}
		api.ServeHTTP(w, r)
	}))
	require.NoError(t, err)
	t.Cleanup(stop)
	var logs logbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	sc, err := solver.NewClient(solver.Config{BaseURL: url, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1,
		Timing: solver.Timing{Scale: 0.001}, Logger: log})
	require.NoError(t, err)
	rw := b.startWorker(t, WorkerConfig{Name: "behind-waf", Solver: sc, Threads: 2, Logger: log,
		Policy: retry.Policy{MaxAttempts: 1, CapacityDelay: 20 * time.Millisecond, CapacityMaxDelay: 50 * time.Millisecond}})

	tasks := []Task{turnstileTask("waf1"), turnstileTask("waf2"), recaptchaTask("waf3")}
	receipts, err := b.client.SubmitAll(ctx, tasks)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		for _, tk := range tasks {
			snoozes := 0
			for _, ev := range b.events(t, tk.ID) {
				require.NotEqual(t, EventHandback, ev.Kind, "task %s handed back: the worker stopped: %+v", tk.ID, ev)
				if ev.Kind == EventSnooze {
					require.Equal(t, solver.CodeUnreachable, ev.Code, "%+v", ev)
					require.Zero(t, ev.Attempts, "a snooze for an outage spends no attempt: %+v", ev)
					snoozes++
				}
			}
			if snoozes < 2 {
				return false
			}
		}
		return true
	}, 20*time.Second, 20*time.Millisecond, "the tasks wait through the front's refusal; log:\n%s", logs.String())
	require.Contains(t, logs.String(), `level=WARN msg="the solving service does not answer`)
	require.Contains(t, logs.String(), "HTTP 403")
	require.Eventually(t, func() bool {
		ws, err := b.client.Workers(ctx)
		require.NoError(t, err)
		for _, w := range ws {
			if w.Name == "behind-waf" && strings.Contains(w.ServiceDown, "HTTP 403") && !w.ServiceDownSince.IsZero() {
				return true
			}
		}
		return false
	}, 20*time.Second, 50*time.Millisecond, "the heartbeat names the outage")
	select {
	case err := <-rw.done:
		t.Fatalf("the worker stopped: %v", err)
	default:
	}

	waf.Store(false)
	solved := 0
	require.NoError(t, b.client.WaitAll(ctx, receipts, func(o Outcome, err error) {
		require.NoError(t, err, "task %s: %+v", o.ID, o)
		require.Equal(t, StatusSolved, o.Status)
		require.Equal(t, 1, o.Attempts, "task %s: the front's refusal spent no attempt", o.ID)
		solved++
	}))
	require.Equal(t, len(tasks), solved)
	require.Equal(t, len(tasks), api.Stats().Submitted, "each task paid once")
}
