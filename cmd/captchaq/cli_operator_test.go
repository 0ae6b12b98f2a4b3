package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/internal/logbuf"
	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/broker"
)

// run runs captchaq in this process and returns what it printed.
func runInProcess(args ...string) cliResult {
	var out, errOut strings.Builder
	code := realMain(context.Background(), args, &out, &errOut)
	return cliResult{stdout: out.String(), stderr: errOut.String(), code: code}
}

// Every command and verb answers --help and `captchaq help …` with its own
// usage and exit code 0.
func TestHelpForEveryCommand(t *testing.T) {
	t.Parallel()
	groups := verbGroups
	var lines [][]string
	for name := range commands {
		lines = append(lines, []string{name})
		for _, v := range groups[name] {
			lines = append(lines, []string{name, v.name})
		}
	}
	sort.Slice(lines, func(i, j int) bool { return strings.Join(lines[i], " ") < strings.Join(lines[j], " ") })
	for _, line := range lines {
		name := strings.Join(line, " ")
		for _, args := range [][]string{append(append([]string{}, line...), "--help"), append([]string{"help"}, line...)} {
			r := runInProcess(args...)
			require.Equal(t, 0, r.code, "captchaq %s: %s", strings.Join(args, " "), r.stderr)
			require.Empty(t, r.stderr, "captchaq %s: help goes to stdout (| less)", strings.Join(args, " "))
			help := r.stdout
			if _, group := groups[name]; group {
				for _, v := range groups[name] {
					require.Contains(t, help, "captchaq "+name+" "+v.name+" ", "captchaq %s lists its verbs", strings.Join(args, " "))
				}
				continue
			}
			require.Contains(t, help, "Usage: captchaq "+name+" ", "captchaq %s", strings.Join(args, " "))
			if name != "passwd" && name != "fakeapi" {
				require.Contains(t, help, "  --", "captchaq %s lists flags", strings.Join(args, " "))
			}
		}
	}
	r := runInProcess("help")
	require.Equal(t, 0, r.code)
	for name := range commands {
		require.Contains(t, r.stdout, "  "+name+" ")
	}
	r = runInProcess("--version")
	require.Equal(t, 0, r.code)
	require.Regexp(t, `^captchaq \S.*\(go1\.`, r.stdout)

	r = runInProcess("dead", "bury")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, `unknown verb "bury": want one of ls, show, replay, purge`)
	r = runInProcess("nope")
	require.Equal(t, 2, r.code)
	require.Equal(t, 1, strings.Count(r.stderr, "\n"), r.stderr)
}

// A bad flag or flag value is one line that names the flag as --flag and
// points to --help; no usage dump.
func TestBadFlagIsOneLine(t *testing.T) {
	t.Parallel()
	for args, want := range map[string]string{
		"solve --method turnstile --param x": `invalid value "x" for flag --param: want key=value, got "x" (see captchaq solve --help)`,
		"stats --interval soon":              `invalid value "soon" for flag --interval: want a duration such as 90s, 15m or 2h (see captchaq stats --help)`,
		"dead ls --since garbage":            `invalid value "garbage" for flag --since: want a duration such as 90s, 15m or 2h (see captchaq dead ls --help)`,
		"worker --threads many":              `invalid value "many" for flag --threads: want a whole number (see captchaq worker --help)`,
		"dead ls --frobnicate":               `flag provided but not defined: --frobnicate (see captchaq dead ls --help)`,
		"submit --json=maybe x":              `flag provided but not defined: --json (see captchaq submit --help)`,
		"worker --threads":                   `flag needs an argument: --threads (see captchaq worker --help)`,
		"worker --poll-pace -1":              `invalid value "-1" for flag --poll-pace: want 0 (the service's own) or a positive multiple of its recommended pace (see captchaq worker --help)`,
		"run --poll-pace NaN x.jsonl":        `invalid value "NaN" for flag --poll-pace: want 0 (the service's own) or a positive multiple of its recommended pace (see captchaq run --help)`,
	} {
		r := runInProcess(strings.Fields(args)...)
		require.Equal(t, 2, r.code, args)
		name := strings.Fields(args)[0]
		if _, verbs := verbGroups[name]; verbs {
			name += " " + strings.Fields(args)[1] // the verb is part of the command's name
		}
		require.Equal(t, "captchaq "+name+": "+want+"\n", r.stderr, args)
		require.Empty(t, r.stdout)
	}
}

