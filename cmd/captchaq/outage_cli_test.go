package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/internal/logbuf"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
)

// A worker process pointed where nothing listens: its log and /readyz say
// what failed and where, and the queued task spends no attempt.
func TestWorkerSaysTheServiceIsUnreachable(t *testing.T) {
	t.Parallel()
	natsURL, _, client := listeningServer(t, stream.Topology{})
	nowhere, maddr := freeAddr(t), freeAddr(t)
	w := startProc(t, keyEnv, "worker", "--nats", natsURL, "--solver-url", "http://"+nowhere, "--poll-scale", "0.01",
		"--metrics-addr", maddr, "--outage-warn-after", "1s")
	w.waitLine("worker started", 30*time.Second)
	ctx := t.Context()
	_, err := client.Submit(ctx, stream.Task{ID: "nowhere1", Method: "turnstile",
		Params: stream.Params{"sitekey": "0x4AAAAAAAB", "pageurl": "https://shop.example/"}})
	require.NoError(t, err)
	w.waitLine("connection refused to "+nowhere+": is the service's URL right?", 30*time.Second)
	var body string
	require.Eventually(t, func() bool {
		var code int
		body, code = httpGet(t, "http://"+maddr+"/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "connection refused to "+nowhere)
	}, 10*time.Second, 20*time.Millisecond, "/readyz says the service is unreachable: %s", body)
	require.Contains(t, body, "--solver-url http://"+nowhere)
	w.waitLine("still unreachable", 30*time.Second)
	tr, err := client.Trace(ctx, "nowhere1")
	require.NoError(t, err)
	snoozes := 0
	for _, e := range tr {
		require.NotEqual(t, "dead", e.Kind, "%+v", tr)
		if e.Kind == "snooze" {
			require.Zero(t, e.Attempt, "no attempt spent: %+v", e)
			snoozes++
		}
	}
	require.NotZero(t, snoozes, "%+v", tr)
}

// The profiles at the worker: on 2captcha ERROR_ZERO_BALANCE means no money,
// so the worker stops, says why, and leaves the task queued; the same code
// from CaptchaAI (a full plan) only makes the task wait.
func TestWorkerServiceProfileZeroBalance(t *testing.T) {
	t.Parallel()
	natsURL, _, client := listeningServer(t, stream.Topology{})
	_, emu := emulatorURL(t, fakeapi.Config{Service: fakeapi.Service2Captcha, NoFunds: true})
	w := startProc(t, keyEnv, "worker", "--nats", natsURL, "--solver-url", emu, "--service", "2captcha", "--poll-scale", "0.01")
	w.waitLine("worker started", 30*time.Second)
	_, err := client.Submit(t.Context(), stream.Task{ID: "broke1", Method: "turnstile",
		Params: stream.Params{"sitekey": "0x4AAAAAAAB", "pageurl": "https://shop.example/"}})
	require.NoError(t, err)
	require.Equal(t, 3, w.wait(30*time.Second), "the worker stops: %s", w.output())
	require.Contains(t, w.output(), "the 2captcha account has no money: top it up")
	tr, err := client.Trace(t.Context(), "broke1")
	require.NoError(t, err)
	for _, e := range tr {
		require.NotEqual(t, "dead", e.Kind, "the task stays queued: %+v", tr)
	}
}

// run against a solving service that cannot be reached says so within
// seconds, instead of waiting silently for its --timeout.
func TestRunSaysTheServiceIsUnreachable(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "one.jsonl")
	require.NoError(t, os.WriteFile(file, []byte(`{"id":"t1","method":"turnstile","params":{"sitekey":"0x4AAAAAAAB","pageurl":"https://shop.example/"}}`+"\n"), 0o600))
	start := time.Now()
	p := startProc(t, keyEnv, "run", "--json", "--timeout", "1m", "--solver-url", "http://127.0.0.1:"+itoa(freePort(t)), file)
	p.waitLine("cannot be reached", 15*time.Second)
	require.Less(t, time.Since(start), 15*time.Second)
	require.Contains(t, p.output(), "captchaq run: the solving service at 127.0.0.1:")
	require.NotContains(t, p.output(), fakeapi.TestKey, "the key never shows")
}

