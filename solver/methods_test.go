package solver_test

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
)

var pngB64 = base64.StdEncoding.EncodeToString(append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, 200)...))

// TestEveryMethod solves one captcha of every method and variant through the
// client and the emulator, with the common parameters where they apply.
func TestEveryMethod(t *testing.T) {
	t.Parallel()
	const page = "https://shop.example/checkout"
	proxy := map[string]string{"proxy": "user:pass@10.1.2.3:3128", "proxytype": "HTTP",
		"userAgent": "Mozilla/5.0 captchaq", "cookies": "sid=1; lang=en"}
	with := func(a, b map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range a {
			out[k] = v
		}
		for k, v := range b {
			out[k] = v
		}
		return out
	}
	rc := map[string]string{"googlekey": "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-", "pageurl": page}
	tests := []struct {
		name  string
		api   fakeapi.Config
		req   solver.Request
		check func(t *testing.T, a solver.Answer)
		ctype string // Content-Type of the in.php request
	}{
		{name: "recaptcha v2", req: solver.Request{Method: "userrecaptcha", Params: rc}, check: tokenPrefix("03A")},
		{name: "recaptcha invisible", req: solver.Request{Method: "userrecaptcha", Params: with(rc, map[string]string{"invisible": "1"})}, check: tokenPrefix("03A")},
		{name: "recaptcha enterprise with proxy", req: solver.Request{Method: "userrecaptcha", Params: with(with(rc, proxy), map[string]string{"enterprise": "1"})}, check: tokenPrefix("03A")},
		{name: "recaptcha v3", req: solver.Request{Method: "userrecaptcha", Params: with(rc, map[string]string{"version": "v3", "action": "login", "min_score": "0.7"})}, check: tokenPrefix("03A")},
		{name: "turnstile with action, data, pagedata", req: solver.Request{Method: "turnstile", Params: map[string]string{
			"sitekey": "0x4AAAAAAAC3DHQFLr1GavRN", "pageurl": page, "action": "login", "data": "cdata", "pagedata": "chl"}},
			check: func(t *testing.T, a solver.Answer) {
				tokenPrefix("0.")(t, a)
				if a.UserAgent == "" {
					t.Error("turnstile answer has no user agent")
				}
			}},
		{name: "turnstile with proxy", req: solver.Request{Method: "turnstile", Params: with(proxy, map[string]string{"sitekey": "0x4AAA", "pageurl": page})},
			check: func(t *testing.T, a solver.Answer) {
				if a.UserAgent != "Mozilla/5.0 captchaq" {
					t.Errorf("user agent %q, want the task's", a.UserAgent)
				}
			}},
		{name: "geetest object", req: geetest(page), check: geetestOK},
		{name: "geetest as string", api: fakeapi.Config{GeeTestAsString: true}, req: geetest(page), check: geetestOK},
		{name: "geetest v4", req: solver.Request{Method: "geetest", Params: map[string]string{
			"gt": "e392e1d7fd421dc63325744d5a2b9c73", "version": "4", "pageurl": page}},
			check: func(t *testing.T, a solver.Answer) {
				g, err := a.GeeTestV4()
				if err != nil || g.CaptchaID != "e392e1d7fd421dc63325744d5a2b9c73" {
					t.Errorf("GeeTest v4 answer %s: %+v, %v; want the task's gt as captcha_id", a.Solution, g, err)
				}
			}},
		{name: "geetest v4 as string", api: fakeapi.Config{GeeTestAsString: true}, req: solver.Request{Method: "geetest", Params: map[string]string{
			"gt": "e392e1d7fd421dc63325744d5a2b9c73", "version": "4", "pageurl": page}},
			check: func(t *testing.T, a solver.Answer) {
				if _, err := a.GeeTestV4(); err != nil {
					t.Errorf("GeeTest v4 answer %s: %v", a.Solution, err)
				}
			}},
		{name: "hcaptcha", req: solver.Request{Method: "hcaptcha", Params: map[string]string{
			"sitekey": "a5f74b19-9e45-40e0-b45d-47ff91b7a6c2", "pageurl": page}}, check: tokenPrefix("P1_")},
		{name: "cloudflare challenge", req: solver.Request{Method: "cloudflare_challenge", Params: with(proxy, map[string]string{"pageurl": page})},
			check: func(t *testing.T, a solver.Answer) {
				cf, err := a.Cloudflare()
				if err != nil || cf.UserAgent != "Mozilla/5.0 captchaq" || len(cf.Clearance) < 40 {
					t.Errorf("Cloudflare answer %s (ua %q): %+v, %v; want a cookie and the task's user agent", a.Solution, a.UserAgent, cf, err)
				}
			}},
		{name: "bls", req: solver.Request{Method: "bls", Params: map[string]string{"body": pngB64, "textinstructions": "Выберите все изображения с числом 317"}},
			check: func(t *testing.T, a solver.Answer) {
				cells, err := a.Cells()
				if err != nil || len(cells) == 0 {
					t.Errorf("BLS answer %s: %v, %v", a.Solution, cells, err)
				}
			}},
		{name: "post multipart", req: solver.Request{Method: "post", Params: map[string]string{"file": pngB64, "numeric": "1", "min_len": "4"}},
			ctype: "multipart/form-data", check: func(t *testing.T, a solver.Answer) {
				s, err := a.Text()
				if err != nil || s == "" || strings.Trim(s, "0123456789") != "" {
					t.Errorf("numeric image answer %q, %v", s, err)
				}
			}},
		{name: "base64 with options", req: solver.Request{Method: "base64", Params: with(proxy, map[string]string{"body": pngB64, "phrase": "1", "regsense": "1", "language": "2", "textinstructions": "letters"})},
			ctype: "application/x-www-form-urlencoded", check: func(t *testing.T, a solver.Answer) {
				if s, err := a.Text(); err != nil || s == "" {
					t.Errorf("image answer %q, %v", s, err)
				}
			}},
		{name: "grid", req: solver.Request{Method: "post", Params: map[string]string{"file": pngB64, "recaptcha": "1", "textinstructions": "Select all images with buses", "recaptcharows": "3", "recaptchacols": "3"}},
			check: func(t *testing.T, a solver.Answer) {
				cells, err := a.Clicks()
				if err != nil || len(cells) == 0 {
					t.Errorf("grid answer %s: %v %v", a.Solution, cells, err)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var ctypes []string
			var mu sync.Mutex
			b := setup(t, opts{api: tt.api, wrap: func(h http.Handler) http.Handler {
				return wrapIn(h, func(r *http.Request) {
					mu.Lock()
					ctypes = append(ctypes, r.Header.Get("Content-Type"))
					mu.Unlock()
				})
			}})
			a, err := b.client.Solve(ctxT(t), tt.req)
			if err != nil {
				t.Fatalf("Solve: %v", err)
			}
			if a.CaptchaID == "" {
				t.Error("answer has no captcha id")
			}
			tt.check(t, a)
			mu.Lock()
			defer mu.Unlock()
			if tt.ctype != "" && (len(ctypes) != 1 || !strings.HasPrefix(ctypes[0], tt.ctype)) {
				t.Errorf("in.php Content-Type %v, want %s", ctypes, tt.ctype)
			}
		})
	}
}

// wrapIn calls f with every in.php request before h serves it.
func wrapIn(h http.Handler, f func(*http.Request)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/in.php" {
			f(r)
		}
		h.ServeHTTP(w, r)
	})
}