// balance and report take only the service's flags (report also NATS's,
// for a task id); report says which id it wants.
func TestBalanceAndReportFlags(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"balance", "report"} {
		r := runInProcess(name, "--help")
		require.Contains(t, r.stdout, "--solver-url")
		for _, f := range []string{"--poll-batch", "--poll-scale", "--submit-interval", "--submit-burst"} {
			require.NotContains(t, r.stdout, f, "%s --help", name)
		}
	}
	r := runInProcess("report", "--help")
	require.Contains(t, r.stdout, "captcha_id")
	require.Contains(t, r.stdout, "task id")
}

// `report good TASK_ID` looks up the task's captcha id and reports that.
func TestReportByTaskID(t *testing.T) {
	t.Parallel()
	natsURL, _, client := listeningServer(t, stream.Topology{})
	api, emu := emulatorURL(t, fakeapi.Config{SolveTime: map[string]fakeapi.Range{fakeapi.KindTurnstile: {Min: time.Millisecond, Max: 2 * time.Millisecond}}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	startWorker(t, ctx, natsURL, emu)
	out, err := client.Solve(ctx, stream.Task{ID: "demo-001", Method: "turnstile", Params: stream.Params{"sitekey": "0x4AAAAAAAB", "pageurl": "https://shop.example/"}})
	require.NoError(t, err)
	require.NotEmpty(t, out.CaptchaID)

	r := captchaqEnv(t, natsURL, keyEnv, "report", "good", "demo-001", "--solver-url", emu)
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "reported captcha "+out.CaptchaID+" (task demo-001) as good\n", r.stdout)
	require.Equal(t, 1, api.Stats().ReportsGood)

	r = captchaqEnv(t, natsURL, keyEnv, "report", "bad", "no-such-task", "--solver-url", emu)
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, `"no-such-task" is not a captcha id (digits), and no task has that id`)
}

// startWorker runs a worker in this process against the emulator.
func startWorker(t *testing.T, ctx context.Context, natsURL, emu string) {
	t.Helper()
	startWorkerWith(t, ctx, natsURL, emu, stream.WorkerConfig{Threads: 2})
}

// startWorkerWith runs a worker of cfg in this process against the
// emulator (cfg.Solver, when not set: one polling a thousand times as often
// as the service asks). The function it returns stops the worker and
// returns what Run returned; the test's end does too.
func startWorkerWith(t *testing.T, ctx context.Context, natsURL, emu string, cfg stream.WorkerConfig) func() error {
	t.Helper()
	nc, err := nats.Connect(natsURL)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	if cfg.Solver == nil {
		cfg.Solver, err = solver.NewClient(solver.Config{BaseURL: emu, APIKey: fakeapi.TestKey, Timing: solver.Timing{Scale: 0.001}})
		require.NoError(t, err)
	}
	cfg.IdleCheck = 50 * time.Millisecond
	w, err := stream.NewWorker(ctx, nc, cfg)
	require.NoError(t, err)
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	stopped := sync.OnceValue(func() error { stop(); return <-done })
	t.Cleanup(func() { _ = stopped() })
	return stopped
}

// captchaqEnv is captchaq with more environment.
func captchaqEnv(t *testing.T, natsURL string, env []string, args ...string) cliResult {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(append(os.Environ(), childEnv...), "CAPTCHAQ_NATS="+natsURL), env...)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	r := cliResult{stdout: out.String(), stderr: errOut.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return r
}

// waitCounted waits until a consumer counts n messages pending.
func waitCounted(ctx context.Context, t *testing.T, s jetstream.Stream, consumer string, n uint64) {
	t.Helper()
	cons, err := s.Consumer(ctx, consumer)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumPending == n
	}, 20*time.Second, 5*time.Millisecond, "consumer %s never counted %d messages", consumer, n)
}

