package solver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
)

// The conformance fixtures: what the services document, request and reply,
// each naming its source (solver/testdata/service/). The same fixtures drive
// the real client against a server that replays them and check the
// emulator's replies, so client and emulator cannot agree on something the
// service does not do.

// methodFixture is one method's documented exchange: the task's parameters,
// the in.php fields the service expects for them, and the res.php replies
// it documents, in their json=1 and plain-text forms.
type methodFixture struct {
	file    string
	Method  string            `json:"method"`
	Source  string            `json:"source"`
	Params  map[string]string `json:"params"`
	Sent    map[string]string `json:"sent"`
	Replies []struct {
		Name      string          `json:"name"`
		JSON      string          `json:"json"`
		Plain     string          `json:"plain"`
		Solution  json.RawMessage `json:"solution"`
		UserAgent string          `json:"user_agent"`
		// Pattern is what every answer of this shape looks like (text
		// answers); the emulator's must match it.
		Pattern string `json:"pattern"`
		// Emulator marks the reply whose shape the default emulator gives.
		Emulator bool `json:"emulator"`
	} `json:"replies"`
}

// codeFixture is one documented error code.
type codeFixture struct {
	Code         string `json:"code"`
	Op           string `json:"op"`
	Class        string `json:"class"`
	Class2Captch string `json:"class_2captcha"`
	Source       string `json:"source"`
	Plain        string `json:"plain"`
	JSON         string `json:"json"`
}

type repliesFixture struct {
	Source  string        `json:"source"`
	Codes   []codeFixture `json:"codes"`
	Balance struct {
		Source string  `json:"source"`
		Plain  string  `json:"plain"`
		JSON   string  `json:"json"`
		Value  float64 `json:"value"`
	} `json:"balance"`
	Report struct {
		Source string `json:"source"`
		Plain  string `json:"plain"`
		JSON   string `json:"json"`
	} `json:"report"`
	Submit []struct {
		Name   string `json:"name"`
		Source string `json:"source"`
		Plain  string `json:"plain"`
		JSON   string `json:"json"`
		ID     string `json:"id"`
	} `json:"submit"`
}

func decodeStrict(t *testing.T, file string, v any) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

func methodFixtures(t *testing.T) []methodFixture {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "service", "methods", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no method fixtures (%v)", err)
	}
	var out []methodFixture
	for _, f := range files {
		var fx methodFixture
		decodeStrict(t, f, &fx)
		fx.file = filepath.Base(f)
		if fx.Source == "" || len(fx.Replies) == 0 {
			t.Fatalf("%s names no source or no reply", f)
		}
		out = append(out, fx)
	}
	return out
}

func replyFixtures(t *testing.T) repliesFixture {
	t.Helper()
	var r repliesFixture
	decodeStrict(t, filepath.Join("testdata", "service", "replies.json"), &r)
	for _, c := range r.Codes {
		if c.Source == "" {
			t.Fatalf("code %s names no source", c.Code)
		}
	}
	return r
}

// replay is a server that answers in.php and res.php from fixtures: in.php
// with submit (after recording the form it got), res.php action=get with
// result, other actions with other.
type replay struct {
	mu     sync.Mutex
	forms  []url.Values
	submit string
	result string
	other  string
	// gets counts res.php action=get calls answered; onGet, if set, is
	// called with the count as each is answered.
	gets  int
	onGet func(n int)
}

func (rp *replay) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseMultipartForm(4 << 20); err != nil && err != http.ErrNotMultipart {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rp.mu.Lock()
	defer rp.mu.Unlock()
	body := rp.other
	switch {
	case r.URL.Path == "/in.php":
		rp.forms = append(rp.forms, r.Form)
		body = rp.submit
	case r.Form.Get("action") == "get":
		body = rp.result
		rp.gets++
		if rp.onGet != nil {
			rp.onGet(rp.gets)
		}
	}
	io.WriteString(w, body)
}

