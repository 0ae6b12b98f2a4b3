package provider_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/internal/dialect/classic"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/solver/provider"
	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/streamtest"
)

// TestBreakJSONFundsRunOutMidBurst: a per-solve primary of the JSON
// dialect (the emulator's, 2captcha's profile) runs out of money after 10
// solves of a burst of 40 tasks: once its createTask answers
// ERROR_ZERO_BALANCE (no money in the JSON dialect: anti-captcha.com/
// apidoc/errors, "Account has zero or negative balance") the rest goes
// to the classic fallback; every task is paid once, on one provider, and
// stats' spend is each bill to the cent.
func TestBreakJSONFundsRunOutMidBurst(t *testing.T) {
	t.Parallel()
	api, url := jsonEmulator(t, fakeapi.Config{Service: fakeapi.Service2Captcha, BurstLimit: 1 << 20})
	c := tasksClient(t, url, fakeapi.TestKey)
	primary := service{api: api, member: provider.Member{Client: c, Entry: provider.Entry{Name: "json", Dialect: provider.Tasks,
		BaseURL: url, KeyEnv: "K", Methods: []string{"userrecaptcha", "base64"}, Billing: spareBilling, Role: provider.Primary}}}
	spare := perSolve(t, "spare", provider.Fallback, 2, 5*time.Millisecond)
	set, err := provider.New(provider.Config{Members: []provider.Member{primary.member, spare.member}})
	require.NoError(t, err)
	env := streamtest.Start(t, streamtest.WithWorkers(0))
	env.StartWorker(stream.WorkerConfig{Solver: set, Threads: threads})

	ids := submit(t, env.Client, "crawler", 0, 40)
	require.Eventually(t, func() bool { return api.Stats().Submitted >= 10 }, 30*time.Second, time.Millisecond)
	api.SetFaults(fakeapi.Faults{Rules: []fakeapi.Rule{{Code: classic.CodeZeroBalance}}})
	outs := waitAll(t, env.Client, ids)
	requireBilledOnce(t, env, outs, primary, spare)
	require.Positive(t, spare.api.Stats().Submitted, "the fallback took the rest")
	require.Positive(t, api.Stats().Codes[classic.CodeZeroBalance])
	require.LessOrEqual(t, api.Stats().Codes[classic.CodeZeroBalance], threads, "passed over, not asked once a task")
}