// Ctrl-C on `submit --wait` exits 130 and says the tasks are still queued
// and how to resume; --timeout says the same with exit 1.
func TestSubmitWaitInterrupted(t *testing.T) {
	t.Parallel()
	natsURL, _, _ := listeningServer(t, stream.Topology{})
	file := filepath.Join(t.TempDir(), "tasks.jsonl")
	require.NoError(t, os.WriteFile(file, []byte(`{"id":"q-1","method":"turnstile","params":{"sitekey":"k","pageurl":"https://a.example/"}}
{"id":"q-2","method":"turnstile","params":{"sitekey":"k","pageurl":"https://a.example/"}}
`), 0o600))
	p := startProc(t, nil, "submit", "--wait", "--nats", natsURL, file)
	p.waitLine(`"id":"q-2"`, 20*time.Second)
	require.NoError(t, p.cmd.Process.Signal(os.Interrupt))
	require.Equal(t, 130, p.wait(20*time.Second))
	require.Contains(t, p.output(), "captchaq submit: interrupted (Ctrl-C): 2 task(s) without an outcome yet are still queued or being solved; run the same command within 2m0s to resume waiting")
	require.NotContains(t, p.output(), "context canceled")

	r := captchaq(t, natsURL, "submit", "--wait", "--timeout", "300ms", file)
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "--timeout 300ms passed: 2 task(s) without an outcome yet are still queued")
	require.Equal(t, 2, strings.Count(r.stdout, `"duplicate":true`), "submitted again, queued nothing twice")
}

// `solve --timeout` with no worker says so; Ctrl-C on solve cancels its
// task, which then ends dead/canceled without reaching the service.
func TestSolveTimeoutAndInterrupt(t *testing.T) {
	t.Parallel()
	natsURL, js, client := listeningServer(t, stream.Topology{})
	r := captchaq(t, natsURL, "solve", "--method", "turnstile", "--param", "sitekey=k", "--param", "pageurl=https://a.example/", "--timeout", "300ms")
	require.Equal(t, 1, r.code)
	require.Regexp(t, `^captchaq solve: no answer within --timeout 300ms: no worker took task \S+ \(is one running against this server\? `+"`captchaq workers ls`"+` lists them\); its deadline has passed, so it ends dead/expired\n$`, r.stderr)

	p := startProc(t, nil, "solve", "--nats", natsURL, "--id", "ctrl-c", "--method", "turnstile", "--param", "sitekey=k", "--param", "pageurl=https://a.example/")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := js.Stream(ctx, stream.DefaultStream)
	require.NoError(t, err)
	waitCounted(ctx, t, s, "workers-fast-high", 2) // the timed-out task and this one
	require.NoError(t, p.cmd.Process.Signal(os.Interrupt))
	require.Equal(t, 130, p.wait(20*time.Second))
	require.Contains(t, p.output(), "captchaq solve: interrupted (Ctrl-C): task ctrl-c canceled: no worker will solve it (it ends dead/canceled)")

	api, emu := emulatorURL(t, fakeapi.Config{})
	startWorker(t, ctx, natsURL, emu)
	out, err := client.Wait(ctx, "ctrl-c")
	require.ErrorIs(t, err, stream.ErrNotSolved)
	require.Equal(t, string(retry.ReasonCanceled), out.Reason)
	require.Zero(t, api.Stats().Submitted)

	// results filters by id, status and age.
	r = captchaq(t, natsURL, "results", "--id", "ctrl-c")
	require.Equal(t, 0, r.code, r.stderr)
	outs := jsonLines[stream.Outcome](t, r.stdout)
	require.Len(t, outs, 1)
	require.Equal(t, "canceled", outs[0].Reason)
	r = captchaq(t, natsURL, "results", "--status", "solved", "--since", "1h")
	require.Equal(t, 0, r.code, r.stderr)
	require.Empty(t, r.stdout)
	r = captchaq(t, natsURL, "results", "--status", "lost")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, `--status "lost": want solved or dead`)
}

// snapshotWriter ends its context after n stats snapshots.
type snapshotWriter struct {
	strings.Builder
	n      int
	cancel context.CancelFunc
}

func (w *snapshotWriter) Write(p []byte) (int, error) {
	n, err := w.Builder.Write(p)
	if strings.Count(w.String(), "METHOD") >= w.n || strings.Count(w.String(), "workers alive") >= w.n {
		w.cancel()
	}
	return n, err
}

// Piped, stats --watch appends snapshots (no terminal codes); --interval has
// a floor.
func TestStatsWatchPipedAndIntervalFloor(t *testing.T) {
	t.Parallel()
	natsURL, _, _ := listeningServer(t, stream.Topology{})
	r := runInProcess("stats", "--watch", "--interval", "0", "--nats", natsURL)
	require.Equal(t, 2, r.code)
	require.Equal(t, "captchaq stats: --interval 0s: at least 500ms (each snapshot reads the stream)\n", r.stderr)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	wctx, stop := context.WithCancel(ctx)
	w := &snapshotWriter{n: 2, cancel: stop}
	require.NoError(t, runStats(wctx, []string{"--watch", "--interval", "500ms", "--nats", natsURL}, w, io.Discard))
	require.Equal(t, 2, strings.Count(w.String(), "\nLANE "), w.String())
	require.NotContains(t, w.String(), "\x1b[")
	require.Contains(t, w.String(), "workers alive: 0\n")
}