func replayClient(t *testing.T, rp *replay) *solver.Client {
	t.Helper()
	return replayClientOf(t, rp, "")
}

// replayClientOf is replayClient with a service profile ("" for the default,
// which is CaptchaAI for a local URL).
func replayClientOf(t *testing.T, rp *replay, svc solver.Service) *solver.Client {
	t.Helper()
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	c, err := solver.NewClient(solver.Config{BaseURL: srv.URL, APIKey: fakeapi.TestKey, Service: svc,
		Timing: solver.Timing{Scale: 0.001, Fixed: true, NoBatch: true, MaxWait: patientMaxWait}, MinSubmitInterval: -1, SubmitBurst: -1})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestConformanceClient drives the real client against the replayed
// fixtures: it must send what the service expects and read every documented
// reply, json=1 and plain, into the service's answer, and the method's typed
// accessor must read that answer.
func TestConformanceClient(t *testing.T) {
	t.Parallel()
	for _, fx := range methodFixtures(t) {
		for _, r := range fx.Replies {
			for form, body := range map[string]string{"json": r.JSON, "plain": r.Plain} {
				if body == "" {
					continue
				}
				t.Run(fx.file+"/"+r.Name+"/"+form, func(t *testing.T) {
					t.Parallel()
					rp := &replay{submit: "OK|73546281059", result: body}
					a, err := replayClient(t, rp).Solve(ctxT(t), solver.Request{Method: fx.Method, Params: fx.Params})
					if err != nil {
						t.Fatalf("Solve against %s (%s): %v", fx.file, fx.Source, err)
					}
					if !sameJSON(a.Solution, r.Solution) {
						t.Errorf("solution %s, want %s", a.Solution, r.Solution)
					}
					if form == "json" && a.UserAgent != r.UserAgent {
						t.Errorf("user agent %q, want %q", a.UserAgent, r.UserAgent)
					}
					if err := typed(fx.Method, fx.Params, a); err != nil {
						t.Errorf("typed accessor: %v", err)
					}
					rp.mu.Lock()
					defer rp.mu.Unlock()
					if len(rp.forms) != 1 {
						t.Fatalf("%d in.php calls, want 1", len(rp.forms))
					}
					got := rp.forms[0]
					for k, v := range fx.Sent {
						if got.Get(k) != v {
							t.Errorf("in.php %s = %q, want %q", k, got.Get(k), v)
						}
					}
					if got.Get("key") != fakeapi.TestKey || got.Get("json") != "1" {
						t.Errorf("in.php key/json = %q/%q", got.Get("key"), got.Get("json"))
					}
				})
			}
		}
	}
}

// TestConformanceCodes replays every documented error code, in both forms,
// from the endpoint that answers it, and checks the client's code and class.
func TestConformanceCodes(t *testing.T) {
	t.Parallel()
	fx := replyFixtures(t)
	req := solver.Request{Method: "turnstile", Params: map[string]string{"sitekey": "0x4AAAAAAAC3DHQFLr1GavRN", "pageurl": "https://shop.example/"}}
	for _, c := range fx.Codes {
		for _, svc := range solver.Services() {
			for form, body := range map[string]string{"json": c.JSON, "plain": c.Plain} {
				t.Run(c.Code+"/"+string(svc)+"/"+form, func(t *testing.T) {
					t.Parallel()
					class := c.Class
					if svc == solver.TwoCaptcha && c.Class2Captch != "" {
						class = c.Class2Captch
					}
					replayCode(t, req, c, svc, form, body, class)
				})
			}
		}
	}
}

func replayCode(t *testing.T, req solver.Request, c codeFixture, svc solver.Service, form, body, class string) {
	t.Helper()
	rp := &replay{submit: body, result: "OK|token"}
	if c.Op == "res.php" {
		rp.submit, rp.result = "OK|73546281059", body
	}
	if c.Class == "poll" {
		// Not ready is polled on; replay it as a fetch.
		id, err := replayClientOf(t, rp, svc).Submit(ctxT(t), req)
		if err != nil {
			t.Fatal(err)
		}
		_, err = replayClientOf(t, rp, svc).Fetch(ctxT(t), id)
		checkCode(t, err, c.Code, class)
		return
	}
	ctx := ctxT(t)
	if c.Op == "res.php" && (class == "transient" || class == "capacity") {
		// The service said nothing about the captcha it accepted: it is
		// held and polled again until ctx ends, and the error says both.
		// ctx ends as the second poll is answered, when the client has
		// read the first reply: a fixed 300 ms ended it before any reply
		// in CI's race preview ('code "" (… context deadline exceeded)').
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		rp.onGet = func(n int) {
			if n == 2 {
				cancel()
			}
		}
	}
	_, err := replayClientOf(t, rp, svc).Solve(ctx, req)
	checkCode(t, err, c.Code, class)
	var e *solver.Error
	if form == "json" && errors.As(err, &e) && !strings.Contains(c.JSON, e.Text) || e != nil && e.Text == "" && form == "json" {
		t.Errorf("error text %q, want the reply's error_text", e.Text)
	}
}

func checkCode(t *testing.T, err error, code, class string) {
	t.Helper()
	if got := solver.CodeOf(err); got != code {
		t.Fatalf("code %q (%v), want %q", got, err, code)
	}
	if got := solver.ClassOf(err).String(); got != class {
		t.Errorf("%s: class %s, want %s", code, got, class)
	}
}

// TestConformanceCoversCodes: every service code the client classifies has
// a fixture with a source. The pseudo-codes are captchaq's own.
func TestConformanceCoversCodes(t *testing.T) {
	t.Parallel()
	have := map[string]bool{}
	for _, c := range replyFixtures(t).Codes {
		have[c.Code] = true
	}
	own := []string{solver.CodeBadReply, solver.CodeNetwork, solver.CodeUnreachable, solver.CodeInvalidParams, solver.CodeTimeout, solver.CodePollLimit,
		"CAPTCHA_NOT_READY"} // the correct spelling, accepted in case a compatible service uses it; no service documents it
	for _, code := range solver.KnownCodes() {
		if strings.HasPrefix(code, "HTTP_") || slices.Contains(own, code) {
			continue
		}
		if !have[code] {
			t.Errorf("code %s has no fixture in testdata/service/replies.json", code)
		}
	}
}

// TestConformanceMethodsCovered: every method Validate accepts has a
// fixture.
func TestConformanceMethodsCovered(t *testing.T) {
	t.Parallel()
	have := map[string]bool{}
	for _, fx := range methodFixtures(t) {
		have[fx.Method] = true
		have[solver.Kind(fx.Method, fx.Params)] = true
	}
	for _, m := range solver.Methods() {
		if !have[m] {
			t.Errorf("method %s has no fixture", m)
		}
	}
	for _, k := range solver.Kinds() {
		if !have[k] {
			t.Errorf("kind %s has no fixture", k)
		}
	}
}

// TestConformanceBalanceReport replays getbalance and report replies.
func TestConformanceBalanceReport(t *testing.T) {
	t.Parallel()
	fx := replyFixtures(t)
	for form, body := range map[string]string{"json": fx.Balance.JSON, "plain": fx.Balance.Plain} {
		got, err := replayClient(t, &replay{other: body}).Balance(ctxT(t))
		if err != nil || got != fx.Balance.Value {
			t.Errorf("balance from %s reply %q = %v, %v; want %v (%s)", form, body, got, err, fx.Balance.Value, fx.Balance.Source)
		}
	}
	for form, body := range map[string]string{"json": fx.Report.JSON, "plain": fx.Report.Plain} {
		if err := replayClient(t, &replay{other: body}).Report(ctxT(t), "73546281059", false); err != nil {
			t.Errorf("report from %s reply %q: %v", form, body, err)
		}
	}
	for _, s := range fx.Submit {
		for form, body := range map[string]string{"json": s.JSON, "plain": s.Plain} {
			if body == "" {
				continue
			}
			id, err := replayClient(t, &replay{submit: body}).Submit(ctxT(t), solver.Request{Method: "turnstile",
				Params: map[string]string{"sitekey": "0x4AAA", "pageurl": "https://shop.example/"}})
			if err != nil || id != s.ID {
				t.Errorf("submit %s, %s reply %q: id %q, %v; want %q", s.Name, form, body, id, err, s.ID)
			}
		}
	}
}

// TestConformanceEmulator sends each fixture's request to the emulator, in
// both forms, as a plain HTTP client would, and checks that its replies
// have the documented shape: the same fields, the same type of answer (the
// same keys for objects), text matching the fixture's pattern.
func TestConformanceEmulator(t *testing.T) {
	t.Parallel()
	fast := map[string]fakeapi.Range{}
	for _, k := range solver.Kinds() {
		fast[k] = fakeapi.Range{Min: time.Millisecond, Max: 2 * time.Millisecond}
	}
	api := fakeapi.New(fakeapi.Config{SolveTime: fast, BurstLimit: 1 << 20})
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	for _, fx := range methodFixtures(t) {
		for _, r := range fx.Replies {
			if !r.Emulator {
				continue
			}
			t.Run(fx.file+"/"+r.Name, func(t *testing.T) {
				t.Parallel()
				for _, jsonOut := range []bool{true, false} {
					if !jsonOut && r.Plain == "" {
						continue
					}
					form := url.Values{"key": {fakeapi.TestKey}}
					for k, v := range fx.Sent {
						form.Set(k, v)
					}
					want := r.Plain
					if jsonOut {
						form.Set("json", "1")
						want = r.JSON
					}
					sub := post(t, srv.URL+"/in.php", form)
					id := strings.TrimPrefix(sub, "OK|")
					if jsonOut {
						var j struct {
							Status  int    `json:"status"`
							Request string `json:"request"`
						}
						if err := json.Unmarshal([]byte(sub), &j); err != nil || j.Status != 1 {
							t.Fatalf("in.php answered %q", sub)
						}
						id = j.Request
					} else if id == sub {
						t.Fatalf("in.php answered %q, want OK|<id>", sub)
					}
					got := pollEmulator(t, srv.URL, id, jsonOut)
					compareShape(t, got, want, r.Pattern, jsonOut)
				}
			})
		}
	}
}

// TestConformanceEmulatorCodes checks the emulator's form of every
// documented error code, from the endpoint that answers it.
func TestConformanceEmulatorCodes(t *testing.T) {
	t.Parallel()
	for _, c := range replyFixtures(t).Codes {
		if c.Class == "poll" {
			continue
		}
		t.Run(c.Code, func(t *testing.T) {
			t.Parallel()
			api := fakeapi.New(fakeapi.Config{
				SolveTime: map[string]fakeapi.Range{fakeapi.KindTurnstile: {Min: time.Millisecond, Max: time.Millisecond}},
				Faults:    fakeapi.Faults{Rules: []fakeapi.Rule{{Code: c.Code, OnPoll: c.Op == "res.php"}}},
			})
			srv := httptest.NewServer(api)
			defer srv.Close()
			for _, jsonOut := range []bool{true, false} {
				form := url.Values{"key": {fakeapi.TestKey}, "method": {"turnstile"}, "sitekey": {"0x4AAA"}, "pageurl": {"https://shop.example/"}}
				want := c.Plain
				if jsonOut {
					form.Set("json", "1")
					want = c.JSON
				}
				got := post(t, srv.URL+"/in.php", form)
				if c.Op == "res.php" {
					id := strings.TrimPrefix(got, "OK|")
					if jsonOut {
						var j struct{ Request string }
						_ = json.Unmarshal([]byte(got), &j)
						id = j.Request
					}
					got = pollEmulator(t, srv.URL, id, jsonOut)
				}
				if jsonOut {
					var g, w map[string]json.RawMessage
					if err := json.Unmarshal([]byte(got), &g); err != nil {
						t.Fatalf("json=1: %s: %v", got, err)
					}
					_ = json.Unmarshal([]byte(want), &w)
					var text string
					_ = json.Unmarshal(g["error_text"], &text)
					if !slices.Equal(keys(g), keys(w)) || string(g["request"]) != string(w["request"]) || string(g["status"]) != "0" || text == "" {
						t.Errorf("json=1: %s, want the shape of %s", got, want)
					}
				} else if got != want {
					t.Errorf("plain: %q, want %q", got, want)
				}
			}
		})
	}
}

func post(t *testing.T, u string, form url.Values) string {
	t.Helper()
	resp, err := http.PostForm(u, form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(b))
}

// pollEmulator asks res.php for id until it is not CAPCHA_NOT_READY.
func pollEmulator(t *testing.T, base, id string, jsonOut bool) string {
	t.Helper()
	form := url.Values{"key": {fakeapi.TestKey}, "action": {"get"}, "id": {id}}
	if jsonOut {
		form.Set("json", "1")
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	ctx := ctxT(t)
	for {
		got := post(t, base+"/res.php", form)
		if !strings.Contains(got, "CAPCHA_NOT_READY") {
			return got
		}
		select {
		case <-ctx.Done():
			t.Fatalf("captcha %s never ready", id)
		case <-tick.C:
		}
	}
}

// compareShape checks that got has the shape of the documented reply want.
func compareShape(t *testing.T, got, want, pattern string, jsonOut bool) {
	t.Helper()
	text := func(s string) string { return strings.TrimPrefix(s, "OK|") }
	var gotReq, wantReq json.RawMessage
	if jsonOut {
		var g, w map[string]json.RawMessage
		if err := json.Unmarshal([]byte(got), &g); err != nil {
			t.Fatalf("emulator reply %s: %v", got, err)
		}
		_ = json.Unmarshal([]byte(want), &w)
		if gk, wk := keys(g), keys(w); !slices.Equal(gk, wk) {
			t.Errorf("emulator reply fields %v, documented %v (%s)", gk, wk, got)
		}
		gotReq, wantReq = g["request"], w["request"]
	} else {
		if !strings.HasPrefix(got, "OK|") {
			t.Fatalf("emulator plain reply %q, want OK|…", got)
		}
		gotReq, wantReq = json.RawMessage(text(got)), json.RawMessage(text(want))
	}
	if len(wantReq) > 0 && wantReq[0] == '{' {
		var g, w map[string]json.RawMessage
		if err := json.Unmarshal(gotReq, &g); err != nil {
			t.Fatalf("emulator answer %s is not an object like the documented %s", gotReq, wantReq)
		}
		_ = json.Unmarshal(wantReq, &w)
		if gk, wk := keys(g), keys(w); !slices.Equal(gk, wk) {
			t.Errorf("emulator answer keys %v, documented %v", gk, wk)
		}
		return
	}
	s := string(gotReq)
	if jsonOut {
		if err := json.Unmarshal(gotReq, &s); err != nil {
			t.Fatalf("emulator answer %s is not a string like the documented %s", gotReq, wantReq)
		}
	}
	if pattern != "" && !regexp.MustCompile(pattern).MatchString(s) {
		t.Errorf("emulator answer %q does not match the documented shape %s", s, pattern)
	}
}

func keys(m map[string]json.RawMessage) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// sameJSON reports whether a and b are the same JSON value.
func sameJSON(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}

// typed reads a with the typed accessor of its method.
func typed(method string, params map[string]string, a solver.Answer) error {
	var err error
	switch solver.Kind(method, params) {
	case solver.KindGeeTest:
		_, err = a.GeeTest()
	case solver.KindGeeTestV4:
		_, err = a.GeeTestV4()
	case solver.KindCloudflare:
		_, err = a.Cloudflare()
	case solver.KindBLS:
		_, err = a.Cells()
	case solver.KindGrid:
		_, err = a.Clicks()
	default:
		_, err = a.Text()
	}
	return err
}
