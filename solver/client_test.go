package solver_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
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

// fastSolve are millisecond solve times for every kind.
var fastSolve = map[string]fakeapi.Range{
	fakeapi.KindRecaptcha:   {Min: 5 * time.Millisecond, Max: 20 * time.Millisecond},
	fakeapi.KindRecaptchaV3: {Min: 2 * time.Millisecond, Max: 10 * time.Millisecond},
	fakeapi.KindTurnstile:   {Min: 2 * time.Millisecond, Max: 10 * time.Millisecond},
	fakeapi.KindGeeTest:     {Min: 2 * time.Millisecond, Max: 10 * time.Millisecond},
	fakeapi.KindImage:       {Min: 1 * time.Millisecond, Max: 5 * time.Millisecond},
	fakeapi.KindGrid:        {Min: 2 * time.Millisecond, Max: 10 * time.Millisecond},
	fakeapi.KindGeeTestV4:   {Min: 2 * time.Millisecond, Max: 10 * time.Millisecond},
	fakeapi.KindHCaptcha:    {Min: 2 * time.Millisecond, Max: 10 * time.Millisecond},
	fakeapi.KindCloudflare:  {Min: 2 * time.Millisecond, Max: 10 * time.Millisecond},
	fakeapi.KindBLS:         {Min: 2 * time.Millisecond, Max: 10 * time.Millisecond},
}

// fastTiming polls in milliseconds: first poll 5–15 ms, then every 5 ms (the
// production timing × 0.001).
var fastTiming = solver.Timing{Scale: 0.001}

// patientMaxWait is the local deadline setup gives every kind unless a test
// sets its own: ten hours, 36 s at Scale 0.001 (an hour, 3.6 s, was met by a
// ten-solve test under the race detector on a loaded machine). The production deadlines
// scaled (120–180 ms) are shorter than a few polls take on a loaded
// machine under the race detector, and a test that does not test the
// deadline must not meet it.
var patientMaxWait = func() map[string]time.Duration {
	m := map[string]time.Duration{}
	for _, k := range solver.Kinds() {
		m[k] = 10 * time.Hour
	}
	return m
}()

// bundle is what a test needs: an emulator, its HTTP server and a client.
type bundle struct {
	api    *fakeapi.Server
	srv    *httptest.Server
	client *solver.Client
	resGet atomic.Int64 // res.php requests seen by the server
	resCh  chan struct{}
}

type opts struct {
	api    fakeapi.Config
	client solver.Config
	// wrap, if set, wraps the emulator's handler (to watch or fail requests).
	wrap func(http.Handler) http.Handler
}

func setup(t *testing.T, o opts) *bundle {
	t.Helper()
	if o.api.SolveTime == nil {
		o.api.SolveTime = fastSolve
	}
	b := &bundle{api: fakeapi.New(o.api), resCh: make(chan struct{}, 1024)}
	var h http.Handler = b.api
	if o.wrap != nil {
		h = o.wrap(h)
	}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/res.php" {
			b.resGet.Add(1)
			select {
			case b.resCh <- struct{}{}:
			default:
			}
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(b.srv.Close)
	cfg := o.client
	cfg.BaseURL = b.srv.URL
	if cfg.APIKey == "" {
		cfg.APIKey = fakeapi.TestKey
	}
	if cfg.Timing.Scale == 0 {
		cfg.Timing.Scale = fastTiming.Scale
	}
	if cfg.Timing.MaxWait == nil {
		cfg.Timing.MaxWait = patientMaxWait
	}
	if cfg.MinSubmitInterval == 0 {
		cfg.MinSubmitInterval = -1
	}
	c, err := solver.NewClient(cfg)
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	b.client = c
	return b
}

func recaptcha(page string) solver.Request {
	return solver.Request{Method: "userrecaptcha", Params: map[string]string{
		"googlekey": "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-",
		"pageurl":   page,
	}}
}