// A server whose config requires authentication, started without the
// admin's password, says at once what it needs.
func TestServerSaysItNeedsTheAdminPassword(t *testing.T) {
	t.Parallel()
	setRoleEnv()
	dir, conf := shippedConfig(t)
	start := time.Now()
	err := runServer(context.Background(), []string{"--config", conf, "--store", filepath.Join(dir, "js")}, io.Discard, io.Discard)
	require.EqualError(t, err, conf+` requires authentication: set CAPTCHAQ_ADMIN_PASSWORD to the password of user "admin", which creates the stream and consumers (CAPTCHAQ_ADMIN_USER names another user)`)
	require.Less(t, time.Since(start), 5*time.Second)
}

// run, piped: one JSON line per outcome as it lands, a summary on stderr
// that names the dead ids and the service's host, and a store kept for dead ls.
func TestRunPipedKeepsItsStore(t *testing.T) {
	t.Parallel()
	_, emu := emulatorURL(t, fakeapi.Config{TimeScale: 0.001, Faults: fakeapi.Faults{Rules: []fakeapi.Rule{
		{Param: "pageurl", Contains: "bad.example", Code: "ERROR_PAGEURL"}}}})
	dir := t.TempDir()
	file := filepath.Join(dir, "tasks.jsonl")
	require.NoError(t, os.WriteFile(file, []byte(`{"id":"r-ok","method":"turnstile","params":{"sitekey":"k","pageurl":"https://a.example/x"}}
{"id":"r-bad-2","method":"turnstile","params":{"sitekey":"k","pageurl":"https://bad.example/x"}}
{"id":"r-bad-1","method":"turnstile","params":{"sitekey":"k","pageurl":"https://bad.example/y"}}
`), 0o600))
	store := filepath.Join(dir, "store")
	const storeKey = "run-test-store-key-0123456789abcdef" // a kept store is encrypted with CAPTCHAQ_STORE_KEY
	r := captchaqEnv(t, "", append([]string{"CAPTCHAQ_STORE_KEY=" + storeKey}, keyEnv...), "run", "--store", store, "--solver-url", emu, "--poll-scale", "0.001", file)
	require.Equal(t, 1, r.code, r.stderr)
	outs := jsonLines[stream.Outcome](t, r.stdout)
	require.Len(t, outs, 3)
	status := map[string]stream.Status{}
	for _, o := range outs {
		status[o.ID] = o.Status
	}
	require.Equal(t, map[string]stream.Status{"r-ok": "solved", "r-bad-1": "dead", "r-bad-2": "dead"}, status)
	host := strings.TrimPrefix(emu, "http://")
	require.Contains(t, r.stderr, "solving service at "+host+" (--solver-url or CAPTCHAQ_SOLVER_URL; CAPTCHAAI_API_KEY is set: a paid service charges each solve)")
	require.NotContains(t, r.stderr, "real API", "the URL is not the paid API's")
	require.Contains(t, r.stderr, "2 × permanent ERROR_PAGEURL: r-bad-1, r-bad-2\n")
	require.NotContains(t, r.stderr, "expired")
	require.Contains(t, r.stderr, "store    kept in "+store)

	_, err := broker.Start(broker.Config{StoreDir: store, LazySync: true})
	require.ErrorContains(t, err, "could not open", "the kept store opened without its key")
	ns, err := broker.Start(broker.Config{StoreDir: store, LazySync: true, StoreKey: storeKey})
	require.NoError(t, err)
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	require.NoError(t, err)
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The token stream lives in memory: as after any restart, the admin
	// puts it back (`captchaq init`); producers only find it.
	require.NoError(t, ensureTopology(ctx, nc, stream.Topology{}, -1, false))
	c, err := stream.NewClient(ctx, nc, stream.ClientConfig{})
	require.NoError(t, err)
	ds, err := c.DeadLetters(ctx, stream.DeadFilter{})
	require.NoError(t, err)
	require.Equal(t, []string{"r-bad-1", "r-bad-2"}, letterIDs(ds))
}