func geetest(page string) solver.Request {
	return solver.Request{Method: "geetest", Params: map[string]string{
		"gt": "81dc9bdb52d04dc20036dbd8313ed055", "challenge": "f0ea1e5c3ef4bd3f0d3b17d2b4e6f6a1", "pageurl": page, "api_server": "api.geetest.com"}}
}

func tokenPrefix(prefix string) func(*testing.T, solver.Answer) {
	return func(t *testing.T, a solver.Answer) {
		t.Helper()
		s, err := a.Text()
		if err != nil || !strings.HasPrefix(s, prefix) || len(s) < 50 {
			t.Errorf("token %q (%v), want a long token starting %q", s, err, prefix)
		}
	}
}

func geetestOK(t *testing.T, a solver.Answer) {
	t.Helper()
	g, err := a.GeeTest()
	if err != nil {
		t.Fatalf("GeeTest answer %s: %v", a.Solution, err)
	}
	if g.Challenge != "f0ea1e5c3ef4bd3f0d3b17d2b4e6f6a1" {
		t.Errorf("challenge %q, want the task's", g.Challenge)
	}
}

func TestFetchNotReadyIsPoll(t *testing.T) {
	t.Parallel()
	b := setup(t, opts{api: fakeapi.Config{SolveTime: map[string]fakeapi.Range{fakeapi.KindTurnstile: {Min: time.Hour, Max: time.Hour}}}})
	id, err := b.client.Submit(ctxT(t), turnstile("https://a.example/"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.client.Fetch(ctxT(t), id)
	var e *solver.Error
	if !errors.As(err, &e) || e.Class != retry.Poll || e.Code != solver.CodeNotReady || e.CaptchaID != id {
		t.Errorf("Fetch: %#v, want CAPCHA_NOT_READY (poll) for %s", err, id)
	}
	_, err = b.client.Fetch(ctxT(t), "1")
	if solver.CodeOf(err) != "ERROR_WRONG_CAPTCHA_ID" || solver.ClassOf(err) != retry.Resubmit {
		t.Errorf("Fetch of an unknown id: %v, want ERROR_WRONG_CAPTCHA_ID (resubmit)", err)
	}
}

func TestGiveUpLocally(t *testing.T) {
	t.Parallel()
	never := fakeapi.Config{SolveTime: map[string]fakeapi.Range{fakeapi.KindTurnstile: {Min: time.Hour, Max: time.Hour}}}
	tests := []struct {
		name   string
		timing solver.Timing
		code   string
		calls  int // res.php calls at most
	}{
		// Fixed: 5 ms first poll, every 5 ms, 3.6 s deadline: 20 calls come
		// first. (Adaptive polling keeps its last calls for the deadline.)
		{"poll limit", solver.Timing{Scale: 0.001, Fixed: true}, solver.CodePollLimit, 20},
		// Every 40 ms, 120 ms deadline: the deadline comes first.
		{"deadline", solver.Timing{Scale: 0.001, MaxCalls: 1000, PollInterval: 40 * time.Second,
			MaxWait: map[string]time.Duration{solver.KindTurnstile: 120 * time.Second}}, solver.CodeTimeout, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, opts{api: never, client: solver.Config{Timing: tt.timing}})
			_, err := b.client.Solve(ctxT(t), turnstile("https://a.example/"))
			var e *solver.Error
			if !errors.As(err, &e) || e.Code != tt.code || e.Class != retry.Resubmit || e.CaptchaID == "" {
				t.Fatalf("Solve: %v, want %s (resubmit) with the captcha id", err, tt.code)
			}
			if n := b.api.Stats().ResCallsPerCaptcha[e.CaptchaID]; n < 1 || n > tt.calls {
				t.Errorf("%d res.php calls, want 1..%d", n, tt.calls)
			}
		})
	}
}

