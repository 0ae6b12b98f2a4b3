package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/broker"
)

var passwords = map[string]string{"producer": "producer-dash-secret", "worker": "worker-dash-secret", "admin": "admin-dash-secret"}

// bundle is a dashboard in front of the shipped nats.conf's roles: the page
// reads as the producer, a worker solves against the emulator.
type bundle struct {
	url    string // the NATS server's
	admin  *stream.Client
	client *stream.Client      // the producer's
	js     jetstream.JetStream // the admin's
	web    *httptest.Server
	api    *fakeapi.Server // the emulator the worker pays
	// failTask is how many of the next reads of a task's trace
	// (/api/task) the web server answers 502, as a broker that does not
	// answer in time makes the dashboard do.
	failTask atomic.Int32
}

func setup(t *testing.T) *bundle {
	t.Helper()
	for user, pw := range passwords {
		h, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.MinCost)
		require.NoError(t, err)
		t.Setenv("CAPTCHAQ_"+strings.ToUpper(user)+"_PASSWORD_HASH", string(h))
	}
	t.Setenv("CAPTCHAQ_STORE_KEY", "dashboard-test-store-key-0123456789") // the shipped nats.conf encrypts the store
	ns, err := broker.Start(broker.Config{ConfigFile: filepath.Join("..", "nats.conf"), Port: -1, StoreDir: t.TempDir(), LazySync: true})
	require.NoError(t, err)
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	b := &bundle{url: ns.ClientURL()}
	ctx := testContext(t)
	conn := func(user string) *nats.Conn {
		nc, err := nats.Connect(b.url, nats.UserInfo(user, passwords[user]))
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		return nc
	}
	anc := conn("admin")
	js, err := jetstream.New(anc)
	require.NoError(t, err)
	b.js = js
	_, err = stream.EnsureTopology(ctx, js.Conn(), stream.Topology{}, true)
	require.NoError(t, err)
	b.admin, err = stream.NewClient(ctx, anc, stream.ClientConfig{Name: "test-admin"})
	require.NoError(t, err)
	b.client, err = stream.NewClient(ctx, conn("producer"), stream.ClientConfig{Name: "test-producer"})
	require.NoError(t, err)

	b.api = fakeapi.New(fakeapi.Config{TimeScale: 0.01, BurstLimit: 1 << 20,
		Faults: fakeapi.Faults{Rules: []fakeapi.Rule{{Param: "pageurl", Contains: "bad.example", Code: "ERROR_PAGEURL"}}}})
	api := httptest.NewServer(b.api)
	t.Cleanup(api.Close)
	sc, err := solver.NewClient(solver.Config{BaseURL: api.URL, APIKey: fakeapi.TestKey, Timing: solver.Timing{Scale: 0.01}})
	require.NoError(t, err)
	w, err := stream.NewWorker(ctx, conn("worker"), stream.WorkerConfig{Solver: sc, Threads: 4, Name: "dash-worker", IdleCheck: 50 * time.Millisecond})
	require.NoError(t, err)
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	t.Cleanup(func() { stop(); <-done })

	b.web = httptest.NewUnstartedServer(nil)
	d, err := New(Config{Client: b.client, Refresh: 200 * time.Millisecond, Hosts: HostsOf(b.web.Listener.Addr().String()),
		Connect: func(ctx context.Context, user, password string) (*nats.Conn, error) {
			return nats.Connect(b.url, nats.UserInfo(user, password))
		}})
	require.NoError(t, err)
	b.web.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/task" && b.failTask.Add(-1) >= 0 {
			writeJSON(w, http.StatusBadGateway, map[string]string{"error": "task: nats: timeout"})
			return
		}
		d.ServeHTTP(w, r)
	})
	b.web.Start()
	t.Cleanup(b.web.Close)
	return b
}

