package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/broker"
)

// TestWorkerMetrics runs a worker with metrics against an embedded server and
// the API emulator, and reads /metrics as Prometheus would.
func TestWorkerMetrics(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	ns, err := broker.Start(broker.Config{StoreDir: t.TempDir(), LazySync: true})
	require.NoError(t, err)
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	connect := func() *nats.Conn {
		nc, err := nats.Connect("", nats.InProcessServer(ns))
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		return nc
	}

	api := httptest.NewServer(fakeapi.New(fakeapi.Config{TimeScale: 0.001, Seed: 1,
		Faults: fakeapi.Faults{Rules: []fakeapi.Rule{{Param: "pageurl", Contains: "bad.example", Code: "ERROR_PAGEURL"}}}}))
	t.Cleanup(api.Close)

	m := NewWorker(3)
	sc, err := solver.NewClient(solver.Config{BaseURL: api.URL, APIKey: fakeapi.TestKey, Timing: solver.Timing{Scale: 0.001},
		OnCall: m.SolverCall, MinSubmitInterval: -1})
	require.NoError(t, err)
	// As `captchaq init`: workers only find the topology.
	ajs, err := jetstream.New(connect())
	require.NoError(t, err)
	_, err = stream.EnsureTopology(ctx, ajs.Conn(), stream.Topology{}, true)
	require.NoError(t, err)
	w, err := stream.NewWorker(ctx, connect(), stream.WorkerConfig{Solver: m.Solver(sc), Threads: 3, Observer: m,
		IdleCheck: 50 * time.Millisecond, Policy: retry.Policy{InitialInterval: 10 * time.Millisecond, NoJitter: true}})
	require.NoError(t, err)
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	t.Cleanup(func() { stop(); <-done })

	c, err := stream.NewClient(ctx, connect(), stream.ClientConfig{})
	require.NoError(t, err)
	tasks := []stream.Task{
		{ID: "m1", Method: "turnstile", Params: stream.Params{"sitekey": "0x4AAAAAAAB", "pageurl": "https://shop.example/a"}},
		{ID: "m2", Method: "turnstile", Params: stream.Params{"sitekey": "0x4AAAAAAAB", "pageurl": "https://shop.example/b"}},
		{ID: "m3", Method: "turnstile", Params: stream.Params{"sitekey": "0x4AAAAAAAB", "pageurl": "https://bad.example/c"}},
	}
	receipts, err := c.SubmitAll(ctx, tasks)
	require.NoError(t, err)
	solved, dead := 0, 0
	require.NoError(t, c.WaitAll(ctx, receipts, func(o stream.Outcome, err error) {
		switch {
		case err == nil:
			solved++
		case errors.Is(err, stream.ErrNotSolved):
			dead++
		}
	}))
	require.Equal(t, 2, solved)
	require.Equal(t, 1, dead)

	ready := errors.New("nats: disconnected")
	srv := httptest.NewServer(Mux(m.Registry(), func() error { return ready }))
	t.Cleanup(srv.Close)
	// A waiter sees an outcome as soon as it is stored; the worker counts
	// it a moment later, when the write returns: scrape until it has.
	var body string
	require.Eventually(t, func() bool {
		var code int
		body, code = get(t, srv.URL+"/metrics")
		return code == http.StatusOK && strings.Contains(body, `captchaq_tasks_total{method="turnstile",outcome="solved"} 2`+"\n") &&
			strings.Contains(body, `captchaq_tasks_total{method="turnstile",outcome="dead"} 1`+"\n")
	}, 10*time.Second, 10*time.Millisecond, "the worker never counted its outcomes")
	for _, want := range []string{
		`captchaq_tasks_total{method="turnstile",outcome="solved"} 2`,
		`captchaq_tasks_total{method="turnstile",outcome="dead"} 1`,
		`captchaq_dead_letters_total{method="turnstile",reason="permanent"} 1`,
		`captchaq_attempts_total{method="turnstile"} 3`,
		`captchaq_solve_duration_seconds_count{method="turnstile"} 2`,
		`captchaq_api_calls_total{code="ERROR_PAGEURL",endpoint="in.php"} 1`,
		`captchaq_api_calls_total{code="OK",endpoint="in.php"} 2`,
		`captchaq_in_flight 0`,
		`captchaq_threads 3`,
	} {
		require.Contains(t, body, want+"\n")
	}
	// The Go runtime's and the process's collectors.
	for _, want := range []string{"# TYPE go_goroutines gauge", "# TYPE go_memstats_heap_alloc_bytes gauge",
		"# TYPE process_cpu_seconds_total counter", "# TYPE process_resident_memory_bytes gauge"} {
		require.Contains(t, body, want+"\n")
	}
	res := regexp.MustCompile(`captchaq_api_calls_total\{code="OK",endpoint="res.php"\} (\d+)`).FindStringSubmatch(body)
	require.NotNil(t, res, body)
	n, _ := strconv.Atoi(res[1])
	require.Equal(t, 2, n, "one answer fetched per solved task (batch polls count as BATCH)")

	body, code := get(t, srv.URL+"/healthz")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok\n", body)
	body, code = get(t, srv.URL+"/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "disconnected")
	ready = nil
	_, code = get(t, srv.URL+"/readyz")
	require.Equal(t, http.StatusOK, code)
}

func get(t *testing.T, url string) (string, int) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b), resp.StatusCode
}

