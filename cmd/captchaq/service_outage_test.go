package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/internal/faultproxy"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
)

// outageBed is a worker process with default flags whose solving service
// (the emulator, with CaptchaAI's ban of more than 60 in.php calls in 3 s)
// sits behind a proxy that can refuse and freeze.
type outageBed struct {
	natsURL string
	client  *stream.Client
	api     *fakeapi.Server
	proxy   *faultproxy.Proxy
	worker  *proc
}

func newOutageBed(t *testing.T, extra ...string) *outageBed {
	t.Helper()
	return newOutageBedFronted(t, nil, extra...)
}

// newOutageBedFronted is newOutageBed whose emulator is served through
// front (nil: directly), which may call b.proxy once the bed is built.
func newOutageBedFronted(t *testing.T, front func(b *outageBed, api http.Handler) http.Handler, extra ...string) *outageBed {
	t.Helper()
	natsURL, _, client := listeningServer(t, stream.Topology{})
	api := outageAPI()
	b := &outageBed{natsURL: natsURL, client: client, api: api}
	var h http.Handler = api
	if front != nil {
		h = front(b, api)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	require.NoError(t, err)
	proxy, err := faultproxy.Start(u.Host)
	require.NoError(t, err)
	t.Cleanup(proxy.Close)
	b.proxy = proxy
	b.startWorker(t, "http://"+proxy.Addr(), extra...)
	return b
}

// outageAPI is the emulator of the outage tests: solve times short enough
// that a test of tens of tasks takes a minute at the production poll
// schedule; the burst rule is the service's.
func outageAPI() *fakeapi.Server {
	return fakeapi.New(fakeapi.Config{Seed: 35, SolveTime: map[string]fakeapi.Range{
		fakeapi.KindTurnstile: {Min: 500 * time.Millisecond, Median: time.Second, Max: 2 * time.Second}}})
}

// startWorker starts the bed's worker process, default flags, against the
// service at url.
func (b *outageBed) startWorker(t *testing.T, url string, extra ...string) {
	t.Helper()
	args := append([]string{"worker", "--nats", b.natsURL, "--solver-url", url, "--name", "outage-w"}, extra...)
	b.worker = startProc(t, keyEnv, args...)
	b.worker.waitLine("worker started", 30*time.Second)
}

// submit queues n turnstile tasks.
func (b *outageBed) submit(t *testing.T, n int) []stream.Receipt {
	t.Helper()
	tasks := make([]stream.Task, n)
	for i := range tasks {
		tasks[i] = stream.Task{ID: fmt.Sprintf("out%03d", i), Method: "turnstile",
			Params: stream.Params{"sitekey": "0x4AAAAAAAB", "pageurl": "https://shop.example/"}}
	}
	rs, err := b.client.SubmitAll(t.Context(), tasks)
	require.NoError(t, err)
	return rs
}

// solvedOnce waits for every task and checks the outage cost nothing: each
// solved on its first attempt, each paid once, no ban earned.
func (b *outageBed) solvedOnce(t *testing.T, rs []stream.Receipt, within time.Duration) {
	t.Helper()
	b.solved(t, rs, within)
	require.Equal(t, len(rs), b.api.Stats().Submitted, "each task paid once at the service")
}

// solved is solvedOnce but for the payments: it returns how many steps of
// the tasks' traces say an in.php reply was lost, its captcha "may have
// been paid" (a front's 5xx says so too, where nothing was paid).
func (b *outageBed) solved(t *testing.T, rs []stream.Receipt, within time.Duration) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), within)
	defer cancel()
	solved := 0
	require.NoError(t, b.client.WaitAll(ctx, rs, func(o stream.Outcome, err error) {
		require.NoError(t, err, "task %s", o.ID)
		require.Equal(t, stream.StatusSolved, o.Status, "%+v", o)
		require.Equal(t, 1, o.Attempts, "task %s: the outage spent an attempt: %+v", o.ID, o)
		solved++
	}))
	require.Equal(t, len(rs), solved)
	st := b.api.Stats()
	require.Zero(t, st.Codes["MAX_USER_TURN"], "no burst on the service's return: %v", st.Codes)
	require.Zero(t, st.Codes["ERROR: 1001"], "%v", st.Codes)
	lost := 0
	for _, r := range rs {
		trace, err := b.client.Trace(t.Context(), r.ID)
		require.NoError(t, err)
		for _, e := range trace {
			if strings.Contains(e.Detail, "may have been paid") {
				lost++
			}
		}
	}
	var out string
	require.Eventually(t, func() bool {
		out = captchaq(t, b.natsURL, "stats").stdout
		return strings.Contains(out, "workers alive: 1") && !strings.Contains(out, "service unreachable")
	}, 20*time.Second, 200*time.Millisecond, "the outage is over in stats: %s", out)
	return lost
}