// TestBreakJSONTaskIDReused: a JSON provider (the emulator's JSON dialect,
// fakeapi's ReuseID) answers a new createTask with the taskId of a task
// another submission polls: the second task is not handed the first's
// answer (REUSED_CAPTCHA_ID, transient, not sent on to the fallback, which
// would pay again), and the first keeps its own.
func TestBreakJSONTaskIDReused(t *testing.T) {
	t.Parallel()
	solve := map[string]fakeapi.Range{}
	// The first task's captcha is solved in 2 s: it is still polled when
	// the second submission is answered with its id. At 200 ms, a loaded
	// machine (CI's preview) answered the second after the first had
	// ended and let go of the id: nothing polled it, and the second took
	// the first's answer as its own, which no client can tell. Its client
	// polls at timing × 0.01 (every 50 ms): 2 s is some 50 calls, within
	// the 120 a task is asked (provider.MaxTaskCalls), where × 0.001
	// would give the first task up after 0.6 s.
	for _, k := range solver.Kinds() {
		solve[k] = fakeapi.Range{Min: 2 * time.Second, Max: 2 * time.Second}
	}
	api := fakeapi.New(fakeapi.Config{SolveTime: solve, Price: spareBilling.Per1000, Seed: 3, BurstLimit: 1 << 20, Service: fakeapi.Service2Captcha})
	url, stop, err := fakeapi.ServeLocal(api)
	require.NoError(t, err)
	t.Cleanup(stop)
	c, err := provider.NewTasksClient(provider.TasksConfig{BaseURL: url, APIKey: fakeapi.TestKey, Scale: 0.01})
	require.NoError(t, err)
	jp := provider.Member{Client: c, Entry: provider.Entry{Name: "json", Dialect: provider.Tasks,
		BaseURL: url, KeyEnv: "K", Methods: []string{"userrecaptcha", "base64"}, Billing: spareBilling, Role: provider.Primary}}
	spare := perSolve(t, "spare", provider.Fallback, 2, 5*time.Millisecond)
	set, err := provider.New(provider.Config{Members: []provider.Member{jp, spare.member}})
	require.NoError(t, err)

	type result struct {
		ans solver.Answer
		err error
	}
	first := make(chan result, 1)
	go func() {
		ans, err := set.Solve(t.Context(), solver.Request{Method: "userrecaptcha", Params: taskParams(1)})
		first <- result{ans, err}
	}()
	// The first task's first getTaskResult comes after its claim of the
	// id: a test that waited only for the emulator's accept could send the
	// second createTask before the first's reply was read, and the second
	// claimed the id first.
	require.Eventually(t, func() bool { return api.Stats().MaxResCallsPerCaptcha >= 1 }, 10*time.Second, time.Millisecond)
	api.SetFaults(fakeapi.Faults{ReuseID: true})
	_, err = set.Solve(t.Context(), solver.Request{Method: "userrecaptcha", Params: taskParams(2)})
	require.Equal(t, provider.CodeReusedID, solver.CodeOf(err), "%v", err)
	require.True(t, solver.MayBePaid(err), "the trail says the second submission may have been paid")
	r := <-first
	require.NoError(t, r.err, "the first task keeps its task")
	require.Equal(t, "json", r.ans.Provider)
	require.Equal(t, 2, api.Stats().Submitted, "both charged")
	require.Zero(t, spare.api.Stats().Submitted, "not sent on: it may have been paid")
}

// TestBreakJSONPrimaryBehindAPageFront: the JSON primary sits behind a
// front that answers every call with an HTML page and status 200 (a
// maintenance page, a captive portal): nothing reaches the provider, and
// nothing is paid there. The tasks go to the fallback, each paid once, as
// a classic primary's "replies that are no word of the service" make an
// outage.
func TestBreakJSONPrimaryBehindAPageFront(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<html><body><h1>We'll be back soon</h1></body></html>")
	}))
	t.Cleanup(front.Close)
	outs, spare := tenBehindJSONPrimary(t, tasksClient(t, front.URL, fakeapi.TestKey), front.URL)
	t.Logf("outcomes %v; the front answered %d calls; the fallback accepted %d", outs, calls.Load(), spare.api.Stats().Submitted)
	require.Equal(t, map[string]int{"solved spare": 10}, outs)
	require.Equal(t, 10, spare.api.Stats().Submitted)
}

// tenBehindJSONPrimary runs 10 tasks on a worker whose primary is the
// JSON provider c at url and whose fallback is a classic per-solve
// emulator, and returns the outcomes counted by status and provider, and
// the fallback.
func tenBehindJSONPrimary(t *testing.T, c *provider.TasksClient, url string) (map[string]int, service) {
	t.Helper()
	jp := provider.Member{Client: c, Entry: provider.Entry{Name: "json", Dialect: provider.Tasks,
		BaseURL: url, KeyEnv: "K", Methods: []string{"userrecaptcha", "base64"}, Billing: spareBilling, Role: provider.Primary}}
	spare := perSolve(t, "spare", provider.Fallback, 2, 5*time.Millisecond)
	set, err := provider.New(provider.Config{Members: []provider.Member{jp, spare.member}})
	require.NoError(t, err)
	env := streamtest.Start(t, streamtest.WithWorkers(0))
	env.StartWorker(stream.WorkerConfig{Solver: set, Threads: threads})

	ids := submit(t, env.Client, "crawler", 0, 10)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	outs := map[string]int{}
	for _, id := range ids {
		o, err := env.Client.Wait(ctx, id)
		t.Logf("%s: %s %s %s %s", id, o.Status, o.Provider, o.Error, o.Detail)
		if err == nil || o.ID != "" {
			outs[string(o.Status)+" "+o.Provider]++
		}
	}
	return outs, spare
}