func TestObserveBoundsLabels(t *testing.T) {
	t.Parallel()
	m := NewWorker(1)
	m.Observe(stream.Observation{Kind: stream.EventRetry, Method: "turnstile", Code: "ERROR_SERVER_ERROR"})
	m.Observe(stream.Observation{Kind: stream.EventSnooze, Method: "turnstile", Code: "ERROR_ZERO_BALANCE"})
	m.Observe(stream.Observation{Kind: stream.EventDead, Method: "made-up-by-a-producer", Reason: "invalid-task"})
	m.Observe(stream.Observation{Kind: stream.EventHandback, Method: "geetest"})
	m.Observe(stream.Observation{Kind: stream.ObservedForged, Method: "made-up-by-a-producer", Code: stream.CodeInvalidEnvelope})
	var b strings.Builder
	require.NoError(t, m.Registry().WriteText(&b))
	for _, want := range []string{
		`captchaq_retries_total{code="ERROR_SERVER_ERROR",method="turnstile"} 1`,
		`captchaq_capacity_snoozes_total{code="ERROR_ZERO_BALANCE",method="turnstile"} 1`,
		`captchaq_dead_letters_total{method="other",reason="invalid-task"} 1`,
		`captchaq_handbacks_total{method="geetest"} 1`,
		`captchaq_forged_messages_total 1`,
	} {
		require.Contains(t, b.String(), want+"\n")
	}
}

// TestTransportLabelsBatchPolls: a batch poll (res.php with ids=…) counts as
// BATCH, whatever states its reply lists; a single poll keeps its code.
func TestTransportLabelsBatchPolls(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		if r.Form.Has("ids") {
			io.WriteString(w, `{"status":0,"request":"CAPCHA_NOT_READY|CAPCHA_NOT_READY"}`)
			return
		}
		io.WriteString(w, `{"status":0,"request":"CAPCHA_NOT_READY"}`)
	}))
	t.Cleanup(srv.Close)
	m := NewWorker(1)
	hc := &http.Client{Transport: m.Transport(nil)}
	for _, form := range []string{"action=get&ids=1,2&json=1", "action=get&id=1&json=1"} {
		resp, err := hc.Post(srv.URL+"/res.php", "application/x-www-form-urlencoded", strings.NewReader(form))
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	var b strings.Builder
	require.NoError(t, m.Registry().WriteText(&b))
	require.Contains(t, b.String(), `captchaq_api_calls_total{code="BATCH",endpoint="res.php"} 1`+"\n")
	require.Contains(t, b.String(), `captchaq_api_calls_total{code="CAPCHA_NOT_READY",endpoint="res.php"} 1`+"\n")
}

// TestProviderSpend counts the answers of a Solver of providers by
// provider, method, producer and cost basis, and sums their cost; past
// maxProducers names, a producer is counted as "other".
func TestProviderSpend(t *testing.T) {
	t.Parallel()
	m := NewWorker(1)
	answers := []solver.Answer{
		{Provider: "spare", Cost: 0.00299, CostBasis: "price"},
		{Provider: "spare", Cost: 0.00299, CostBasis: "price"},
		{Provider: "plan", CostBasis: "plan"},
		{}, // a single service's: not counted
	}
	i := 0
	s := m.Solver(solver.Func(func(context.Context, solver.Request) (solver.Answer, error) {
		i++
		return answers[i-1], nil
	}))
	for j := range answers {
		_, err := s.Solve(t.Context(), solver.Request{Method: "userrecaptcha", Producer: []string{"crawler", "crawler", "", ""}[j]})
		require.NoError(t, err)
	}
	for j := range maxProducers { // with crawler, one past the cap
		answers = append(answers, solver.Answer{Provider: "spare", Cost: 0.001, CostBasis: "price"})
		_, err := s.Solve(t.Context(), solver.Request{Method: "base64", Producer: fmt.Sprintf("p%03d", j)})
		require.NoError(t, err)
	}
	var b strings.Builder
	require.NoError(t, m.Registry().WriteText(&b))
	for _, want := range []string{
		`captchaq_provider_solves_total{basis="price",method="userrecaptcha",producer="crawler",provider="spare"} 2`,
		`captchaq_provider_solves_total{basis="plan",method="userrecaptcha",producer="unnamed",provider="plan"} 1`,
		`captchaq_provider_spend_total{method="userrecaptcha",producer="crawler",provider="spare"} 0.00598`,
		`captchaq_provider_spend_total{method="userrecaptcha",producer="unnamed",provider="plan"} 0`,
		`captchaq_provider_spend_total{method="base64",producer="other",provider="spare"} 0.001`,
	} {
		require.Contains(t, b.String(), want+"\n")
	}
}