// deadAndSolved has the worker end two tasks: dead-1 dead (a permanent
// error), then solved-1 solved.
func deadAndSolved(t *testing.T, b *bundle) {
	t.Helper()
	ctx := testContext(t)
	out, err := b.client.Solve(ctx, turnstile("dead-1", "https://bad.example/checkout"))
	require.ErrorIs(t, err, stream.ErrNotSolved)
	require.Equal(t, "permanent", out.Reason)
	_, err = b.client.Solve(ctx, turnstile("solved-1", "https://shop.example/checkout"))
	require.NoError(t, err)
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func turnstile(id, page string) stream.Task {
	return stream.Task{ID: id, Method: "turnstile", Params: stream.Params{"sitekey": "0x4AAAAAAAB", "pageurl": page}}
}

// chromium finds the browser, or skips the test, saying why; in CI (CI=true)
// a missing browser fails the test instead.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no chromium on PATH: install Debian's chromium package (apt-get install chromium; .ci/run does) to run the dashboard's browser test"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// browser starts a headless Chromium with a fresh profile and collects the
// page's console errors, uncaught exceptions and failed loads.
func browser(t *testing.T) (context.Context, func() []string) {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1400, 1600),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(testContext(t), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	var mu sync.Mutex
	var problems []string
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == "error" || m.Type == "assert" || m.IsException() {
				mu.Lock()
				problems = append(problems, m.String()+" "+m.URL)
				mu.Unlock()
			}
		}
	}()
	return ctx, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), problems...)
	}
}

// The dashboard in a real browser: it loads without console errors, shows
// a task submitted after it loaded without a reload, and replays a dead
// letter with the admin's credentials but not with the producer's.
func TestDashboardInBrowser(t *testing.T) {
	b := setup(t)
	ctx := testContext(t)
	deadAndSolved(t, b)

	page, problems := browser(t)
	require.NoError(t, chromedp.Do(page,
		chromedp.Navigate(b.web.URL),
		chromedp.WaitVisible(`#live.on`),
		chromedp.WaitVisible(`#workers tbody tr`),
	))
	live := text(t, page, `#live`)
	require.Contains(t, live, "live")
	workers := text(t, page, `#workers tbody`)
	require.Contains(t, workers, "dash-worker")
	require.Empty(t, problems(), "the page loads without console errors")

	// A task submitted after the page loaded shows without a reload, in
	// the outcomes once solved.
	require.NoError(t, chromedp.Do(page, chromedp.Click(`.tab[data-tab="outcomes"]`), chromedp.WaitVisible(`#list tr[data-task="solved-1"]`)))
	_, err := b.client.Submit(ctx, turnstile("after-load", "https://shop.example/late"))
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(page, chromedp.WaitVisible(`#list [data-task="after-load"]`)))

	// Its trace, by search.
	require.NoError(t, chromedp.Do(page,
		chromedp.SetValue(`#search-id`, "dead-1"), chromedp.Click(`#search button`),
		chromedp.WaitVisible(`#trace tbody tr`), waitText(`#task-id`, "dead-1")))
	trace := text(t, page, `#trace tbody`)
	require.Contains(t, trace, "ERROR_PAGEURL")
	require.NotContains(t, trace, "/checkout", "hosts only, never page URLs")

	// Typing a user name claims nothing: the header speaks of a user only
	// once its password was checked.
	require.NoError(t, chromedp.Do(page, chromedp.SendKeys(`#user`, "admin"), chromedp.SendKeys(`#password`, "not-the-password")))
	who := text(t, page, `#who`)
	require.NotContains(t, who, "changes as")
	require.Contains(t, who, "read-only")
	require.NoError(t, chromedp.Do(page, chromedp.Click(`#signin-button`), waitText(`#notice-msg.error`, `NATS refused user "admin"`)))
	who = text(t, page, `#who`)
	require.NotContains(t, who, "changes as", "a wrong password signs nobody in")

	// Sign-in with the producer's credentials: checked at once and
	// refused; the page stays read-only and says so.
	require.NoError(t, chromedp.Do(page, chromedp.Click(`.tab[data-tab="dead"]`), chromedp.WaitVisible(`#list tr[data-task="dead-1"] button`),
		chromedp.SetValue(`#user`, "producer"), chromedp.SetValue(`#password`, passwords["producer"]),
		chromedp.Click(`#signin-button`), waitText(`#notice-msg.error`, `user "producer" may not change anything here`)))
	msg := text(t, page, `#notice-msg`)
	require.Contains(t, msg, `user "producer" may not change anything here`)
	who = text(t, page, `#who`)
	require.NotContains(t, who, "changes as", "the header claims no rights the credentials lack")
	replayDisabled, err := chromedp.Run(page, chromedp.Evaluate[bool](`document.querySelector('#list tr[data-task="dead-1"] button').disabled`))
	require.NoError(t, err)
	require.True(t, replayDisabled)
	d, err := b.admin.DeadLetterOf(ctx, "dead-1")
	require.NoError(t, err)
	require.Nil(t, d.Replayed, "a refused sign-in queues nothing")

	// Then the admin's: the header says so once checked, and replay works.
	signIn(t, page, "admin")
	err = chromedp.Do(page,
		chromedp.Click(`#list tr[data-task="dead-1"] button:enabled`),
		waitText(`#notice-msg`, "task dead-1 is queued again"))
	if err != nil {
		msg, _ := chromedp.Run(page, chromedp.Text(`#notice-msg`))
		t.Fatalf("replay: %v; the page says %q", err, msg)
	}
	d, err = b.admin.DeadLetterOf(ctx, "dead-1")
	require.NoError(t, err)
	if d.Replayed == nil { // the replayed task died again: its first letter was replayed
		ds, err := b.admin.DeadLetters(ctx, stream.DeadFilter{})
		require.NoError(t, err)
		replayed := 0
		for _, x := range ds {
			if x.ID == "dead-1" && x.Replayed != nil {
				replayed++
			}
		}
		require.Equal(t, 1, replayed)
	}

	screenshot(t, page, "dashboard-browser.png")

	// The only errors after loading are the browser's notes of the refused
	// sign-ins.
	for _, p := range problems() {
		require.Regexp(t, `40[13]`, p, "unexpected: %s", p)
		require.Contains(t, p, "/api/signin")
	}
}

