package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
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

// emulatorURL serves the solving service's emulator on 127.0.0.1.
func emulatorURL(t *testing.T, cfg fakeapi.Config) (*fakeapi.Server, string) {
	t.Helper()
	cfg.BurstLimit = 1 << 20
	api := fakeapi.New(cfg)
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	return api, srv.URL
}

// listeningServer starts an embedded nats-server on a random 127.0.0.1 port
// and creates the topology.
func listeningServer(t *testing.T, top stream.Topology) (string, jetstream.JetStream, *stream.Client) {
	t.Helper()
	ns, err := broker.Start(broker.Config{StoreDir: t.TempDir(), Listen: true, Port: -1, LazySync: true, StoreKey: testStoreKey}) // encrypted, as shipped
	require.NoError(t, err)
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	nc, err := nats.Connect(ns.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	// As `captchaq init`: producers and workers only find what it creates.
	_, err = stream.EnsureTopology(ctx, js.Conn(), top, true)
	require.NoError(t, err)
	_, err = stream.EnsureTimings(ctx, js.Conn(), top)
	require.NoError(t, err)
	c, err := stream.NewClient(ctx, nc, stream.ClientConfig{Topology: top, Name: "process-test"})
	require.NoError(t, err)
	return ns.ClientURL(), js, c
}

var keyEnv = []string{"CAPTCHAAI_API_KEY=" + fakeapi.TestKey}

// The sample task file through a separately started
// server, two worker processes and `submit --wait`, each task ending with
// exactly one outcome.
func TestSeparateProcessesEndToEnd(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	port := freePort(t)
	conf := filepath.Join(dir, "nats.conf")
	require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf("listen: 127.0.0.1:%d\njetstream { store_dir: %q }\n", port, filepath.Join(dir, "js"))), 0o600))
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	api, emu := emulatorURL(t, fakeapi.Config{TimeScale: 0.01, Seed: 1})

	server := startProc(t, nil, "server", "--config", conf, "--lazy-sync")
	server.waitLine("captchaq server ready", 30*time.Second)
	for i := range 2 {
		w := startProc(t, keyEnv, "worker", "--nats", url, "--solver-url", emu, "--poll-scale", "0.01", "--threads", "8",
			"--retry-initial", "20ms", "--retry-max", "50ms", "--name", fmt.Sprintf("proc-worker-%d", i+1))
		w.waitLine("worker started", 30*time.Second)
	}

	submit := exec.Command(os.Args[0], "submit", "--nats", url, "--wait", "--timeout", "2m", filepath.Join("..", "..", "testdata", "tasks.jsonl"))
	submit.Env = append(os.Environ(), childEnv...)
	submit.Stderr = &strings.Builder{}
	out, err := submit.Output()
	// The demo file fails three tasks on purpose (the emulator's demo site
	// keys): submit --wait exits 1 and names how many were not solved.
	require.Error(t, err, "submit --wait: %s", out)
	require.Equal(t, 1, submit.ProcessState.ExitCode())
	require.Contains(t, submit.Stderr.(*strings.Builder).String(), "2 of 30 tasks not solved")

	receipts, outcomes := map[string]bool{}, map[string]stream.Outcome{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		var line struct {
			stream.Outcome
			Seq uint64 `json:"seq"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &line), sc.Text())
		if line.Status == "" {
			receipts[line.ID] = true
			continue
		}
		_, dup := outcomes[line.ID]
		require.False(t, dup, "one outcome per task: %s", line.ID)
		outcomes[line.ID] = line.Outcome
	}
	require.Len(t, receipts, 30)
	require.Len(t, outcomes, 30)
	for id, o := range outcomes {
		require.True(t, receipts[id])
		switch id {
		case "demo-007": // site key "unsolvable": every attempt fails
			require.Equal(t, stream.StatusDead, o.Status, id)
			require.Equal(t, string(retry.ReasonAttemptsExhausted), string(o.Reason), id)
			require.Equal(t, retry.DefaultMaxAttempts, o.Attempts, id)
		case "demo-016": // site key "perm-fail": a permanent error, no retry
			require.Equal(t, stream.StatusDead, o.Status, id)
			require.Equal(t, string(retry.ReasonPermanent), string(o.Reason), id)
			require.Equal(t, 1, o.Attempts, id)
		case "demo-006": // site key "flaky-2": solved on the third attempt
			require.Equal(t, stream.StatusSolved, o.Status, id)
			require.Equal(t, 3, o.Attempts, id)
		default:
			require.Equal(t, stream.StatusSolved, o.Status, id)
			require.NotEmpty(t, o.Solution, id)
		}
	}
	require.Equal(t, 28, api.Stats().Solved)

	// Each task has exactly one outcome message in the stream, whoever solved it.
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	s, err := js.Stream(context.Background(), "CAPTCHA")
	require.NoError(t, err)
	info, err := s.Info(context.Background(), jetstream.WithSubjectFilter("captcha.results.>"))
	require.NoError(t, err)
	require.Len(t, info.State.Subjects, 30)
	for subj, n := range info.State.Subjects {
		require.Equal(t, uint64(1), n, subj)
	}

	require.NoError(t, server.cmd.Process.Signal(os.Interrupt))
	require.Zero(t, server.wait(30*time.Second), "clean shutdown")
}

// A task whose worker process is SIGKILLed on every delivery ends in the
// dead letter as crashed once the attempt budget is spent. No advisory
// listener is involved: the next worker to get the task counts the attempts
// that never ended in its event log.
func TestWorkerKilledOnEveryDeliveryEndsCrashed(t *testing.T) {
	t.Parallel()
	top := stream.Topology{AckWait: time.Second}
	url, _, client := listeningServer(t, top)
	api, emu := emulatorURL(t, fakeapi.Config{SolveTime: map[string]fakeapi.Range{solver.KindTurnstile: {Min: time.Hour, Max: time.Hour}}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := client.Submit(ctx, stream.Task{ID: "doomed", Method: "turnstile",
		Params: stream.Params{"sitekey": "0x4AAAAAAAB", "pageurl": "https://shop.example/checkout"}})
	require.NoError(t, err)

	worker := func() *proc {
		return startProc(t, keyEnv, "worker", "--nats", url, "--solver-url", emu, "--max-attempts", "3", "--threads", "1")
	}
	for attempt := 1; attempt <= 3; attempt++ {
		w := worker()
		// The worker is mid-solve once its attempt's captcha is in the
		// task's records: accepted by the service, or resumed from the
		// worker killed before.
		require.Eventually(t, func() bool {
			tr, err := client.Trace(ctx, r.ID)
			if err != nil {
				return false
			}
			n := 0
			for _, e := range tr {
				if e.Kind == string(stream.EventAccepted) {
					n++
				}
			}
			return n == attempt
		}, time.Minute, 10*time.Millisecond)
		w.kill()
	}
	w := worker()
	out, err := client.Wait(ctx, r.ID)
	require.ErrorIs(t, err, stream.ErrNotSolved)
	require.Equal(t, string(retry.ReasonCrashed), out.Reason)
	require.Equal(t, 3, out.Attempts)
	require.Equal(t, 1, api.Stats().Submitted, "every worker after the first polled the captcha the service had; none paid again")

	d, err := client.DeadLetterOf(ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, retry.ReasonCrashed, d.Reason)
	require.Equal(t, "WORKER_LOST", d.Error)
	tr, err := client.Trace(ctx, r.ID)
	require.NoError(t, err)
	attempts := 0
	for _, e := range tr {
		if e.Kind == "attempt" {
			attempts++
		}
	}
	require.Equal(t, 3, attempts)
	w.kill()
}

// startWorkerProcs starts n `captchaq worker` processes of threads each
// against the emulator at emu, every other flag at its default.
func startWorkerProcs(t *testing.T, n int, url, emu, threads string) {
	t.Helper()
	for range n {
		w := startProc(t, keyEnv, "worker", "--nats", url, "--solver-url", emu, "--poll-scale", "0.01", "--threads", threads)
		w.waitLine("worker started", 30*time.Second)
	}
}

// The plan-wide quota holds across worker processes: 5 processes × 20
// threads against a 15-thread plan never put more than 15 captchas at the
// service, and keep all 15 busy.
func TestPlanQuotaAcrossWorkerProcesses(t *testing.T) {
	t.Parallel()
	top := stream.Topology{}
	url, js, client := listeningServer(t, top)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, stream.SetPlan(ctx, js.Conn(), top, 15))
	api, emu := emulatorURL(t, fakeapi.Config{SolveTime: map[string]fakeapi.Range{solver.KindTurnstile: {Min: 600 * time.Millisecond, Max: 600 * time.Millisecond}}})
	startWorkerProcs(t, 5, url, emu, "20")
	tasks := make([]stream.Task, 90)
	for i := range tasks {
		tasks[i] = stream.Task{ID: fmt.Sprintf("p%02d", i), Method: "turnstile",
			Params: stream.Params{"sitekey": "0x4AAAAAAAB", "pageurl": "https://shop.example/checkout"}}
	}
	receipts, err := client.SubmitAll(ctx, tasks)
	require.NoError(t, err)
	solved := 0
	require.NoError(t, client.WaitAll(ctx, receipts, func(o stream.Outcome, err error) {
		require.NoError(t, err)
		solved++
	}))
	require.Equal(t, 90, solved)
	require.Equal(t, 15, api.Stats().MaxConcurrent)
}

// With every flag at its default, worker processes on CaptchaAI read the
// plan the service tells (threadsinfo) and the server's follower
// (followServicePlan, as `captchaq server` runs it) makes it the
// plan-wide quota before their first task: the emulator never holds more
// than its 6 threads, each task is paid once, and stats says whose plan
// it is.
func TestServicePlanIsThePoolsQuotaByDefault(t *testing.T) {
	t.Parallel()
	top := stream.Topology{}
	url, js, client := listeningServer(t, top)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, followServicePlan(ctx, js.Conn(), top, true, slog.New(slog.DiscardHandler)))
	api, emu := emulatorURL(t, fakeapi.Config{Threads: 6, SolveTime: map[string]fakeapi.Range{solver.KindTurnstile: {Min: 300 * time.Millisecond, Max: 600 * time.Millisecond}}})
	startWorkerProcs(t, 3, url, emu, "10")
	tasks := checkoutTasks("s", 30)
	receipts, err := client.SubmitAll(ctx, tasks)
	require.NoError(t, err)
	require.NoError(t, client.WaitAll(ctx, receipts, func(o stream.Outcome, err error) {
		require.NoError(t, err)
		require.Equal(t, stream.StatusSolved, o.Status)
	}))
	st := api.Stats()
	require.Equal(t, len(tasks), st.Submitted, "each task paid once")
	for k, n := range st.PerTask {
		require.Equal(t, 1, n, "task %s paid once", k)
	}
	require.LessOrEqual(t, st.MaxConcurrent, 6)
	n, err := stream.PlanThreads(ctx, js.Conn(), top)
	require.NoError(t, err)
	require.Equal(t, 6, n, "the quota is the plan the service told")
	r := captchaq(t, url, "stats")
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, "of 6 plan threads", r.stdout)
	require.Contains(t, r.stdout, "told by the service", r.stdout)
}

// `captchaq submit` against a full stream exits at once with the reason and
// the flag that sets the limit, and submits nothing of the file.
func TestSubmitToAFullStreamSaysSo(t *testing.T) {
	t.Parallel()
	top := stream.Topology{MaxBytes: 16 << 10}
	url, js, client := listeningServer(t, top)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := 0; ; i++ {
		_, err := client.Submit(ctx, stream.Task{ID: fmt.Sprintf("fill%02d", i), Method: "turnstile",
			Params: stream.Params{"sitekey": "0x4AAAAAAAB", "pageurl": "https://shop.example/checkout"}})
		if errors.Is(err, stream.ErrStreamFull) {
			break
		}
		require.NoError(t, err)
	}
	s, err := js.Stream(ctx, stream.DefaultStream)
	require.NoError(t, err)
	before, err := s.Info(ctx)
	require.NoError(t, err)
	p := startProc(t, nil, "submit", "--nats", url, filepath.Join("..", "..", "testdata", "tasks.jsonl"))
	require.Equal(t, 1, p.wait(30*time.Second), "exit status")
	out := p.output()
	require.Contains(t, out, "is full")
	require.Contains(t, out, "--max-bytes")
	after, err := s.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, before.State.Msgs, after.State.Msgs, "nothing of the file was submitted")
}

// A worker process the service refuses (a wrong key) stops and hands its
// tasks back at once, saying why: a worker with a good key solves them long
// before the 30-s ack wait would have brought them back.
func TestRefusedWorkerProcessHandsBackAtOnce(t *testing.T) {
	t.Parallel()
	url, _, client := listeningServer(t, stream.Topology{})
	_, emu := emulatorURL(t, fakeapi.Config{SolveTime: map[string]fakeapi.Range{solver.KindTurnstile: {Min: 100 * time.Millisecond, Max: 100 * time.Millisecond}}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var receipts []stream.Receipt
	for _, id := range []string{"rk-1", "rk-2"} {
		r, err := client.Submit(ctx, stream.Task{ID: id, Method: "turnstile",
			Params: stream.Params{"sitekey": "0x4AAAAAAAB", "pageurl": "https://shop.example/checkout"}})
		require.NoError(t, err)
		receipts = append(receipts, r)
	}
	bad := startProc(t, []string{"CAPTCHAAI_API_KEY=ffffffffffffffffffffffffffffffff"}, "worker", "--nats", url, "--solver-url", emu, "--threads", "2")
	require.NotZero(t, bad.wait(30*time.Second), "the refused worker exits with an error")
	require.Contains(t, bad.output(), "ERROR_KEY_DOES_NOT_EXIST")

	good := startProc(t, keyEnv, "worker", "--nats", url, "--solver-url", emu, "--poll-scale", "0.01")
	defer good.kill()
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second) // a third of the ack wait
	defer wcancel()
	n := 0
	require.NoError(t, client.WaitAll(wctx, receipts, func(o stream.Outcome, err error) {
		require.NoError(t, err, o.ID)
		n++
	}))
	require.Equal(t, 2, n)
	tr, err := client.Trace(ctx, "rk-1")
	require.NoError(t, err)
	var codes []string
	for _, e := range tr {
		codes = append(codes, string(e.Kind)+":"+e.Code)
	}
	require.Contains(t, codes, "handback:ERROR_KEY_DOES_NOT_EXIST", "the refusal is recorded as what it was: %v", codes)
}

// A worker started before its NATS server waits for it, says so, and takes
// tasks once the server is up: containers and units often start together.
func TestWorkerWaitsForNATS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	port := freePort(t)
	conf := filepath.Join(dir, "nats.conf")
	require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf("listen: 127.0.0.1:%d\njetstream { store_dir: %q }\n", port, filepath.Join(dir, "js"))), 0o600))
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	_, emu := emulatorURL(t, fakeapi.Config{TimeScale: 0.001})

	w := startProc(t, keyEnv, "worker", "--nats", url, "--solver-url", emu, "--poll-scale", "0.001", "--threads", "2")
	w.waitLine("waiting for the NATS server", 15*time.Second)
	require.Contains(t, w.output(), fmt.Sprintf("127.0.0.1:%d", port))
	w.waitLine("retry_in=", 15*time.Second)

	server := startProc(t, nil, "server", "--config", conf, "--lazy-sync")
	server.waitLine("captchaq server ready", 30*time.Second)
	w.waitLine("worker started", 60*time.Second)

	out := captchaq(t, url, "solve", "--method", "turnstile", "--param", "sitekey=0x4AAAAAAAB", "--param", "pageurl=https://shop.example/", "--timeout", "30s")
	require.Zero(t, out.code, out.stderr)
}

// A cluster node started before its peers waits for them, says so, and
// creates the topology once they are up, instead of giving up after 30 s.
func TestServerWaitsForItsClusterPeers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var client, route [3]int
	for i := range 3 {
		client[i], route[i] = freePort(t), freePort(t)
	}
	confs := make([]string, 3)
	for i := range 3 {
		confs[i] = filepath.Join(dir, fmt.Sprintf("node%d.conf", i+1))
		require.NoError(t, os.WriteFile(confs[i], []byte(fmt.Sprintf(`server_name: n%d
listen: 127.0.0.1:%d
jetstream { store_dir: %q }
cluster {
  name: waits
  listen: 127.0.0.1:%d
  routes: [nats-route://127.0.0.1:%d, nats-route://127.0.0.1:%d, nats-route://127.0.0.1:%d]
}
`, i+1, client[i], filepath.Join(dir, fmt.Sprintf("js%d", i+1)), route[i], route[0], route[1], route[2])), 0o600))
	}
	first := startProc(t, nil, "server", "--config", confs[0], "--replicas", "3", "--lazy-sync")
	first.waitLine("waiting for the cluster's peers", 30*time.Second)
	first.waitLine("retry_in=", 30*time.Second)
	for _, c := range confs[1:] {
		p := startProc(t, nil, "server", "--config", c, "--replicas", "3", "--lazy-sync")
		defer p.waitLine("captchaq server ready", 90*time.Second)
	}
	first.waitLine("captchaq server ready", 90*time.Second)
}