// solve, waiting on a worker that cannot reach the solving service, says so
// within seconds instead of at its --timeout.
func TestSolveSaysTheServiceIsUnreachable(t *testing.T) {
	t.Parallel()
	natsURL, _, _ := listeningServer(t, stream.Topology{})
	w := startProc(t, keyEnv, "worker", "--nats", natsURL, "--solver-url", "http://127.0.0.1:"+itoa(freePort(t)), "--name", "cut-off")
	w.waitLine("worker started", 30*time.Second)
	start := time.Now()
	p := startProc(t, nil, "solve", "--nats", natsURL, "--method", "turnstile", "--param", "sitekey=0x4AAAAAAAB",
		"--param", "pageurl=https://shop.example/", "--timeout", "1m")
	p.waitLine("worker cut-off cannot reach the solving service", 15*time.Second)
	require.Less(t, time.Since(start), 15*time.Second)
}

// solve of a task that ends dead says why in words: the reason, the
// service's code and its words, once.
func TestSolveSaysWhyNotSolved(t *testing.T) {
	t.Parallel()
	natsURL, _, _ := listeningServer(t, stream.Topology{})
	_, emu := emulatorURL(t, fakeapi.Config{TimeScale: 0.001})
	w := startProc(t, keyEnv, "worker", "--nats", natsURL, "--solver-url", emu, "--poll-scale", "0.001")
	w.waitLine("worker started", 30*time.Second)
	r := captchaq(t, natsURL, "solve", "--id", "pf", "--method", "turnstile", "--param", "sitekey=perm-fail",
		"--param", "pageurl=https://shop.example/", "--timeout", "30s")
	require.Equal(t, 1, r.code, r.stderr)
	require.Equal(t, "captchaq solve: task pf not solved: permanent: ERROR_WRONG_GOOGLEKEY (googlekey parameter is missing or has an incorrect format.)\n", r.stderr)
}

// run's progress bar on a terminal: its clock moves every second while no
// outcome lands.
func TestProgressClockMoves(t *testing.T) {
	t.Parallel()
	var out logbuf.Buffer
	bar := &progress{w: &out, on: true, start: time.Now()}
	bar.begin(30)
	sc, err := solver.NewClient(solver.Config{BaseURL: "http://127.0.0.1:1", APIKey: fakeapi.TestKey})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); watchService(ctx, bar, sc, "http://127.0.0.1:1") }()
	require.Contains(t, out.String(), "] 0/30  0s ")
	moved := regexp.MustCompile(`\] 0/30  [1-9]\d*s `)
	require.Eventually(t, func() bool { return moved.MatchString(out.String()) }, 10*time.Second, 50*time.Millisecond, "%q", out.String())
	cancel()
	<-done
}

// run with a key the service refuses says so within seconds and ends with
// that reason, not with a bare "context canceled".
func TestRunSaysTheServiceRefusesTheKey(t *testing.T) {
	t.Parallel()
	_, emu := emulatorURL(t, fakeapi.Config{TimeScale: 0.001})
	file := filepath.Join(t.TempDir(), "one.jsonl")
	require.NoError(t, os.WriteFile(file, []byte(`{"id":"t1","method":"turnstile","params":{"sitekey":"0x4AAAAAAAB","pageurl":"https://shop.example/"}}`+"\n"), 0o600))
	start := time.Now()
	p := startProc(t, []string{"CAPTCHAAI_API_KEY=ffffffffffffffffffffffffffffffff"}, "run", "--json", "--timeout", "1m", "--solver-url", emu, file)
	require.Equal(t, 1, p.wait(30*time.Second))
	require.Less(t, time.Since(start), 30*time.Second)
	require.Contains(t, p.output(), "captchaq run: the solving service refuses this worker (ERROR_KEY_DOES_NOT_EXIST)")
	require.NotContains(t, p.output(), "context canceled")
	require.NotContains(t, p.output(), "ffffffffffffffffffffffffffffffff", "the key never shows")
}