// Ctrl-C on run says what was lost, and exits 130.
func TestRunInterrupted(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "tasks.jsonl")
	require.NoError(t, os.WriteFile(file, []byte(`{"id":"slow-1","method":"userrecaptcha","params":{"googlekey":"k","pageurl":"https://a.example/x"}}
{"id":"slow-2","method":"userrecaptcha","params":{"googlekey":"k","pageurl":"https://a.example/x"}}
`), 0o600))
	p := startProc(t, []string{"CAPTCHAAI_API_KEY="}, "run", "--fake-speed", "0.01", file)
	p.waitLine("submitted 2 tasks; waiting for their outcomes", 20*time.Second)
	require.NoError(t, p.cmd.Process.Signal(os.Interrupt))
	require.Equal(t, 130, p.wait(20*time.Second))
	require.Contains(t, p.output(), "captchaq run: interrupted (Ctrl-C): 2 task(s) had no outcome yet and are lost with this run's temporary store (--store DIR keeps them)")
}

// `captchaq dashboard` serves the page and its snapshots; beyond loopback
// it wants a token.
func TestDashboardCommand(t *testing.T) {
	t.Parallel()
	r := runInProcess("dashboard", "--addr", "0.0.0.0:0")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "--addr 0.0.0.0:0 is beyond loopback: set --token (CAPTCHAQ_TOKEN)")

	natsURL, _, client := listeningServer(t, stream.Topology{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := client.Submit(ctx, stream.Task{ID: "dash-1", Method: "turnstile", Params: stream.Params{"sitekey": "k", "pageurl": "https://a.example/secret"}})
	require.NoError(t, err)
	addr := freeAddr(t)
	dctx, stop := context.WithCancel(ctx)
	var out logbuf.Buffer
	done := make(chan error, 1)
	go func() {
		done <- runDashboard(dctx, []string{"--addr", addr, "--nats", natsURL, "--log-level", "error", "--allowed-host", "dash.example.org"}, &out, io.Discard)
	}()
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "captchaq dashboard on http://"+addr+"/") }, 10*time.Second, 10*time.Millisecond)
	page, code := httpGet(t, "http://"+addr+"/")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, page, `<meta name="csrf" content="`)
	snap, code := httpGet(t, "http://"+addr+"/api/snapshot")
	require.Equal(t, http.StatusOK, code, snap)
	require.Contains(t, snap, `"queues":[`)
	tasks, code := httpGet(t, "http://"+addr+"/api/tasks")
	require.Equal(t, http.StatusOK, code, tasks)
	require.Contains(t, tasks, `"id":"dash-1"`)
	require.Contains(t, tasks, `"host":"a.example"`)
	require.NotContains(t, tasks, "/secret", "no page URL reaches the browser")
	// The Hosts it answers to: its address and --allowed-host, no other.
	_, port, _ := net.SplitHostPort(addr)
	for host, want := range map[string]int{"dash.example.org:" + port: http.StatusOK, "rebind.example:" + port: http.StatusMisdirectedRequest} {
		req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
		require.NoError(t, err)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, want, resp.StatusCode, host)
	}
	stop()
	require.NoError(t, <-done)
}

// `server --dashboard` serves the page beside the server; reads need no
// credentials of the browser's, changes the admin's.
func TestServerServesTheDashboard(t *testing.T) {
	t.Parallel()
	setRoleEnv()
	dir, conf := shippedConfig(t)
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	var out logbuf.Buffer
	done := make(chan error, 1)
	go func() {
		done <- runServer(ctx, []string{"--config", conf, "--store", filepath.Join(dir, "js"), "--admin-password", rolePasswords["admin"],
			"--log-level", "error", "--dashboard", addr}, &out, io.Discard)
	}()
	defer func() { cancel(); require.NoError(t, <-done) }()
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "captchaq dashboard on http://"+addr+"/") }, 20*time.Second, 10*time.Millisecond)
	snap, code := httpGet(t, "http://"+addr+"/api/snapshot")
	require.Equal(t, http.StatusOK, code, snap)
	require.Contains(t, snap, `"queues":[`)
	require.NotContains(t, snap, `"error"`)
}