func turnstile(page string) solver.Request {
	return solver.Request{Method: "turnstile", Params: map[string]string{
		"sitekey": "0x4AAAAAAAC3DHQFLr1GavRN",
		"pageurl": page,
	}}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func solutionString(t *testing.T, a solver.Answer) string {
	t.Helper()
	var s string
	if err := json.Unmarshal(a.Solution, &s); err != nil {
		t.Fatalf("solution %s is not a JSON string: %v", a.Solution, err)
	}
	return s
}

func TestSolveRecaptchaV2(t *testing.T) {
	t.Parallel()
	b := setup(t, opts{})
	a, err := b.client.Solve(ctxT(t), recaptcha("https://shop.example/login"))
	if err != nil {
		t.Fatalf("Solve: %v", err)
	}
	if tok := solutionString(t, a); !strings.HasPrefix(tok, "03A") || len(tok) < 100 {
		t.Errorf("token %q does not look like a reCAPTCHA token", tok)
	}
	if a.CaptchaID == "" {
		t.Error("answer has no captcha id")
	}
	st := b.api.Stats()
	if st.Submitted != 1 || st.Solved != 1 {
		t.Errorf("emulator saw %d submitted, %d solved; want 1, 1", st.Submitted, st.Solved)
	}
	if n := st.ResCallsPerCaptcha[a.CaptchaID]; n < 1 || n > solver.DefaultMaxCalls {
		t.Errorf("res.php calls for the captcha = %d, want 1..%d", n, solver.DefaultMaxCalls)
	}
}

func TestSolveTurnstileUserAgent(t *testing.T) {
	t.Parallel()
	b := setup(t, opts{api: fakeapi.Config{NumericIDs: true}})
	req := turnstile("https://shop.example/checkout")
	req.Params["userAgent"] = "Mozilla/5.0 captchaq-test"
	a, err := b.client.Solve(ctxT(t), req)
	if err != nil {
		t.Fatalf("Solve: %v", err)
	}
	if a.UserAgent != "Mozilla/5.0 captchaq-test" {
		t.Errorf("UserAgent = %q, want the task's", a.UserAgent)
	}
	if tok := solutionString(t, a); !strings.HasPrefix(tok, "0.") {
		t.Errorf("token %q does not look like a Turnstile token", tok)
	}
	if a.CaptchaID == "" || strings.Trim(a.CaptchaID, "0123456789") != "" {
		t.Errorf("captcha id %q from a numeric JSON id is not its digits", a.CaptchaID)
	}
}

func TestTokensAreUnique(t *testing.T) {
	t.Parallel()
	b := setup(t, opts{})
	seen := map[string]bool{}
	for range 5 {
		a, err := b.client.Solve(ctxT(t), turnstile("https://a.example/"))
		if err != nil {
			t.Fatalf("Solve: %v", err)
		}
		tok := solutionString(t, a)
		if seen[tok] {
			t.Fatalf("token %q returned twice", tok)
		}
		seen[tok] = true
	}
}

// TestErrorClasses runs the client against an emulator configured to fail in
// one way and checks the code and class of the error.
func TestErrorClasses(t *testing.T) {
	t.Parallel()
	const otherKey = "ffffffffffffffffffffffffffffffff"
	tests := []struct {
		name      string
		api       fakeapi.Config
		key       string
		req       solver.Request
		code      string
		class     retry.Class
		captchaID bool // the error carries the captcha id
	}{
		{
			name: "permanent rule at in.php",
			api: fakeapi.Config{Faults: fakeapi.Faults{Rules: []fakeapi.Rule{
				{Param: "pageurl", Contains: "bad.example", Code: "ERROR_PAGEURL"}}}},
			req: recaptcha("https://bad.example/x"), code: "ERROR_PAGEURL", class: retry.Permanent,
		},
		{
			name: "unsolvable", api: fakeapi.Config{Faults: fakeapi.Faults{Unsolvable: 1}},
			req: turnstile("https://a.example/"), code: "ERROR_CAPTCHA_UNSOLVABLE", class: retry.Resubmit, captchaID: true,
		},
		{
			name: "rule on poll",
			api: fakeapi.Config{Faults: fakeapi.Faults{Rules: []fakeapi.Rule{
				{Param: "pageurl", Contains: "expire", Code: "ERROR_TOKEN_EXPIRED", OnPoll: true}}}},
			req: turnstile("https://expire.example/"), code: "ERROR_TOKEN_EXPIRED", class: retry.Permanent, captchaID: true,
		},
		{
			name: "unknown key", key: otherKey,
			req: turnstile("https://a.example/"), code: "ERROR_KEY_DOES_NOT_EXIST", class: retry.Fatal,
		},
		{
			name: "key of wrong length", key: "short-key",
			req: turnstile("https://a.example/"), code: "ERROR_WRONG_USER_KEY", class: retry.Fatal,
		},
		{
			name: "outage", api: fakeapi.Config{Faults: fakeapi.Faults{Outage: true}},
			// in.php's 5xx: the service took nothing and the task did
			// nothing wrong, a capacity wait from the first.
			req: turnstile("https://a.example/"), code: "HTTP_500", class: retry.Capacity,
		},
		{
			name: "html page", api: fakeapi.Config{Faults: fakeapi.Faults{HTML: 1}},
			req: turnstile("https://a.example/"), code: solver.CodeBadReply, class: retry.Transient,
		},
		{
			name: "garbage", api: fakeapi.Config{Faults: fakeapi.Faults{Garbage: 1}},
			req: turnstile("https://a.example/"), code: solver.CodeBadReply, class: retry.Transient,
		},
		{
			name: "capacity rule", api: fakeapi.Config{Faults: fakeapi.Faults{Rules: []fakeapi.Rule{{Code: "ERROR_NO_SLOT_AVAILABLE"}}}},
			req: turnstile("https://a.example/"), code: "ERROR_NO_SLOT_AVAILABLE", class: retry.Capacity,
		},
		{
			name: "invalid params never reach the service",
			req:  solver.Request{Method: "turnstile", Params: map[string]string{"sitekey": "x"}},
			code: solver.CodeInvalidParams, class: retry.Permanent,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, opts{api: tt.api, client: solver.Config{APIKey: tt.key}})
			_, err := b.client.Solve(ctxT(t), tt.req)
			var e *solver.Error
			if !errors.As(err, &e) {
				t.Fatalf("Solve error = %v, want a *solver.Error", err)
			}
			if e.Code != tt.code || e.Class != tt.class {
				t.Errorf("error %v: code %s class %s, want %s %s", err, e.Code, e.Class, tt.code, tt.class)
			}
			if got := solver.ClassOf(err); got != tt.class {
				t.Errorf("ClassOf = %s, want %s", got, tt.class)
			}
			if tt.captchaID && e.CaptchaID == "" {
				t.Errorf("error %v carries no captcha id", err)
			}
			key := tt.key
			if key == "" {
				key = fakeapi.TestKey
			}
			if strings.Contains(err.Error(), key) {
				t.Errorf("error %q contains the API key", err)
			}
		})
	}
}

