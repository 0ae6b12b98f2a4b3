package stream

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/internal/logbuf"
	"github.com/captchaq/captchaq/internal/tcpproxy"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
)

// newRefusingProxy puts a tcpproxy.Proxy in front of target for the test.
func newRefusingProxy(t *testing.T, target string) *tcpproxy.Proxy {
	t.Helper()
	p, err := tcpproxy.New(target)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

// refusableAPI serves the emulator, each turnstile solved in solve and no
// burst rule, behind a proxy that can refuse connections.
func refusableAPI(t *testing.T, solve time.Duration) (*fakeapi.Server, *tcpproxy.Proxy) {
	t.Helper()
	api := fakeapi.New(fakeapi.Config{BurstLimit: 1 << 20, SolveTime: map[string]fakeapi.Range{fakeapi.KindTurnstile: fixed(solve)}})
	apiURL, stopAPI, err := fakeapi.ServeLocal(api)
	require.NoError(t, err)
	t.Cleanup(stopAPI)
	return api, newRefusingProxy(t, apiURL[len("http://"):])
}

// The service refuses connections for 15 s while 16 captchas it accepted
// are being solved. The worker keeps each captcha's id through the outage
// and polls it again once the service answers: 16 captchas accepted, 16
// solved, every task on its first attempt.
func TestOutageKeepsTheAcceptedCaptchas(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	const n = 16
	api, proxy := refusableAPI(t, 5*time.Second)

	log := debugLog(t)
	patient := map[string]time.Duration{}
	for _, k := range solver.Kinds() {
		patient[k] = 10 * time.Hour
	}
	// A poll every 0.5 s: the fixed schedule's 20 calls run out during the
	// outage, so the captchas are held past their schedule too.
	sc, err := solver.NewClient(solver.Config{BaseURL: "http://" + proxy.Addr, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1,
		Timing: solver.Timing{Scale: 0.1, Fixed: true, MaxWait: patient}, Logger: log})
	require.NoError(t, err)
	b.startWorker(t, WorkerConfig{Solver: sc, Threads: n, Logger: log})

	tasks, receipts := b.submitHeld(t, api, "held", n)

	proxy.Refuse()
	select {
	case <-time.After(15 * time.Second): // the outage is the scenario
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	require.NoError(t, proxy.Listen())

	solved := 0
	require.NoError(t, b.client.WaitAll(ctx, receipts, func(o Outcome, err error) {
		require.NoError(t, err)
		require.Equal(t, StatusSolved, o.Status, "%+v", o)
		require.Equal(t, 1, o.Attempts, "an outage spends no attempt: %+v", o)
		solved++
		// The trail shows the hold: held since the first failed poll, then
		// answered again, both about the captcha solved.
		var held, answered bool
		for _, ev := range b.events(t, o.ID) {
			switch ev.Kind {
			case EventHeld:
				held = ev.CaptchaID == o.CaptchaID && !ev.HeldSince.IsZero()
			case EventAnswered:
				answered = held && ev.CaptchaID == o.CaptchaID && ev.At.Sub(ev.HeldSince) >= 10*time.Second
			}
		}
		require.True(t, held && answered, "%s: %v", o.ID, kinds(b.events(t, o.ID)))
	}))
	tr, err := b.client.Trace(ctx, tasks[0].ID)
	require.NoError(t, err)
	var text []string
	for _, e := range tr {
		text = append(text, e.Kind+" "+e.Detail)
	}
	require.Regexp(t, `held captcha \d+ held through an outage since .*\nanswered captcha \d+ polled again at`, strings.Join(text, "\n"))
	require.Equal(t, n, solved)
	st := api.Stats()
	require.Equal(t, n, st.Submitted, "each task's captcha is paid once")
	require.Equal(t, n, st.Solved)
}

// A worker told to stop while polling a captcha the service accepted hands
// the task back naming the captcha; the next worker polls that captcha
// instead of submitting another.
func TestStoppedWorkerLeavesItsCaptchaToTheNext(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	log := debugLog(t)
	api := fakeapi.New(fakeapi.Config{BurstLimit: 1 << 20, SolveTime: map[string]fakeapi.Range{fakeapi.KindTurnstile: fixed(3 * time.Second)}})
	apiURL, stopAPI, err := fakeapi.ServeLocal(api)
	require.NoError(t, err)
	t.Cleanup(stopAPI)
	sc, err := solver.NewClient(solver.Config{BaseURL: apiURL, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1,
		Timing: solver.Timing{Scale: 0.01, Fixed: true, MaxCalls: 1000, MaxWait: map[string]time.Duration{solver.KindTurnstile: 10 * time.Hour}}, Logger: log})
	require.NoError(t, err)
	// No grace: the solve is cut short by the stop, not waited for.
	first := b.startWorker(t, WorkerConfig{Solver: sc, Threads: 1, ShutdownGrace: time.Millisecond})
	r, err := b.client.Submit(ctx, turnstileTask("left"))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		st := api.Stats()
		return st.Submitted == 1 && len(st.ResCallsPerCaptcha) == 1
	}, 20*time.Second, time.Millisecond, "the captcha was never polled")
	first.stop()
	require.Eventually(t, func() bool {
		evs := b.events(t, "left")
		return len(evs) > 0 && evs[len(evs)-1].Kind == EventHandback
	}, 20*time.Second, 10*time.Millisecond, "the stopping worker handed nothing back")
	evs := b.events(t, "left")
	handback := evs[len(evs)-1]
	require.NotEmpty(t, handback.CaptchaID, "the handback names the captcha: %+v", handback)
	require.Zero(t, handback.Attempts, "%+v", handback)

	b.startWorker(t, WorkerConfig{Solver: sc, Threads: 1, Logger: log})
	out, err := b.client.Wait(ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, StatusSolved, out.Status, "%+v", out)
	require.Equal(t, handback.CaptchaID, out.CaptchaID, "the captcha handed back is the one solved")
	require.Equal(t, 1, out.Attempts, "%+v", out)
	require.Equal(t, 1, api.Stats().Submitted, "paid once")
	var resumed bool
	for _, ev := range b.events(t, "left") {
		resumed = resumed || ev.Kind == EventAccepted && ev.Resumed && ev.CaptchaID == out.CaptchaID
	}
	require.True(t, resumed, "the trail says the captcha was resumed: %v", kinds(b.events(t, "left")))
}

// debugLog is a logger at DEBUG whose lines the test prints only if it
// fails.
func debugLog(t *testing.T) *slog.Logger {
	t.Helper()
	var logs logbuf.Buffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	})
	return slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