// captchaq without a command is a usage error, as `go` and `git` treat it:
// the usage goes to stderr and the exit code is 2, so a script that lost
// its arguments fails instead of passing. `help --help` and `help help`
// are asking for the usage, not naming a command.
func TestNoCommandIsAUsageError(t *testing.T) {
	t.Parallel()
	r := runInProcess()
	require.Equal(t, 2, r.code)
	require.Empty(t, r.stdout)
	require.Contains(t, r.stderr, "Usage: captchaq COMMAND")
	for _, args := range [][]string{{"help", "--help"}, {"help", "-h"}, {"help", "help"}} {
		r := runInProcess(args...)
		require.Equal(t, 0, r.code, "captchaq %s: %s", strings.Join(args, " "), r.stderr)
		require.Empty(t, r.stderr, "captchaq %s", strings.Join(args, " "))
		require.Contains(t, r.stdout, "Usage: captchaq COMMAND", "captchaq %s", strings.Join(args, " "))
	}
}

// A filter value that can match nothing is refused, naming what it takes:
// a misspelt method would otherwise list, replay or purge nothing and say
// nothing.
func TestFilterValuesThatMatchNothing(t *testing.T) {
	t.Parallel()
	for _, verb := range []string{"ls", "replay", "purge"} {
		args := []string{"dead", verb, "--method", "turnstyle"}
		if verb != "ls" {
			args = append(args, "--all")
		}
		r := runInProcess(args...)
		require.Equal(t, 2, r.code, "%v: %s", args, r.stderr)
		require.Contains(t, r.stderr, `captchaq dead `+verb+`: --method "turnstyle": not a method captchaq solves (did you mean turnstile?); want one of `, args)
		require.Contains(t, r.stderr, "userrecaptcha", args)
		require.Equal(t, 1, strings.Count(r.stderr, "\n"), r.stderr)
	}
	r := runInProcess("task", "ls", "--method", "turnstyle")
	require.Equal(t, 2, r.code, r.stderr)
	require.Contains(t, r.stderr, `captchaq task ls: --method "turnstyle": not a method captchaq solves (did you mean turnstile?); want one of `)
	require.Contains(t, r.stderr, "userrecaptcha")
}

// task ls --method lists the waiting tasks of that method alone, and
// --limit counts those it keeps.
func TestTaskListByMethod(t *testing.T) {
	t.Parallel()
	natsURL, _, client := listeningServer(t, stream.Topology{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// No worker: every task waits, recaptchas first.
	var tasks []stream.Task
	for i := range 3 {
		tasks = append(tasks, stream.Task{ID: fmt.Sprintf("rc%d", i), Method: "userrecaptcha", Params: stream.Params{"googlekey": "k", "pageurl": "https://shop.example/"}})
	}
	for i := range 2 {
		tasks = append(tasks, stream.Task{ID: fmt.Sprintf("ts%d", i), Method: "turnstile", Params: stream.Params{"sitekey": "0x4AAAAAAAB", "pageurl": "https://shop.example/"}})
	}
	_, err := client.SubmitAll(ctx, tasks)
	require.NoError(t, err)
	ids := func(args ...string) []string {
		t.Helper()
		r := captchaq(t, natsURL, append([]string{"task", "ls", "--json"}, args...)...)
		require.Zero(t, r.code, r.stderr)
		var out []string
		for _, ti := range jsonLines[stream.TaskInfo](t, r.stdout) {
			out = append(out, ti.ID)
		}
		return out
	}
	require.Len(t, ids(), 5)
	require.Equal(t, []string{"ts0", "ts1"}, ids("--method", "turnstile"))
	require.Equal(t, []string{"ts0"}, ids("--method", "turnstile", "--limit", "1"))
	require.Empty(t, ids("--method", "geetest"))
}

// run with a key and a solver URL that nothing answers (the README's
// exports left set after its emulator is gone) stops at once, says how to
// get back to the built-in emulator, and submits nothing.
func TestRunRefusesAServiceThatIsGone(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "tasks.jsonl")
	require.NoError(t, os.WriteFile(file, []byte(`{"id":"gone-1","method":"turnstile","params":{"sitekey":"k","pageurl":"https://a.example/x"}}
`), 0o600))
	gone := freeAddr(t)
	r := captchaqEnv(t, "", keyEnv, "run", "--solver-url", "http://"+gone, file)
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stderr, "captchaq run: the solving service at "+gone+" cannot be reached (connection refused to "+gone)
	require.Contains(t, r.stderr, "unset CAPTCHAQ_SOLVER_URL and CAPTCHAAI_API_KEY to solve with the built-in emulator; nothing was submitted")
	require.NotContains(t, r.stderr, "real API")
	require.Empty(t, r.stdout, "no outcome: nothing was submitted")
}