// during waits until the emulator has accepted n captchas, then breaks the
// service with fail, and returns when.
func (b *outageBed) during(t *testing.T, n int, fail func()) time.Time {
	t.Helper()
	require.Eventually(t, func() bool { return b.api.Stats().Submitted >= n }, time.Minute, 10*time.Millisecond)
	fail()
	return time.Now()
}

// seenAtOnce checks the outage is told while it lasts: a WARN naming the
// service's host within one call's timeout, and `captchaq stats` showing
// it with the captchas held.
func (b *outageBed) seenAtOnce(t *testing.T, from time.Time) {
	t.Helper()
	b.worker.waitLine("level=WARN msg=\"the solving service does not answer", 30*time.Second)
	require.Less(t, time.Since(from), 31*time.Second, "WARN within one call's timeout")
	line := ""
	for _, l := range strings.Split(b.worker.output(), "\n") {
		if strings.Contains(l, "the solving service does not answer") {
			line = l
			break
		}
	}
	require.Contains(t, line, "host="+b.proxy.Addr())
	require.Contains(t, line, "held=")
	require.NotContains(t, b.worker.output(), fakeapi.TestKey)
	var out string
	require.Eventually(t, func() bool {
		r := captchaq(t, b.natsURL, "stats")
		out = r.stdout
		return strings.Contains(out, "service unreachable since")
	}, 20*time.Second, 200*time.Millisecond, "stats shows the outage: %s", out)
	require.Regexp(t, `outage-w: service unreachable since \S+ \(\d+ captchas held at the service\)`, out)
}

// A frozen service (connections accepted, nothing answered) for 25 s, past
// one call's wait for a reply (20 s), under 40 tasks: the worker warns at
// once, stats show it, no submission is sent into the hang, and on the thaw
// the queued work resumes within the service's rate rule: all solved on
// their first attempt. The freeze begins as the emulator takes its 7th
// captcha, before its reply leaves (3 captchas are held then, of 4
// threads): that in.php's reply is lost. Nothing tells a captcha taken
// from one never sent, so its task submits again, and that captcha is the
// one paid twice, said in the task's trace ("may have been paid"); every
// other is paid once.
//
// Failed before (as CI's run did once, by chance: 41 paid for 40): the
// test froze the service at any moment after the 6th captcha and asked
// for exactly 40 payments; the freeze could catch an in.php in flight.
func TestServiceFreezeSpendsNothing(t *testing.T) {
	t.Parallel()
	var taken atomic.Int32
	var frozeAt atomic.Int64
	b := newOutageBedFronted(t, func(b *outageBed, api http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !strings.HasSuffix(r.URL.Path, "/in.php") || taken.Add(1) != 7 {
				api.ServeHTTP(w, r)
				return
			}
			rec := httptest.NewRecorder()
			api.ServeHTTP(rec, r)
			b.proxy.Freeze()
			frozeAt.Store(time.Now().UnixNano())
			w.WriteHeader(rec.Code)
			_, _ = w.Write(rec.Body.Bytes())
		})
	})
	rs := b.submit(t, 40)
	require.Eventually(t, func() bool { return frozeAt.Load() != 0 }, time.Minute, 10*time.Millisecond)
	from := time.Unix(0, frozeAt.Load())
	b.seenAtOnce(t, from)
	require.Eventually(t, func() bool { return time.Since(from) >= 25*time.Second }, 30*time.Second, 50*time.Millisecond)
	require.NoError(t, b.proxy.Restore())
	require.Equal(t, 1, b.solved(t, rs, 3*time.Minute), "the in.php caught by the freeze is said in its task's trace")
	require.Equal(t, len(rs)+1, b.api.Stats().Submitted, "each task paid once at the service, but the one whose reply the freeze caught")
	b.worker.waitLine("the solving service answers again", 30*time.Second)
}

// Connections refused for 15 s under 40 tasks: the same. The refusal lets
// the exchanges in flight end (RefuseAfterReplies): a request cut mid-way
// is a reply lost, which may have been paid and rightly spends its
// attempt (the paid-once tests cut them on purpose); with Refuse, a cut
// in.php now and then spent one here.
func TestServiceRefusalSpendsNothing(t *testing.T) {
	t.Parallel()
	b := newOutageBed(t)
	rs := b.submit(t, 40)
	from := b.during(t, 6, b.proxy.RefuseAfterReplies)
	b.seenAtOnce(t, from)
	require.Eventually(t, func() bool { return time.Since(from) >= 15*time.Second }, 20*time.Second, 50*time.Millisecond)
	require.NoError(t, b.proxy.Restore())
	b.solvedOnce(t, rs, 3*time.Minute)
}

