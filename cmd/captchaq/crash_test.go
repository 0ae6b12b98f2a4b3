package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
)

// brokerCrashRun sizes one run of the broker-crash test.
type brokerCrashRun struct {
	tasks, workers, threads, crashes int
	timeout                          time.Duration
}

// A broker SIGKILLed while attempts are in flight, and restarted: no task
// is paid twice while the worker of its attempt lives (here workers never
// die), and every reader of an outcome gets the outcome's own token.
func TestBrokerKilledMidSolvePaysOnceAndTokensMatchOutcomes(t *testing.T) {
	t.Parallel()
	runBrokerCrash(t, brokerCrashRun{tasks: 80, workers: 2, threads: 10, crashes: 3, timeout: 90 * time.Second})
}

// The same with more tasks and three broker crashes:
// CAPTCHAQ_SOAK=1 go test -race -run BrokerCrashSoak ./cmd/captchaq/
func TestBrokerCrashSoak(t *testing.T) {
	if os.Getenv("CAPTCHAQ_SOAK") != "1" {
		t.Skip("soak: set CAPTCHAQ_SOAK=1")
	}
	t.Parallel()
	runBrokerCrash(t, brokerCrashRun{tasks: 300, workers: 2, threads: 10, crashes: 3, timeout: 10 * time.Minute})
}

func runBrokerCrash(t *testing.T, run brokerCrashRun) {
	// fsync before every ack, as shipped: what the broker acknowledged
	// survives its crash; the consumers' delivery state may not. Solves
	// outlast the ack wait: a task redelivered after the crash comes back
	// while its first attempt is still at the service.
	server := startProcBroker(t, "2s")
	url := server.url

	api := fakeapi.New(fakeapi.Config{Seed: time.Now().UnixNano(), BurstLimit: 1 << 20,
		SolveTime: map[string]fakeapi.Range{solver.KindTurnstile: {Min: 2 * time.Second, Median: 4 * time.Second, Max: 7 * time.Second}}})
	calls, emu := countedEmulator(t, api)
	for i := range run.workers {
		w := startProc(t, keyEnv, "worker", "--nats", url, "--solver-url", emu, "--poll-scale", "0.2", // polls outlast the slowest solve
			"--threads", itoa(run.threads), "--ack-wait", "2s", "--name", fmt.Sprintf("crash-worker-%d", i+1))
		w.waitLine("worker started", 30*time.Second)
	}

	ctx, cancel := context.WithTimeout(context.Background(), run.timeout)
	defer cancel()
	nc, client, tasks := submitTurnstiles(ctx, t, url, "crash", 4, run.tasks)

	submitted := func() int {
		calls.mu.Lock()
		defer calls.mu.Unlock()
		return len(calls.at)
	}
	for c := range run.crashes {
		// Kill the broker once the service has been handed a share of the
		// tasks: attempts are in flight at the workers.
		want := run.tasks * (c + 1) / (run.crashes + 2)
		require.Eventually(t, func() bool { return submitted() >= want }, run.timeout, 20*time.Millisecond)
		server.kill()
		t.Logf("broker killed after %d tasks reached the service", submitted())
		server.restart()
	}

	// Every task ends; read each outcome twice, by two readers.
	type read struct {
		out stream.Outcome
		err error
	}
	reads := map[string][2]read{}
	for _, task := range tasks {
		var r [2]read
		for i := range r {
			r[i].out, r[i].err = client.Wait(ctx, task.ID)
			if r[i].err != nil && !errors.Is(r[i].err, stream.ErrTokenExpired) {
				require.NoError(t, r[i].err, task.ID)
			}
		}
		reads[task.ID] = r
	}

	js, err := jetstream.New(nc)
	require.NoError(t, err)
	s, err := js.Stream(ctx, stream.DefaultStream)
	require.NoError(t, err)
	results := subjectCounts(ctx, t, s, "captcha.results.>")
	tokens, lost := 0, 0
	calls.mu.Lock()
	defer calls.mu.Unlock()
	for _, task := range tasks {
		id := task.ID
		require.Equal(t, uint64(1), results["captcha.results."+id], "%s: exactly one outcome", id)
		require.Len(t, calls.at[id], 1, "%s: paid once (its worker never died)", id)
		r := reads[id]
		for i := range r {
			require.Equal(t, stream.StatusSolved, r[i].out.Status, id)
			if r[i].err != nil {
				lost++ // the token stream is in memory: a token stored before the crash is gone
				continue
			}
			tokens++
			var tok string
			require.NoError(t, json.Unmarshal(r[i].out.Solution, &tok), id)
			// The emulator's tokens embed their captcha's id.
			mark := base64.RawURLEncoding.EncodeToString([]byte(r[i].out.CaptchaID))
			require.True(t, strings.Contains(tok, mark), "%s: reader %d got the token of another captcha than the outcome's (%s)", id, i, r[i].out.CaptchaID)
		}
		if r[0].err == nil && r[1].err == nil {
			require.Equal(t, string(r[0].out.Solution), string(r[1].out.Solution), "%s: two readers, one token", id)
		}
	}
	t.Logf("%d tasks, %d broker crashes: %d in.php, %d tokens read, %d lost with the broker's memory", run.tasks, run.crashes,
		api.Stats().InCalls, tokens, lost)
	require.Positive(t, tokens)
}