// TestPollSurvivesTransientErrors fails some polls with HTTP 500 (or 429):
// the captcha the service accepted is kept and polled again however many
// fail in a row; a Fatal HTTP 404 ends it at once.
func TestPollSurvivesTransientErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		failing []int64 // res.php calls (1-based) that fail
		wantErr string
		status  int // of the failing calls; 0 means 500
	}{
		{"two fail", []int64{2, 3}, "", 0},
		{"three fail", []int64{1, 2, 3}, "", 0},
		{"eight fail", []int64{1, 2, 3, 4, 5, 6, 7, 8}, "", 0},
		{"three rate-limited", []int64{1, 2, 3}, "", http.StatusTooManyRequests},
		{"eight rate-limited", []int64{1, 2, 3, 4, 5, 6, 7, 8}, "", http.StatusTooManyRequests},
		{"one not found", []int64{1}, "HTTP_404", http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var n atomic.Int64
			fail := func(inner http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path == "/res.php" && slices.Contains(tt.failing, n.Add(1)) {
						http.Error(w, "<html><title>failed</title></html>", cmp.Or(tt.status, http.StatusInternalServerError))
						return
					}
					inner.ServeHTTP(w, r)
				})
			}
			b := setup(t, opts{wrap: fail, api: fakeapi.Config{SolveTime: map[string]fakeapi.Range{
				fakeapi.KindTurnstile: {Min: 40 * time.Millisecond, Max: 40 * time.Millisecond}}}})
			_, err := b.client.Solve(ctxT(t), turnstile("https://a.example/"))
			if got := solver.CodeOf(err); got != tt.wantErr || (got == "" && err != nil) {
				t.Errorf("Solve: %v, want code %q", err, tt.wantErr)
			}
		})
	}
}