// Connections refused for 15 s once 16 captchas are at the service, under
// 150 tasks, as the operator ran it: the same. Long (over a
// minute): CAPTCHAQ_SOAK=1.
func TestServiceRefusalOf150TasksSpendsNothing(t *testing.T) {
	if os.Getenv("CAPTCHAQ_SOAK") != "1" {
		t.Skip("CAPTCHAQ_SOAK=1 runs the 150-task refusal")
	}
	t.Parallel()
	b := newOutageBed(t)
	rs := b.submit(t, 150)
	start := time.Now()
	from := b.during(t, 16, b.proxy.RefuseAfterReplies)
	b.seenAtOnce(t, from)
	require.Eventually(t, func() bool { return time.Since(from) >= 15*time.Second }, 20*time.Second, 50*time.Millisecond)
	require.NoError(t, b.proxy.Restore())
	b.solvedOnce(t, rs, 5*time.Minute)
	st := b.api.Stats()
	t.Logf("150 solved in %s, in.php calls %d, accepted %d, res.php calls %d, codes %v",
		time.Since(start).Round(time.Second), st.InCalls, st.Submitted, st.ResCalls, st.Codes)
}

// The long variants of the checks: 150 tasks through a 65-s refusal, a
// 60-s freeze, and a service flapping (up 2 s, down 2 s) for a minute.
func TestServiceOutageSoak(t *testing.T) {
	if os.Getenv("CAPTCHAQ_SOAK") != "1" {
		t.Skip("CAPTCHAQ_SOAK=1 runs the long outages")
	}
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, b *outageBed)
	}{
		{"refused65s", func(t *testing.T, b *outageBed) {
			from := b.during(t, 10, b.proxy.Refuse)
			b.seenAtOnce(t, from)
			time.Sleep(time.Until(from.Add(65 * time.Second))) //nolint:forbidigo // the outage's length is the test's input
			require.NoError(t, b.proxy.Restore())
		}},
		{"frozen60s", func(t *testing.T, b *outageBed) {
			from := b.during(t, 10, b.proxy.Freeze)
			b.seenAtOnce(t, from)
			time.Sleep(time.Until(from.Add(60 * time.Second))) //nolint:forbidigo // the outage's length is the test's input
			require.NoError(t, b.proxy.Restore())
		}},
		{"flapping", func(t *testing.T, b *outageBed) {
			b.during(t, 10, func() {})
			for end := time.Now().Add(time.Minute); time.Now().Before(end); {
				b.proxy.Refuse()
				time.Sleep(2 * time.Second) //nolint:forbidigo // the flapping's rhythm is the test's input
				require.NoError(t, b.proxy.Restore())
				time.Sleep(2 * time.Second) //nolint:forbidigo // the flapping's rhythm is the test's input
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newOutageBed(t)
			rs := b.submit(t, 150)
			start := time.Now()
			tc.run(t, b)
			b.solvedOnce(t, rs, 10*time.Minute)
			st := b.api.Stats()
			t.Logf("%s: 150 solved in %s, in.php calls %d, accepted %d, res.php calls %d, codes %v",
				tc.name, time.Since(start).Round(time.Second), st.InCalls, st.Submitted, st.ResCalls, st.Codes)
		})
	}
}

// A worker process with work whose `captchaq server` is SIGSTOPped: it
// says once that the stream does not answer, and that it answers again
// only after SIGCONT, once a request made the round trip; all tasks are
// solved, each paid once.
func TestWorkerSaysTheStreamAnswersOnlyAfterSIGCONT(t *testing.T) {
	t.Parallel()
	server := startProcBroker(t, "30s")
	api := fakeapi.New(fakeapi.Config{Seed: 35, SolveTime: map[string]fakeapi.Range{
		fakeapi.KindTurnstile: {Min: 200 * time.Millisecond, Median: 400 * time.Millisecond, Max: time.Second}}})
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	w := startProc(t, keyEnv, "worker", "--nats", server.url, "--solver-url", srv.URL, "--poll-scale", "0.1", "--name", "stopped-broker")
	w.waitLine("worker started", 30*time.Second)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	_, client, tasks := submitTurnstiles(ctx, t, server.url, "sigstop", 3, 60)
	require.Eventually(t, func() bool { return api.Stats().Submitted >= 4 }, time.Minute, 10*time.Millisecond)

	require.NoError(t, server.cmd.Process.Signal(syscall.SIGSTOP))
	stopped := true
	t.Cleanup(func() {
		if stopped {
			_ = server.cmd.Process.Signal(syscall.SIGCONT)
		}
	})
	w.waitLine("the stream does not answer", 30*time.Second)
	// Stopped for longer than a heartbeat's period and many fetches'
	// expiry: no return is told meanwhile.
	require.Never(t, func() bool { return strings.Contains(w.output(), "the stream answers again") },
		8*time.Second, 50*time.Millisecond, "told while the server is stopped")
	require.NoError(t, server.cmd.Process.Signal(syscall.SIGCONT))
	stopped = false
	w.waitLine("the stream answers again", 30*time.Second)
	for _, tk := range tasks {
		out, err := client.Wait(ctx, tk.ID)
		require.NoError(t, err, "task %s", tk.ID)
		require.Equal(t, stream.StatusSolved, out.Status)
	}
	require.Equal(t, len(tasks), api.Stats().Submitted, "each task paid once")
	require.Equal(t, 1, strings.Count(w.output(), "the stream answers again"), "%s", w.output())
}