func TestCapacityWhileThreadsBusy(t *testing.T) {
	t.Parallel()
	b := setup(t, opts{api: fakeapi.Config{Threads: 1, SolveTime: map[string]fakeapi.Range{
		fakeapi.KindTurnstile: {Min: time.Hour, Max: time.Hour}}}})
	ctx, cancel := context.WithCancel(ctxT(t))
	done := make(chan error, 1)
	go func() { _, err := b.client.Solve(ctx, turnstile("https://a.example/")); done <- err }()
	<-b.resCh // the first captcha is being solved and polled
	_, err := b.client.Solve(ctxT(t), turnstile("https://a.example/"))
	if got := solver.CodeOf(err); got != "ERROR_ZERO_BALANCE" || solver.ClassOf(err) != retry.Capacity {
		t.Errorf("second Solve: %v, want ERROR_ZERO_BALANCE (capacity)", err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("first Solve after cancel: %v, want context.Canceled", err)
	}
	if st := b.api.Stats(); st.MaxConcurrent != 1 {
		t.Errorf("MaxConcurrent = %d, want 1", st.MaxConcurrent)
	}
}

// TestCancelStopsPolling cancels a Solve that is waiting between polls and
// expects it back at once, without another res.php call.
func TestCancelStopsPolling(t *testing.T) {
	t.Parallel()
	b := setup(t, opts{
		api: fakeapi.Config{SolveTime: map[string]fakeapi.Range{fakeapi.KindTurnstile: {Min: time.Hour, Max: time.Hour}}},
		// Poll every second: the test cancels while the client waits.
		client: solver.Config{Timing: solver.Timing{Scale: 0.2, MaxCalls: 20}},
	})
	ctx, cancel := context.WithCancel(ctxT(t))
	done := make(chan error, 1)
	go func() { _, err := b.client.Solve(ctx, turnstile("https://a.example/")); done <- err }()
	<-b.resCh // first poll after 1 s (5 s × 0.2)
	calls := b.resGet.Load()
	start := time.Now()
	cancel()
	err := <-done
	if el := time.Since(start); el > 200*time.Millisecond {
		t.Errorf("Solve returned %v after cancel, want at once", el)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Solve: %v, want context.Canceled", err)
	}
	if got := b.resGet.Load(); got != calls {
		t.Errorf("res.php calls went from %d to %d after cancel", calls, got)
	}
}

// TestBehindScheduleKeepsSpacing: a res.php call that takes several poll
// intervals does not make the client send the polls it missed in a burst
// when it returns: the next poll goes at once, the ones after keep the
// schedule's spacing.
func TestBehindScheduleKeepsSpacing(t *testing.T) {
	t.Parallel()
	const interval = 100 * time.Millisecond
	b, calls := slowFirstPoll(t, interval, time.Minute)
	_, err := b.client.Solve(ctxT(t), turnstile("https://a.example/"))
	if solver.CodeOf(err) != solver.CodePollLimit {
		t.Fatalf("Solve: %v, want %s", err, solver.CodePollLimit)
	}
	at, replied := calls()
	if len(at) != 6 {
		t.Fatalf("%d res.php calls, want 6", len(at))
	}
	// Call 2 goes once call 1 is answered, each later one an interval after
	// the one before: call k (from 2) no sooner than k−2 intervals after the
	// reply. A late arrival only makes a call later; the four polls missed
	// while call 1 was out must not come at once.
	for k := 2; k <= len(at); k++ {
		if d, want := at[k-1].Sub(replied), time.Duration(k-2)*interval; d < want {
			t.Errorf("res.php call %d %v after call 1 was answered, want %v or later", k, d, want)
		}
	}
}

// TestBehindScheduleGivesUpAtTheDeadline: when keeping the spacing pushes
// the polls left past the deadline, the captcha makes its own last poll at
// the deadline and gives up with CodeTimeout, not CodePollLimit: it did not
// make its polls. A call that returns past the deadline is the last.
func TestBehindScheduleGivesUpAtTheDeadline(t *testing.T) {
	t.Parallel()
	const interval = 100 * time.Millisecond
	for _, tt := range []struct {
		maxWait               time.Duration
		minCalls, maxCalls    int
		lastAtDeadlineOrLater bool
	}{
		// Polls at 10 ms (answered at 460), 460, 560, and the last at 600.
		{600 * time.Millisecond, 3, 5, true},
		// The first poll is answered at 460, past the deadline: no other.
		{400 * time.Millisecond, 1, 1, false},
	} {
		t.Run(tt.maxWait.String(), func(t *testing.T) {
			t.Parallel()
			b, calls := slowFirstPoll(t, interval, tt.maxWait)
			start := time.Now()
			_, err := b.client.Solve(ctxT(t), turnstile("https://a.example/"))
			if solver.CodeOf(err) != solver.CodeTimeout {
				t.Fatalf("Solve: %v, want %s", err, solver.CodeTimeout)
			}
			at, _ := calls()
			if len(at) < tt.minCalls || len(at) > tt.maxCalls {
				t.Errorf("%d res.php calls, want %d..%d", len(at), tt.minCalls, tt.maxCalls)
			}
			if last := at[len(at)-1]; tt.lastAtDeadlineOrLater && last.Before(start.Add(tt.maxWait)) {
				t.Errorf("last res.php call %v after the start, want at the deadline (%v) or later", last.Sub(start), tt.maxWait)
			}
		})
	}
}

// slowFirstPoll is a client on a fixed schedule (first poll at 10 ms, then
// every interval, 6 polls at most, local deadline maxWait) against an
// emulator that never solves and answers the first res.php call only after
// 4.5 intervals; calls returns when res.php calls arrived, and when the
// first was answered.
func slowFirstPoll(t *testing.T, interval, maxWait time.Duration) (b *bundle, calls func() ([]time.Time, time.Time)) {
	t.Helper()
	var mu sync.Mutex
	var at []time.Time
	var replied time.Time
	slowFirst := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/res.php" {
				mu.Lock()
				at = append(at, time.Now())
				first := len(at) == 1
				mu.Unlock()
				if first {
					time.Sleep(4*interval + interval/2) // the slow reply: a service under load
					mu.Lock()
					replied = time.Now()
					mu.Unlock()
				}
			}
			h.ServeHTTP(w, r)
		})
	}
	b = setup(t, opts{wrap: slowFirst,
		api: fakeapi.Config{SolveTime: map[string]fakeapi.Range{fakeapi.KindTurnstile: {Min: time.Hour, Max: time.Hour}}},
		client: solver.Config{Timing: solver.Timing{Scale: 1, Fixed: true, NoBatch: true, MaxCalls: 6, PollInterval: interval,
			FirstPoll: map[string]time.Duration{solver.KindTurnstile: 10 * time.Millisecond},
			MaxWait:   map[string]time.Duration{solver.KindTurnstile: maxWait}}}})
	return b, func() ([]time.Time, time.Time) {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(at), replied
	}
}