// Changes are refused without the page's token, from another origin, and
// without credentials; reads need none.
func TestChangesNeedTokenOriginAndAdmin(t *testing.T) {
	b := setup(t)
	post := func(path, body string, hdr map[string]string) (int, string) {
		req, err := http.NewRequest(http.MethodPost, b.web.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var sb strings.Builder
		_, _ = fmt.Fprint(&sb, resp.Status)
		buf := make([]byte, 4096)
		n, _ := resp.Body.Read(buf)
		return resp.StatusCode, string(buf[:n])
	}
	resp, err := http.Get(b.web.URL + "/")
	require.NoError(t, err)
	page := make([]byte, 1<<16)
	n, _ := resp.Body.Read(page)
	resp.Body.Close()
	csrf := between(string(page[:n]), `<meta name="csrf" content="`, `"`)
	require.NotEmpty(t, csrf)

	json := map[string]string{"Content-Type": "application/json"}
	code, body := post("/api/cancel", `{"id":"x"}`, json)
	require.Equal(t, http.StatusForbidden, code)
	require.Contains(t, body, "page token")

	withToken := map[string]string{"Content-Type": "application/json", "X-Captchaq-CSRF": csrf}
	code, body = post("/api/cancel", `{"id":"x"}`, withToken)
	require.Equal(t, http.StatusUnauthorized, code)
	require.Contains(t, body, "sign in")

	foreign := map[string]string{"Content-Type": "application/json", "X-Captchaq-CSRF": csrf, "Origin": "https://evil.example"}
	code, body = post("/api/cancel", `{"id":"x"}`, foreign)
	require.Equal(t, http.StatusForbidden, code)
	require.Contains(t, body, "another site")

	form := map[string]string{"Content-Type": "application/x-www-form-urlencoded", "X-Captchaq-CSRF": csrf}
	code, _ = post("/api/cancel", `id=x`, form)
	require.Equal(t, http.StatusUnsupportedMediaType, code)

	ctx := testContext(t)
	b.client.Submit(ctx, turnstile("lane-x", "https://shop.example/")) //nolint:errcheck
	for user, want := range map[string]int{"producer": http.StatusForbidden, "worker": http.StatusForbidden, "admin": http.StatusOK} {
		req, _ := http.NewRequest(http.MethodPost, b.web.URL+"/api/lane", strings.NewReader(`{"lane":"slow","action":"pause"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Captchaq-CSRF", csrf)
		req.SetBasicAuth(user, passwords[user])
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, want, resp.StatusCode, user)
	}
	st, err := b.client.Stats(ctx, time.Minute)
	require.NoError(t, err)
	for _, q := range st.Queues {
		require.Equal(t, q.Lane == stream.LaneSlow, q.Paused)
	}
}

func between(s, a, b string) string {
	_, rest, ok := strings.Cut(s, a)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, b)
	return v
}
