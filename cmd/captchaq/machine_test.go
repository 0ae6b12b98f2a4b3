package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
)

// pausedWorkerRun sizes one run of the paused-worker test.
type pausedWorkerRun struct {
	tasks int
	// pause is how long the first worker is stopped (SIGSTOP) with every
	// task at the service; resolved says whether another worker is then
	// expected to take them over (the pause outlived the heartbeat).
	pause    time.Duration
	resolved bool
	// kill SIGKILLs the first worker instead; ackWait is the consumers'
	// (default 3s).
	kill    bool
	ackWait string
	// crashBroker SIGKILLs the broker too, right after the worker, and
	// restarts it on the same store.
	crashBroker bool
}

// A worker paused (SIGSTOP) for longer than the ack wait but within its
// heartbeat's lifetime still lives: its tasks, redelivered, wait for it
// and are paid once. Continued (SIGCONT), it ends each with one outcome.
func TestPausedWorkerWithinItsHeartbeatPaysOnce(t *testing.T) {
	t.Parallel()
	runPausedWorker(t, pausedWorkerRun{tasks: 4, pause: 7 * time.Second})
}

// A worker paused for longer than its heartbeat's lifetime is taken for
// dead: another worker takes its tasks and polls the captchas they were
// given (paid once). Continued, the paused worker finds its answers late:
// each task still ends with exactly one outcome, and every reader gets that
// outcome's own token.
func TestPausedWorkerPastItsHeartbeatEndsEachTaskOnce(t *testing.T) {
	t.Parallel()
	runPausedWorker(t, pausedWorkerRun{tasks: 4, pause: 24 * time.Second, resolved: true})
}

// A worker SIGKILLed mid-solve, with the default ack wait: its tasks come
// back once the ack wait has passed and its heartbeat has expired, and the
// next worker polls the captchas the dead one was given: paid once.
func TestKilledWorkerTasksComeBack(t *testing.T) {
	t.Parallel()
	runPausedWorker(t, pausedWorkerRun{tasks: 4, pause: 50 * time.Second, resolved: true, kill: true, ackWait: "30s"})
}

// A worker and then the broker SIGKILLed, the broker restarted at once: the
// dead worker's tasks come back to the other worker (its heartbeat expires
// on the restarted broker too) and end once.
func TestKilledWorkerAndBrokerTasksComeBack(t *testing.T) {
	t.Parallel()
	runPausedWorker(t, pausedWorkerRun{tasks: 4, pause: 50 * time.Second, resolved: true, kill: true, ackWait: "30s", crashBroker: true})
}

func runPausedWorker(t *testing.T, run pausedWorkerRun) {
	if run.ackWait == "" {
		run.ackWait = "3s"
	}
	server := startProcBroker(t, run.ackWait)
	url := server.url

	// Solves take 3-4 s: every task is at the service when the worker stops,
	// and answered while it is stopped.
	api := fakeapi.New(fakeapi.Config{Seed: time.Now().UnixNano(), BurstLimit: 1 << 20,
		SolveTime: map[string]fakeapi.Range{solver.KindTurnstile: {Min: 3 * time.Second, Median: 3500 * time.Millisecond, Max: 4 * time.Second}}})
	calls, emu := countedEmulator(t, api)
	worker := func(name string) *proc {
		w := startProc(t, keyEnv, "worker", "--nats", url, "--solver-url", emu, "--poll-scale", "0.2",
			"--threads", itoa(run.tasks), "--ack-wait", run.ackWait, "--name", name)
		w.waitLine("worker started", 30*time.Second)
		return w
	}
	paused := worker("paused-worker")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nc, client, tasks := submitTurnstiles(ctx, t, url, "pause", 2, run.tasks)
	paid := func() (tasks, calls_ int) {
		calls.mu.Lock()
		defer calls.mu.Unlock()
		for _, at := range calls.at {
			tasks++
			calls_ += len(at)
		}
		return tasks, calls_
	}
	require.Eventually(t, func() bool { n, _ := paid(); return n == run.tasks }, 30*time.Second, 10*time.Millisecond)
	// Each captcha's id is in its task's records (an accepted event) before
	// the worker stops: from then on no one pays for the task again.
	require.Eventually(t, func() bool {
		for _, task := range tasks {
			tr, err := client.Trace(ctx, task.ID)
			if err != nil || !slices.ContainsFunc(tr, func(e stream.TraceEntry) bool { return e.Kind == string(stream.EventAccepted) }) {
				return false
			}
		}
		return true
	}, 30*time.Second, 10*time.Millisecond, "every captcha's id recorded")

	sig := syscall.SIGSTOP
	if run.kill {
		sig = syscall.SIGKILL
	}
	require.NoError(t, paused.cmd.Process.Signal(sig))
	stopped := time.Now()
	if run.crashBroker {
		paused.wait(10 * time.Second)
		server.kill()
		server.restart()
	}
	t.Cleanup(func() { _ = paused.cmd.Process.Signal(syscall.SIGCONT) })
	other := worker("other-worker")
	if run.resolved {
		// Taken for dead once its heartbeat expired: the other worker
		// takes its tasks and polls the captchas it was given.
		other.waitLine("resuming the captcha the service accepted for the last attempt", run.pause)
		t.Logf("tasks of the stopped worker resumed %s after it stopped", time.Since(stopped).Round(100*time.Millisecond))
	}
	if !run.kill {
		time.Sleep(time.Until(stopped.Add(run.pause))) // the pause itself: nothing to wait on
		require.NoError(t, paused.cmd.Process.Signal(syscall.SIGCONT))
	}

	type read struct {
		out stream.Outcome
		err error
	}
	for _, task := range tasks {
		var r [2]read
		for i := range r {
			r[i].out, r[i].err = client.Wait(ctx, task.ID)
			require.NoError(t, r[i].err, task.ID)
			require.Equal(t, stream.StatusSolved, r[i].out.Status, task.ID)
			var tok string
			require.NoError(t, json.Unmarshal(r[i].out.Solution, &tok), task.ID)
			mark := base64.RawURLEncoding.EncodeToString([]byte(r[i].out.CaptchaID))
			require.True(t, strings.Contains(tok, mark), "%s: reader %d got the token of another captcha than the outcome's (%s)", task.ID, i, r[i].out.CaptchaID)
		}
		require.Equal(t, string(r[0].out.Solution), string(r[1].out.Solution), "%s: two readers, one token", task.ID)
	}
	// Let the continued worker finish what it holds, then count.
	if !run.kill {
		require.NoError(t, paused.cmd.Process.Signal(syscall.SIGTERM))
		paused.wait(40 * time.Second)
	}
	require.NoError(t, other.cmd.Process.Signal(syscall.SIGTERM))
	other.wait(40 * time.Second)

	js, err := jetstream.New(nc)
	require.NoError(t, err)
	s, err := js.Stream(ctx, stream.DefaultStream)
	require.NoError(t, err)
	results := subjectCounts(ctx, t, s, "captcha.results.>")
	dead := subjectCounts(ctx, t, s, "captcha.dead.>")
	_, n := paid()
	t.Logf("%d tasks, worker paused or killed (kill=%v), %s: %d in.php", run.tasks, run.kill, run.pause, n)
	for _, task := range tasks {
		require.Equal(t, uint64(1), results["captcha.results."+task.ID], "%s: exactly one outcome", task.ID)
		require.Zero(t, dead["captcha.dead."+task.ID], "%s: no dead letter", task.ID)
	}
	require.Equal(t, run.tasks, n, "paid once: a worker that takes over polls the captcha its task was given")
}