// TestBreakJSONProviderEchoesTheKey: a JSON provider whose error replies
// echo the clientKey it was sent (in errorDescription, and in a code of
// its own) does not get the key into the task's outcome, its trace or the
// worker's log: the classic client redacts every form of the key from
// what a reply says, and so must the JSON one.
func TestBreakJSONProviderEchoesTheKey(t *testing.T) {
	t.Parallel()
	const key = "0123456789abcdef0123456789abcdef"
	var created atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/createTask", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"errorId":0,"taskId":%d}`, 1000+created.Add(1))
	})
	mux.HandleFunc("/getTaskResult", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"errorId":12,"errorCode":"ERROR_CAPTCHA_UNSOLVABLE","errorDescription":"no worker of account %s could solve it"}`, key)
	})
	mux.HandleFunc("/reportIncorrectRecaptcha", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"errorId":99,"errorCode":"ERROR_%s","errorDescription":"report refused for key=%s"}`, key, key)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c := tasksClient(t, srv.URL, key)
	set, err := provider.New(provider.Config{Members: []provider.Member{{Client: c, Entry: provider.Entry{Name: "json", Dialect: provider.Tasks,
		BaseURL: srv.URL, KeyEnv: "K", Methods: []string{"userrecaptcha", "base64"}, Billing: spareBilling, Role: provider.Primary}}}})
	require.NoError(t, err)
	var log strings.Builder
	var mu sync.Mutex
	env := streamtest.Start(t, streamtest.WithWorkers(0), streamtest.WithLogger(slog.New(slog.NewTextHandler(writerFunc(func(b []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return log.Write(b)
	}), &slog.HandlerOptions{Level: slog.LevelDebug}))))
	env.StartWorker(stream.WorkerConfig{Solver: set, Threads: 2})

	ids := submit(t, env.Client, "crawler", 0, 1)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	o, err := env.Client.Wait(ctx, ids[0])
	require.Equal(t, stream.StatusDead, o.Status, "%v", err)
	t.Logf("outcome: %s %s (the provider created %d tasks)", o.Error, o.Detail, created.Load())
	require.NotContains(t, o.Error+o.Detail, key, "the outcome")
	tr := trace(t, env, ids[0])
	for _, e := range tr {
		require.NotContains(t, fmt.Sprintf("%+v", e), key, "the trace")
	}
	err = set.ReportOn(t.Context(), "json", "userrecaptcha", o.CaptchaID+"1001", false)
	require.Error(t, err)
	require.NotContains(t, err.Error()+solver.CodeOf(err), key, "a report's error")
	mu.Lock()
	defer mu.Unlock()
	require.NotContains(t, log.String(), key, "the worker's log")
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// TestBreakJSONPrimaryHangs: the JSON primary accepts connections and
// answers nothing (a frozen service): once its calls time out one after
// another it is out, as a classic service that answers nothing is, and
// the tasks go to the fallback, each paid once there. The first createTask
// that timed out may have been paid; the trace says so, and no task is
// sent on from it.
func TestBreakJSONPrimaryHangs(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var calls atomic.Int64
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(front.Close)
	t.Cleanup(func() { close(release) })
	c, err := provider.NewTasksClient(provider.TasksConfig{BaseURL: front.URL, APIKey: fakeapi.TestKey, Scale: 0.001,
		HTTPClient: &http.Client{Timeout: 300 * time.Millisecond}})
	require.NoError(t, err)
	outs, spare := tenBehindJSONPrimary(t, c, front.URL)
	t.Logf("outcomes %v; the frozen primary got %d calls; the fallback accepted %d", outs, calls.Load(), spare.api.Stats().Submitted)
	require.Equal(t, map[string]int{"solved spare": 10}, outs)
	require.Equal(t, 10, spare.api.Stats().Submitted)
}