// TestUnreachableIsAnOutage: nothing listens at the base URL. That is no
// fault of the task: UNREACHABLE, a capacity wait, saying what failed and
// where; the client reports the outage until a call gets through.
func TestUnreachableIsAnOutage(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there now
	key := "deadbeefdeadbeefdeadbeefdeadbeef"
	c, err := solver.NewClient(solver.Config{BaseURL: url, APIKey: key, MinSubmitInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if since, err := c.Unreachable(); err != nil || !since.IsZero() {
		t.Fatalf("a new client reports an outage: %v %v", since, err)
	}
	_, err = c.Solve(ctxT(t), turnstile("https://a.example/"))
	if solver.CodeOf(err) != solver.CodeUnreachable || solver.ClassOf(err) != retry.Capacity {
		t.Errorf("Solve: %v, want UNREACHABLE (capacity)", err)
	}
	host := strings.TrimPrefix(url, "http://")
	if want := "connection refused to " + host; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not say %q", err, want)
	}
	if strings.Contains(err.Error(), key) {
		t.Errorf("error %q contains the key", err)
	}
	since, uerr := c.Unreachable()
	if since.IsZero() || uerr == nil || !strings.Contains(uerr.Error(), "connection refused to "+host) {
		t.Errorf("Unreachable() = %v, %v; want the outage", since, uerr)
	}

	// DNS: a name that does not resolve (the dialer says so, as the
	// resolver would, without asking one).
	noSuchHost := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		return nil, &net.OpError{Op: "dial", Net: network, Err: &net.DNSError{Err: "no such host", Name: "captchaq-test.invalid", IsNotFound: true}}
	}}}
	c, err = solver.NewClient(solver.Config{BaseURL: "http://captchaq-test.invalid", APIKey: key, MinSubmitInterval: -1, HTTPClient: noSuchHost})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Balance(ctxT(t))
	if solver.CodeOf(err) != solver.CodeUnreachable || !strings.Contains(err.Error(), "captchaq-test.invalid") {
		t.Errorf("Balance at an unknown host: %v, want UNREACHABLE naming the host", err)
	}

	// TLS: https to a plain-HTTP server.
	api := httptest.NewServer(fakeapi.New(fakeapi.Config{}))
	defer api.Close()
	c, err = solver.NewClient(solver.Config{BaseURL: strings.Replace(api.URL, "http://", "https://", 1), APIKey: fakeapi.TestKey, MinSubmitInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Balance(ctxT(t))
	if solver.CodeOf(err) != solver.CodeUnreachable || !strings.Contains(err.Error(), "TLS") {
		t.Errorf("https to a plain server: %v, want UNREACHABLE saying TLS", err)
	}

	// Once a call gets through, the outage is over.
	c, err = solver.NewClient(solver.Config{BaseURL: api.URL, APIKey: fakeapi.TestKey, MinSubmitInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Balance(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if since, err := c.Unreachable(); err != nil || !since.IsZero() {
		t.Errorf("after a good call: outage %v %v", since, err)
	}
}

func TestNewClientNeedsKey(t *testing.T) {
	t.Parallel()
	if _, err := solver.NewClient(solver.Config{}); err == nil {
		t.Error("NewClient without a key succeeded")
	}
}
