package stream

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream/wire"
)

// A captcha handed back by a worker whose clock is right is resumed by a
// worker whose clock is three minutes ahead: the resumed captcha is as old
// as it is on the broker's clock, not three minutes older, so it is polled
// until its answer comes instead of given up as past its wait and paid
// again.
func TestResumeByAWorkerWithAnotherClockPaysOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	log := debugLog(t)
	api := fakeapi.New(fakeapi.Config{BurstLimit: 1 << 20, SolveTime: map[string]fakeapi.Range{fakeapi.KindTurnstile: fixed(3 * time.Second)}})
	apiURL, stopAPI, err := fakeapi.ServeLocal(api)
	require.NoError(t, err)
	t.Cleanup(stopAPI)
	// MaxWait 20 s (1000 s scaled by 0.02): far more than the solve's 3 s,
	// far less than the second worker's 3 minutes of skew.
	timing := solver.Timing{Scale: 0.02, Fixed: true, MaxCalls: 1000, MaxWait: map[string]time.Duration{solver.KindTurnstile: 1000 * time.Second}}
	right, err := solver.NewClient(solver.Config{BaseURL: apiURL, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1,
		Timing: timing, Logger: log})
	require.NoError(t, err)
	first := b.startWorker(t, WorkerConfig{Solver: right, Threads: 1, ShutdownGrace: time.Millisecond})
	r, err := b.client.Submit(ctx, turnstileTask("skewed-resume"))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		st := api.Stats()
		return st.Submitted == 1 && len(st.ResCallsPerCaptcha) == 1
	}, 20*time.Second, time.Millisecond, "the captcha was never polled")
	first.stop()
	require.Eventually(t, func() bool {
		evs := b.events(t, "skewed-resume")
		return len(evs) > 0 && evs[len(evs)-1].Kind == EventHandback
	}, 20*time.Second, 10*time.Millisecond, "the stopping worker handed nothing back")

	ahead := func() time.Time { return time.Now().Add(3 * time.Minute) }
	skewed, err := solver.NewClient(solver.Config{BaseURL: apiURL, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1,
		Timing: timing, Logger: log, Now: ahead})
	require.NoError(t, err)
	b.startWorker(t, WorkerConfig{Solver: skewed, Threads: 1, Logger: log, Now: ahead})
	out, err := b.client.Wait(ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, StatusSolved, out.Status, "%+v", out)
	st := api.Stats()
	require.Equal(t, 1, st.Submitted, "paid once: %v", kinds(b.events(t, "skewed-resume")))
	require.Len(t, st.PerTask, 1, "%v", st.PerTask)
	for k, n := range st.PerTask {
		require.Equal(t, 1, n, "task %s paid once", k)
	}
	require.Equal(t, 1, out.Attempts, "%+v", out)
}

// The service accepts a captcha and its in.php reply is cut mid-JSON: no
// one can know the captcha's id, so the task is submitted again (paid
// twice: the one case the worker guarantees do not cover), and its trace
// says that the failed attempt's captcha may have been paid.
func TestInPHPReplyCutSaysItMayHaveBeenPaid(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	api := fakeapi.New(fakeapi.Config{BurstLimit: 1 << 20, SolveTime: map[string]fakeapi.Range{fakeapi.KindTurnstile: fixed(100 * time.Millisecond)}})
	var cut atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/in.php" || !cut.CompareAndSwap(false, true) {
			api.ServeHTTP(w, r)
			return
		}
		// The service takes the captcha (and is paid), and the reply
		// is lost on the way.
		api.ServeHTTP(httptest.NewRecorder(), r)
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n{\"status\":1,\"req")
		_ = buf.Flush()
		_ = conn.Close()
	}))
	t.Cleanup(srv.Close)
	sc, err := solver.NewClient(solver.Config{BaseURL: srv.URL, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1,
		Timing: solver.Timing{Scale: 0.01, Fixed: true}})
	require.NoError(t, err)
	b.startWorker(t, WorkerConfig{Solver: sc, Threads: 1})
	out, err := b.client.Solve(ctx, turnstileTask("cut-reply"))
	require.NoError(t, err)
	require.Equal(t, StatusSolved, out.Status, "%+v", out)
	st := api.Stats()
	require.Equal(t, 2, st.Submitted, "the captcha whose reply was lost, and the one solved")
	tr, err := b.client.Trace(ctx, "cut-reply")
	require.NoError(t, err)
	var said bool
	var all []string
	for _, e := range tr {
		all = append(all, e.Kind+": "+e.Detail)
		said = said || e.Kind == string(EventRetry) && strings.Contains(e.Detail, "may have been paid")
	}
	require.True(t, said, "the retry says its captcha may have been paid:\n%s", strings.Join(all, "\n"))
}