func TestBalanceAndReport(t *testing.T) {
	t.Parallel()
	b := setup(t, opts{api: fakeapi.Config{Balance: 12.5}})
	ctx := ctxT(t)
	bal, err := b.client.Balance(ctx)
	if err != nil || bal != 12.5 {
		t.Errorf("Balance = %v, %v; want 12.5", bal, err)
	}
	a, err := b.client.Solve(ctx, turnstile("https://a.example/"))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.client.Report(ctx, a.CaptchaID, false); err != nil {
		t.Errorf("Report bad: %v", err)
	}
	err = b.client.Report(ctx, a.CaptchaID, true)
	if solver.CodeOf(err) != "ERROR_DUPLICATE_REPORT" {
		t.Errorf("second report: %v, want ERROR_DUPLICATE_REPORT", err)
	}
	if err := b.client.Report(ctx, "12345", true); solver.CodeOf(err) != "ERROR_WRONG_CAPTCHA_ID" {
		t.Errorf("report of an unknown id: %v, want ERROR_WRONG_CAPTCHA_ID", err)
	}
	if st := b.api.Stats(); st.ReportsBad != 1 || st.ReportsGood != 0 {
		t.Errorf("reports good %d bad %d, want 0 1", st.ReportsGood, st.ReportsBad)
	}
}

// arrivals records when in.php requests reach the server.
type arrivals struct {
	mu sync.Mutex
	at []time.Time
}

func (a *arrivals) wrap(h http.Handler) http.Handler {
	return wrapIn(h, func(*http.Request) {
		a.mu.Lock()
		a.at = append(a.at, time.Now())
		a.mu.Unlock()
	})
}

func (a *arrivals) sorted() []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := slices.Clone(a.at)
	slices.SortFunc(out, func(x, y time.Time) int { return x.Compare(y) })
	return out
}

// noSooner checks sorted arrival times against the limiter's promise: the
// k-th call (from 0) starts no sooner than apart(k) after start, taken
// before the first call was made. A call may reach the server late (the
// race detector on a loaded machine has delayed one by 73 ms), never early,
// and the k-th arrival is no sooner than the k-th start, so the check holds
// whatever the delays; a broken limiter misses it by hundreds of ms.
func noSooner(t *testing.T, start time.Time, at []time.Time, apart func(k int) time.Duration) {
	t.Helper()
	for k, a := range at {
		if d, want := a.Sub(start), apart(k); d < want {
			t.Errorf("in.php call %d %v after the start, want %v or later", k, d, want)
		}
	}
}

func submitAll(t *testing.T, cs []*solver.Client, n int) {
	t.Helper()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if _, err := cs[i%len(cs)].Submit(ctxT(t), turnstile("https://a.example/")); err != nil {
				t.Errorf("Submit: %v", err)
			}
		})
	}
	wg.Wait()
}

