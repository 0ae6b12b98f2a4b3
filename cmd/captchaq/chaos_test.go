package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
)

// chaosRun sizes one chaos run.
type chaosRun struct {
	tasks, workers, threads, kills int
	// killEvery is the pause between two kills: uniformly random in
	// [killEvery/2, killEvery*3/2).
	killEvery time.Duration
	timeout   time.Duration
}

// Under injected faults and repeated worker kills,
// every submitted task ends with exactly one outcome, solved or dead with a
// reason, and the service is never asked to solve a task that already has
// its outcome.
func TestChaosFaultsAndKilledWorkersOneOutcomePerTask(t *testing.T) {
	t.Parallel()
	runChaos(t, chaosRun{tasks: 100, workers: 3, threads: 2, kills: 8, killEvery: 250 * time.Millisecond, timeout: 2 * time.Minute})
}

// The same at ten times the size, about 40 s: 1000 tasks, 4 workers, 80
// kills. CAPTCHAQ_SOAK=1 go test -race -run ChaosSoak ./cmd/captchaq/
func TestChaosSoak(t *testing.T) {
	if os.Getenv("CAPTCHAQ_SOAK") != "1" {
		t.Skip("soak: set CAPTCHAQ_SOAK=1")
	}
	t.Parallel()
	runChaos(t, chaosRun{tasks: 1000, workers: 4, threads: 4, kills: 80, killEvery: 300 * time.Millisecond, timeout: 15 * time.Minute})
}

// inCalls records when each task's in.php submissions reached the
// emulator, by the task id at the end of its page URL.
type inCalls struct {
	mu sync.Mutex
	at map[string][]time.Time
}

func (c *inCalls) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/in.php" {
			now := time.Now()
			b, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(b))
			if v, err := url.ParseQuery(string(b)); err == nil {
				if u, err := url.Parse(v.Get("pageurl")); err == nil && u.Path != "" {
					c.mu.Lock()
					c.at[path.Base(u.Path)] = append(c.at[path.Base(u.Path)], now)
					c.mu.Unlock()
				}
			}
		}
		h.ServeHTTP(w, r)
	})
}

