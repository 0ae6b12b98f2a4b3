package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/internal/tcpproxy"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
)

// A worker SIGKILLed right after in.php accepted its task's captcha (the
// service has been polled about it once): the task's next worker, once the
// first is judged dead, polls that captcha instead of submitting a new one.
// The service is paid once (the crash still counts against the attempt
// budget), and the task's trace names the captcha and who resumed it.
func TestWorkerKilledAfterSubmitPaysOnce(t *testing.T) {
	t.Parallel()
	top := stream.Topology{AckWait: 2 * time.Second}
	url, _, client := listeningServer(t, top)
	api, emu := emulatorURL(t, fakeapi.Config{SolveTime: map[string]fakeapi.Range{
		solver.KindTurnstile: {Min: 3 * time.Second, Median: 3 * time.Second, Max: 3 * time.Second}}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)

	worker := func(name string) *proc {
		w := startProc(t, keyEnv, "worker", "--nats", url, "--solver-url", emu, "--poll-scale", "0.1",
			"--threads", "1", "--ack-wait", "2s", "--name", name, "--log-level", "debug")
		w.waitLine("worker started", 30*time.Second)
		return w
	}
	first := worker("killed-worker")
	task := stream.Task{ID: "kill-after-submit", Method: "turnstile",
		Params: stream.Params{"sitekey": "0x4AAAAAAAB", "pageurl": "https://shop.example/checkout/1"}}
	rc, err := client.Submit(ctx, task)
	require.NoError(t, err)
	// In.php answered, and the worker has asked res.php about the captcha
	// once: it holds the id.
	require.Eventually(t, func() bool {
		st := api.Stats()
		return st.Submitted == 1 && len(st.ResCallsPerCaptcha) == 1
	}, 30*time.Second, time.Millisecond, "the worker never polled its captcha")
	first.kill()

	worker("next-worker")
	var out stream.Outcome
	require.NoError(t, client.WaitAll(ctx, []stream.Receipt{rc}, func(o stream.Outcome, err error) {
		require.NoError(t, err)
		out = o
	}))
	require.Equal(t, stream.StatusSolved, out.Status, "%+v", out)
	st := api.Stats()
	require.Equal(t, 1, st.Submitted, "the captcha in.php accepted is the task's: paid once")
	require.Equal(t, 2, out.Attempts, "the crash is counted, the resumed captcha pays nothing: %+v", out)
	require.Empty(t, st.Repeated())

	trace := captchaq(t, url, "trace", task.ID)
	require.Zero(t, trace.code, trace.stderr)
	require.Regexp(t, regexp.MustCompile(`captcha `+regexp.QuoteMeta(out.CaptchaID)+`.*resumed by next-worker`), trace.stdout)
}

// A worker SIGKILLed while the service refuses connections, holding the
// captchas it accepted: the next worker polls them (through the rest of
// the outage) instead of submitting them again. Each task is paid once.
func TestWorkerKilledDuringOutagePaysOnce(t *testing.T) {
	t.Parallel()
	const n = 4
	top := stream.Topology{AckWait: 2 * time.Second}
	url, _, client := listeningServer(t, top)
	api, emu := emulatorURL(t, fakeapi.Config{SolveTime: map[string]fakeapi.Range{
		solver.KindTurnstile: {Min: 2 * time.Second, Median: 2 * time.Second, Max: 2 * time.Second}}})
	proxy, err := tcpproxy.New(strings.TrimPrefix(emu, "http://"))
	require.NoError(t, err)
	t.Cleanup(proxy.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)

	worker := func(name string) *proc {
		w := startProc(t, keyEnv, "worker", "--nats", url, "--solver-url", "http://"+proxy.Addr, "--poll-scale", "0.1",
			"--threads", itoa(n), "--ack-wait", "2s", "--name", name)
		w.waitLine("worker started", 30*time.Second)
		return w
	}
	first := worker("outage-killed")
	tasks := make([]stream.Task, n)
	for i := range tasks {
		tasks[i] = stream.Task{ID: fmt.Sprintf("outage-kill-%d", i), Method: "turnstile",
			Params: stream.Params{"sitekey": "0x4AAAAAAAB", "pageurl": fmt.Sprintf("https://shop.example/checkout/%d", i)}}
	}
	receipts, err := client.SubmitAll(ctx, tasks)
	require.NoError(t, err)
	// Accepted, and each polled once: the worker has every id.
	require.Eventually(t, func() bool {
		st := api.Stats()
		return st.Submitted == n && len(st.ResCallsPerCaptcha) == n
	}, 30*time.Second, time.Millisecond)
	proxy.Refuse()
	// Every task's captcha is held: its polls fail, and its records say so.
	require.Eventually(t, func() bool {
		for _, tk := range tasks {
			tr, err := client.Trace(ctx, tk.ID)
			if err != nil || tr[len(tr)-1].Kind != string(stream.EventHeld) {
				return false
			}
		}
		return true
	}, 30*time.Second, 10*time.Millisecond, "the captchas were never held")
	first.kill()

	worker("outage-next")
	// The next worker takes the tasks over once the first is judged dead,
	// while the service still refuses: it holds their captchas in turn.
	require.Eventually(t, func() bool {
		for _, tk := range tasks {
			tr, err := client.Trace(ctx, tk.ID)
			if err != nil {
				return false
			}
			resumed := false
			for _, e := range tr {
				resumed = resumed || e.Kind == string(stream.EventAccepted) && strings.Contains(e.Detail, "resumed by outage-next")
			}
			if !resumed {
				return false
			}
		}
		return true
	}, time.Minute, 50*time.Millisecond, "the next worker never resumed the captchas")
	require.NoError(t, proxy.Listen())
	solved := 0
	require.NoError(t, client.WaitAll(ctx, receipts, func(o stream.Outcome, err error) {
		require.NoError(t, err)
		require.Equal(t, stream.StatusSolved, o.Status, "%+v", o)
		solved++
	}))
	require.Equal(t, n, solved)
	st := api.Stats()
	require.Equal(t, n, st.Submitted, "each task's captcha paid once")
	require.Empty(t, st.Repeated())
}

// `captchaq fakeapi` says at exit (SIGINT, SIGTERM) what the account paid:
// the captchas accepted, the balance left, and the tasks paid twice.
func TestFakeAPIPrintsMoneyAtExit(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			p := startProc(t, nil, "fakeapi", "--addr", "127.0.0.1:0")
			p.waitLine("fakeapi listening on", 30*time.Second)
			m := regexp.MustCompile(`listening on (http://\S+)`).FindStringSubmatch(p.output())
			require.Len(t, m, 2, p.output())
			submit := func(site string) {
				t.Helper()
				resp, err := http.PostForm(m[1]+"/in.php", url.Values{"key": {fakeapi.TestKey}, "method": {"turnstile"},
					"sitekey": {site}, "pageurl": {"https://shop.example/private/path"}})
				require.NoError(t, err)
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				require.True(t, strings.HasPrefix(string(b), "OK|"), "%s", b)
			}
			submit("0x4AAAAAAAB")
			submit("0x4AAAAAAAB")
			submit("0x4AAAAAAAC")
			require.NoError(t, p.cmd.Process.Signal(sig))
			p.wait(30 * time.Second)
			out := p.output()
			require.Contains(t, out, fmt.Sprintf("fakeapi: 3 captchas accepted, 0 refunded as unsolvable; %.5f spent, balance %.5f",
				3*fakeapi.DefaultPricePer1000/1000, 100-3*fakeapi.DefaultPricePer1000/1000))
			require.Contains(t, out, "1 tasks paid for more than once (1 captchas paid again)")
			require.Regexp(t, `2× turnstile 0x4AAAAAAAB shop\.example#[0-9a-f]{8}`, out)
			require.NotContains(t, out, "private", "the page shows by host only")
		})
	}
}