// A producer cannot plant a captcha for a task to resume: the records
// that name one (accepted, held, answered, a handback) are the workers'
// to write, so a producer can make no worker poll a captcha id of its
// choosing (another's, to take its answer unpaid) nor end one.
func TestAuthProducerCannotForgeACaptchaEvent(t *testing.T) {
	t.Parallel()
	ns := authServer(t)
	ctx := testContext(t)
	nc, errs := roleConn(t, ns, "producer")
	c, err := NewClient(ctx, nc, ClientConfig{})
	require.NoError(t, err)
	r, err := c.Submit(ctx, turnstileTask("p-forge"))
	require.NoError(t, err)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ev := fmt.Sprintf(`{"kind":"accepted","gen":%d,"attempts":1,"captcha_id":"70000000001","accepted_at":"2026-01-01T00:00:00Z"}`, r.Seq)
	for _, subj := range []string{"captcha.events.p-forge", "captcha.stored.events.p-forge"} {
		denied(t, errs, subj, func(ctx context.Context) error {
			_, err := js.Publish(ctx, subj, []byte(ev))
			return err
		})
	}
}

// A producer's clock steps an hour back after its Client bound to the
// stream (an NTP correction): a submission under a deadline, by Submit or
// by SubmitAll, is still stamped with the instant it must be stored by on
// the broker's clock (the caller's deadline less the slack), so it is
// solved, once, instead of ending SUBMIT_BY_PASSED at once while the call
// said it was taken.
func TestProducerClockStepBackKeepsSubmitBy(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"Submit", "SubmitAll"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			b := setup(t, Topology{})
			ctx := testContext(t)
			api := fakeapi.New(fakeapi.Config{BurstLimit: 1 << 20, SolveTime: map[string]fakeapi.Range{fakeapi.KindTurnstile: fixed(50 * time.Millisecond)}})
			apiURL, stopAPI, err := fakeapi.ServeLocal(api)
			require.NoError(t, err)
			t.Cleanup(stopAPI)
			sc, err := solver.NewClient(solver.Config{BaseURL: apiURL, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1,
				Timing: solver.Timing{Scale: 0.01, Fixed: true}})
			require.NoError(t, err)

			var mu sync.Mutex
			var step time.Duration
			now := func() time.Time {
				mu.Lock()
				defer mu.Unlock()
				return time.Now().Add(step)
			}
			client, err := NewClient(ctx, b.nc, ClientConfig{Name: "stepped-producer", Now: now})
			require.NoError(t, err)
			mu.Lock()
			step = -time.Hour
			mu.Unlock()
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			dl, _ := sctx.Deadline()
			var r Receipt
			if how == "Submit" {
				r, err = client.Submit(sctx, turnstileTask("stepped"))
			} else {
				var rs []Receipt
				rs, err = client.SubmitAll(sctx, []Task{turnstileTask("stepped")})
				if len(rs) == 1 {
					r = rs[0]
				}
			}
			require.NoError(t, err)
			// No worker yet: the stored task is there to be read.
			m, err := b.client.s.GetMsg(ctx, r.Seq)
			require.NoError(t, err)
			by, err := time.Parse(time.RFC3339Nano, m.Header.Get(wire.HeaderSubmitBy))
			require.NoError(t, err, "a submit-by instant is stamped")
			require.WithinDuration(t, dl.Add(-submitSlack), by, 2*time.Second, "on the broker's clock (the real one here)")

			b.startWorker(t, WorkerConfig{Solver: sc, Threads: 1})
			out, err := b.client.Wait(ctx, r.ID)
			require.NoError(t, err)
			require.Equal(t, StatusSolved, out.Status, "%s %s", out.Reason, out.Error)
			require.Equal(t, 1, api.Stats().Submitted, "paid once")
		})
	}
}