// Tokens solved before the disk filled, not read yet, survive the store's
// reopening (the token stream is in memory, and a reopening empties it as a
// restart would): after the recovery every task has one outcome, and its
// readers get that outcome's own token.
func TestFullDiskReopeningKeepsUnreadTokens(t *testing.T) {
	t.Parallel()
	dir := smallDisk(t, "24m")
	server, url := diskServer(t, dir)
	client := diskClient(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	api := fakeapi.New(fakeapi.Config{Seed: 7, BurstLimit: 1 << 20,
		SolveTime: map[string]fakeapi.Range{solver.KindTurnstile: {Min: 2 * time.Second, Median: 2 * time.Second, Max: 2 * time.Second}}})
	emu := httptest.NewServer(api)
	t.Cleanup(emu.Close)
	w := startProc(t, keyEnv, "worker", "--nats", url, "--solver-url", emu.URL, "--threads", "2", "--poll-scale", "0.2")
	w.waitLine("worker started", 30*time.Second)
	var receipts []stream.Receipt
	for i := range 6 {
		r, err := client.Submit(ctx, stream.Task{ID: fmt.Sprintf("reopen-%d", i), Method: "turnstile",
			Params: stream.Params{"sitekey": "0x4AAAAAAAB", "pageurl": fmt.Sprintf("https://shop.example/reopen/%d", i)}}) // a page each: paid counted per task
		require.NoError(t, err)
		receipts = append(receipts, r)
	}
	_, err := client.Wait(ctx, receipts[0].ID) // solved, its token stored: the disk fills while others are at the service
	require.NoError(t, err)
	filler := fillDisk(t, dir, 0)
	server.waitLine("the JetStream store refuses writes", 60*time.Second)
	require.NoError(t, os.Remove(filler))
	server.waitLine("the JetStream store takes writes again", 30*time.Second)

	lost := 0
	for _, r := range receipts {
		for reader := range 2 {
			out, err := client.Wait(ctx, r.ID)
			if errors.Is(err, stream.ErrTokenExpired) {
				lost++
				continue
			}
			require.NoError(t, err, r.ID)
			var tok string
			require.NoError(t, json.Unmarshal(out.Solution, &tok), r.ID)
			mark := base64.RawURLEncoding.EncodeToString([]byte(out.CaptchaID))
			require.True(t, strings.Contains(tok, mark), "%s: reader %d got another captcha's token", r.ID, reader)
		}
	}
	js, err := jetstream.New(diskConn(t, url))
	require.NoError(t, err)
	s, err := js.Stream(ctx, stream.DefaultStream)
	require.NoError(t, err)
	results := subjectCounts(ctx, t, s, "captcha.results.>")
	for _, r := range receipts {
		require.Equal(t, uint64(1), results["captcha.results."+r.ID], "%s: one outcome", r.ID)
	}
	t.Logf("6 tasks over a full disk and its reopening: %d in.php, %d of 12 reads without their token", api.Stats().InCalls, lost)
	require.Zero(t, lost, "tokens not read yet are kept over the reopening")
	paidOnce(t, api, len(receipts))
}

func diskConn(t *testing.T, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}