func runChaos(t *testing.T, run chaosRun) {
	start := time.Now()
	top := stream.Topology{AckWait: time.Second}
	natsURL, js, client := listeningServer(t, top)
	ctx, cancel := context.WithTimeout(context.Background(), run.timeout)
	defer cancel()

	// The service fails in every way it can: 5% HTTP 500 pages and 5%
	// garbage bodies on any request, a quarter of the captchas unsolvable,
	// and every page on bad.example rejected as a bad page URL.
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	api := fakeapi.New(fakeapi.Config{Seed: seed, BurstLimit: 1 << 20,
		SolveTime: map[string]fakeapi.Range{fakeapi.KindTurnstile: {Min: 20 * time.Millisecond, Median: 60 * time.Millisecond, Max: 300 * time.Millisecond}},
		Faults: fakeapi.Faults{HTTP500: 0.05, Garbage: 0.05, Unsolvable: 0.25,
			Rules: []fakeapi.Rule{{Param: "pageurl", Contains: "bad.example", Code: "ERROR_PAGEURL"}}}})
	calls := &inCalls{at: map[string][]time.Time{}}
	emu := httptest.NewServer(calls.wrap(api))
	t.Cleanup(emu.Close)

	n := 0 // worker processes started
	worker := func() *proc {
		n++
		w := startProc(t, keyEnv, "worker", "--nats", natsURL, "--solver-url", emu.URL, "--poll-scale", "0.01",
			"--threads", itoa(run.threads), "--ack-wait", "1s", "--max-attempts", "3", "--retry-initial", "20ms", "--retry-max", "100ms",
			"--name", fmt.Sprintf("chaos-worker-%d", n))
		w.waitLine("worker started", 30*time.Second)
		return w
	}
	workers := make([]*proc, run.workers)
	for i := range workers {
		workers[i] = worker()
	}

	tasks := make([]stream.Task, run.tasks)
	for i := range tasks {
		id := fmt.Sprintf("chaos%04d", i)
		host := "shop.example"
		if i%10 == 3 {
			host = "bad.example"
		}
		tasks[i] = stream.Task{ID: id, Method: "turnstile",
			Params: stream.Params{"sitekey": "0x4AAAAAAAB", "pageurl": "https://" + host + "/chaos/" + id}}
	}
	receipts, err := client.SubmitAll(ctx, tasks)
	require.NoError(t, err)

	var mu sync.Mutex
	outcomes := map[string][]stream.Outcome{}
	done := make(chan error, 1)
	go func() {
		done <- client.WaitAll(ctx, receipts, func(o stream.Outcome, _ error) {
			mu.Lock()
			outcomes[o.ID] = append(outcomes[o.ID], o)
			mu.Unlock()
		})
	}()

	// SIGKILL a random worker every few hundred ms and start another in its
	// place, until the kills are spent or every outcome is in.
	rng := rand.New(rand.NewPCG(uint64(seed), 7))
	kills := 0
	var waitErr error
	finished := false
	for kills < run.kills && !finished {
		pause := run.killEvery/2 + time.Duration(rng.Int64N(int64(run.killEvery)))
		select {
		case waitErr = <-done:
			finished = true
			continue
		case <-time.After(pause): // chaos pacing, not synchronisation
		}
		i := rng.IntN(len(workers))
		workers[i].kill()
		kills++
		workers[i] = worker()
	}
	if !finished {
		select {
		case waitErr = <-done:
		case <-ctx.Done():
			t.Fatalf("not every task ended within %s", run.timeout)
		}
	}
	require.NoError(t, waitErr)
	allIn := time.Since(start)

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, outcomes, run.tasks)

	s, err := js.Stream(ctx, stream.DefaultStream)
	require.NoError(t, err)
	// Nothing stranded: every task message was acked by some worker. A task
	// whose worker died between storing the outcome and acking comes back
	// after the ack wait and is only acked then, never solved again.
	require.Eventually(t, func() bool {
		for _, c := range []string{"workers-fast-normal", "workers-fast-high", "workers-slow-normal", "workers-slow-high"} {
			info, err := s.Consumer(ctx, c)
			if err != nil {
				return false
			}
			ci, err := info.Info(ctx)
			if err != nil || ci.NumPending > 0 || ci.NumAckPending > 0 {
				return false
			}
		}
		return true
	}, 30*time.Second, 50*time.Millisecond, "every task message acked")

	// Exactly one outcome message per task, in the stream itself, once
	// every redelivery has settled.
	results := subjectCounts(ctx, t, s, "captcha.results.>")
	require.Len(t, results, run.tasks)
	for subj, n := range results {
		require.Equal(t, uint64(1), n, "%s: exactly one outcome", subj)
	}
	deadCounts := subjectCounts(ctx, t, s, "captcha.dead.>")

	letters, err := client.DeadLetters(ctx, stream.DeadFilter{})
	require.NoError(t, err)
	dead := map[string]stream.DeadLetter{}
	for _, d := range letters {
		dead[d.ID] = d
	}
	require.Len(t, dead, len(letters), "one dead letter per task at most")

	events := taskEvents(ctx, t, s)
	byStatus, byReason := map[stream.Status]int{}, map[string]int{}
	crashed, attempts := 0, 0
	for i, task := range tasks {
		id := task.ID
		require.Len(t, outcomes[id], 1, id)
		o := outcomes[id][0]
		byStatus[o.Status]++
		bad := i%10 == 3
		switch o.Status {
		case stream.StatusSolved:
			require.False(t, bad, "%s: a page the service rejects is never solved", id)
			require.NotEmpty(t, o.Solution, id)
			require.Empty(t, o.Reason, id)
			require.NotContains(t, dead, id, "%s: solved and dead-lettered", id)
		case stream.StatusDead:
			byReason[o.Reason]++
			reason := retry.Reason(o.Reason)
			require.True(t, reason.Valid(), "%s: reason %q", id, o.Reason)
			want := []retry.Reason{retry.ReasonAttemptsExhausted, retry.ReasonCrashed}
			if bad { // unless faults or kills spent its budget before the service said so
				want = append(want, retry.ReasonPermanent)
			}
			require.Contains(t, want, reason, id)
			d, ok := dead[id]
			require.True(t, ok, "%s: dead without a dead letter", id)
			require.Equal(t, reason, d.Reason, id)
			require.Equal(t, o.Error, d.Error, id)
			require.Equal(t, o.Attempts, d.Attempts, id)
			require.Equal(t, uint64(1), deadCounts["captcha.dead."+id], id)
		default:
			t.Fatalf("%s: status %q", id, o.Status)
		}
		require.GreaterOrEqual(t, o.Attempts, 1, id)
		require.LessOrEqual(t, o.Attempts, 3, id)

		// The event log agrees with the outcome: it ends with the verdict
		// of a dead task, with the attempt that solved a solved one (or
		// the news of its captcha, which follows it: accepted, held, answered).
		evs := events[id]
		require.NotEmpty(t, evs, id)
		last := evs[len(evs)-1]
		if o.Status == stream.StatusSolved {
			require.Contains(t, []stream.EventKind{stream.EventAttempt, stream.EventAccepted, stream.EventHeld, stream.EventAnswered}, last.Kind, "%s: %+v", id, last)
		} else {
			require.Equal(t, stream.EventDead, last.Kind, "%s: %+v", id, last)
		}
		require.Equal(t, o.Attempts, last.Attempts, id)
		for _, ev := range evs {
			if ev.Kind == stream.EventAttempt {
				attempts++
				if ev.Crashed {
					crashed++
				}
			}
		}

		// The service never got this task after its outcome was stored.
		m, err := s.GetLastMsgForSubject(ctx, "captcha.results."+id)
		require.NoError(t, err, id)
		calls.mu.Lock()
		for _, at := range calls.at[id] {
			require.True(t, at.Before(m.Time), "%s: in.php at %s, after its outcome at %s", id, at.Format(time.RFC3339Nano), m.Time.Format(time.RFC3339Nano))
		}
		calls.mu.Unlock()
	}
	st := api.Stats()
	t.Logf("%d tasks, %d worker processes, %d kills: %v %v; %d attempts, %d after a crash; emulator %d in.php, %d res.php, codes %v; outcomes after %s, total %s",
		run.tasks, n, kills, byStatus, byReason, attempts, crashed, st.InCalls, st.ResCalls, st.Codes, allIn.Round(time.Millisecond),
		time.Since(start).Round(time.Millisecond))
	require.Positive(t, byStatus[stream.StatusSolved])
	require.Positive(t, byReason[string(retry.ReasonPermanent)])
	require.Positive(t, crashed, "some kill hit a worker in the middle of a task")
	require.GreaterOrEqual(t, st.Solved, byStatus[stream.StatusSolved],
		"answers fetched by workers killed before they stored them are solved again, never the other way round")
}

// subjectCounts returns how many messages the stream holds per subject
// matching filter.
func subjectCounts(ctx context.Context, t *testing.T, s jetstream.Stream, filter string) map[string]uint64 {
	t.Helper()
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(filter))
	require.NoError(t, err)
	return info.State.Subjects
}

// taskEvents reads every task's event log, oldest first, by task id.
func taskEvents(ctx context.Context, t *testing.T, s jetstream.Stream) map[string][]stream.Event {
	t.Helper()
	out := map[string][]stream.Event{}
	total := 0
	for _, n := range subjectCounts(ctx, t, s, "captcha.events.>") {
		total += int(n)
	}
	// Direct gets, not a consumer: the stream is a work queue, on which
	// only the workers' consumers may read.
	var seq uint64 = 1
	for read := 0; read < total; read++ {
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject("captcha.events.>"))
		require.NoError(t, err, "events stopped after %d of %d", read, total)
		var ev stream.Event
		require.NoError(t, json.Unmarshal(m.Data, &ev), m.Subject)
		id := path.Ext(m.Subject)[1:]
		out[id] = append(out[id], ev)
		seq = m.Sequence + 1
	}
	return out
}