// TestSubmitSpacing submits from many goroutines and two clients of one key
// and checks the in.php calls are spaced by MinSubmitInterval.
func TestSubmitSpacing(t *testing.T) {
	t.Parallel()
	const gap = 100 * time.Millisecond
	var arr arrivals
	b := setup(t, opts{client: solver.Config{MinSubmitInterval: gap}, wrap: arr.wrap})
	second, err := solver.NewClient(solver.Config{BaseURL: b.srv.URL, APIKey: fakeapi.TestKey, MinSubmitInterval: gap})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	submitAll(t, []*solver.Client{b.client, second}, 6)
	at := arr.sorted()
	if len(at) != 6 {
		t.Fatalf("%d in.php calls, want 6", len(at))
	}
	// Two limiters instead of one would let the calls come in pairs: 200 ms
	// from first to last instead of 500.
	noSooner(t, start, at, func(k int) time.Duration { return time.Duration(k) * gap })
}

// TestSubmitBurst caps the calls per window: the fourth of six calls with a
// burst of 3 per 150 ms waits for the window.
func TestSubmitBurst(t *testing.T) {
	t.Parallel()
	const window = 150 * time.Millisecond
	var arr arrivals
	b := setup(t, opts{client: solver.Config{MinSubmitInterval: -1, SubmitBurst: 3, SubmitWindow: window}, wrap: arr.wrap})
	start := time.Now()
	submitAll(t, []*solver.Client{b.client}, 6)
	at := arr.sorted()
	if len(at) != 6 {
		t.Fatalf("%d in.php calls, want 6", len(at))
	}
	// 3 per window: calls 3 to 5 wait for the next.
	noSooner(t, start, at, func(k int) time.Duration { return time.Duration(k/3) * window })
}

// TestEmulatorBurstBan shows why the limiter exists: without it, a burst over
// the service's limit is answered MAX_USER_TURN, a capacity error.
func TestEmulatorBurstBan(t *testing.T) {
	t.Parallel()
	b := setup(t, opts{api: fakeapi.Config{BurstLimit: 3, BurstWindow: time.Hour, BanTime: time.Hour},
		client: solver.Config{MinSubmitInterval: -1, SubmitBurst: -1}})
	var last error
	for range 4 {
		_, last = b.client.Submit(ctxT(t), turnstile("https://a.example/"))
	}
	if solver.CodeOf(last) != "MAX_USER_TURN" || solver.ClassOf(last) != retry.Capacity {
		t.Errorf("fourth submit: %v, want MAX_USER_TURN (capacity)", last)
	}
}

func TestSubmitWaitHonoursContext(t *testing.T) {
	t.Parallel()
	// A key of its own: the limiter is shared by every client of a URL and
	// key in the process and keeps the strictest interval, so an hour left
	// on TestKey would stall a later test whose server gets this port.
	const key = "hourlongsubmitintervaltestkey012"
	b := setup(t, opts{api: fakeapi.Config{Keys: []string{key}}, client: solver.Config{APIKey: key, MinSubmitInterval: time.Hour}})
	if _, err := b.client.Submit(ctxT(t), turnstile("https://a.example/")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	cancel()
	if _, err := b.client.Submit(ctx, turnstile("https://a.example/")); !errors.Is(err, context.Canceled) {
		t.Errorf("Submit with a done context: %v, want context.Canceled", err)
	}
}

// TestConcurrentSolves runs many solves on one client (race detector food for
// the limiter and the adaptive poller) and checks all are fetched.
func TestConcurrentSolves(t *testing.T) {
	t.Parallel()
	b := setup(t, opts{})
	var wg sync.WaitGroup
	for range 40 {
		wg.Go(func() {
			if _, err := b.client.Solve(ctxT(t), recaptcha("https://a.example/")); err != nil {
				t.Errorf("Solve: %v", err)
			}
		})
	}
	wg.Wait()
	if st := b.api.Stats(); st.Solved != 40 || st.MaxResCallsPerCaptcha > solver.DefaultMaxCalls {
		t.Errorf("solved %d (want 40), max res.php calls per captcha %d (want ≤ %d)", st.Solved, st.MaxResCallsPerCaptcha, solver.DefaultMaxCalls)
	}
}
