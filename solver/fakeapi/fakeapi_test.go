package fakeapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

var png = append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, 32)...)

// do sends a request to s and returns the status and body.
func do(t *testing.T, s *Server, r *http.Request) (int, string) {
	t.Helper()
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	b, _ := io.ReadAll(w.Result().Body)
	return w.Code, string(b)
}

func get(path string, v url.Values) *http.Request {
	return httptest.NewRequest(http.MethodGet, path+"?"+v.Encode(), nil)
}

func post(path string, v url.Values) *http.Request {
	r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(v.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return r
}

func multipartPost(t *testing.T, fields map[string]string, name string, file []byte) *http.Request {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for k, v := range fields {
		mw.WriteField(k, v)
	}
	fw, _ := mw.CreateFormFile("file", name)
	fw.Write(file)
	mw.Close()
	r := httptest.NewRequest(http.MethodPost, "/in.php", &buf)
	r.Header.Set("Content-Type", mw.FormDataContentType())
	return r
}

func vals(kv ...string) url.Values {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Set(kv[i], kv[i+1])
	}
	return v
}

func TestSubmitChecks(t *testing.T) {
	t.Parallel()
	s := New(Config{})
	k := TestKey
	tests := []struct {
		name string
		req  *http.Request
		want string
	}{
		{"GET plain ok", get("/in.php", vals("key", k, "method", "turnstile", "sitekey", "x", "pageurl", "https://a.example/")), "OK|"},
		{"POST json ok", post("/in.php", vals("key", k, "method", "userrecaptcha", "googlekey", "g", "pageurl", "https://a.example/", "json", "1")), `{"status":1,"request":"`},
		{"no key", post("/in.php", vals("method", "turnstile")), "ERROR_KEY_DOES_NOT_EXIST"},
		{"short key", post("/in.php", vals("key", "abc", "method", "turnstile")), "ERROR_WRONG_USER_KEY"},
		{"unknown key", post("/in.php", vals("key", strings.Repeat("f", 32), "method", "turnstile")), "ERROR_KEY_DOES_NOT_EXIST"},
		{"no googlekey", post("/in.php", vals("key", k, "method", "userrecaptcha", "pageurl", "https://a.example/")), "ERROR_GOOGLEKEY"},
		{"no pageurl", post("/in.php", vals("key", k, "method", "userrecaptcha", "googlekey", "g")), "ERROR_PAGEURL"},
		{"turnstile no sitekey", post("/in.php", vals("key", k, "method", "turnstile", "pageurl", "https://a.example/")), "ERROR_BAD_PARAMETERS"},
		{"geetest no gt", post("/in.php", vals("key", k, "method", "geetest", "challenge", "c", "pageurl", "https://a.example/")), "ERROR_BAD_PARAMETERS"},
		{"unknown method", post("/in.php", vals("key", k, "method", "nope")), "ERROR_BAD_PARAMETERS"},
		{"bad proxy", post("/in.php", vals("key", k, "method", "turnstile", "sitekey", "x", "pageurl", "https://a.example/", "proxy", "nohost")), "ERROR_PROXY_FORMAT"},
		{"bad proxytype", post("/in.php", vals("key", k, "method", "turnstile", "sitekey", "x", "pageurl", "https://a.example/", "proxy", "h:1", "proxytype", "FTP")), "ERROR_BAD_PROXY"},
		{"base64 empty", post("/in.php", vals("key", k, "method", "base64")), "ERROR_ZERO_CAPTCHA_FILESIZE"},
		{"base64 not an image", post("/in.php", vals("key", k, "method", "base64", "body", base64.StdEncoding.EncodeToString([]byte("BMxxxx")))), "ERROR_IMAGE_TYPE_NOT_SUPPORTED"},
		{"base64 too big", post("/in.php", vals("key", k, "method", "base64", "body", base64.StdEncoding.EncodeToString(append(png, make([]byte, MaxImageSize)...)))), "ERROR_TOO_BIG_CAPTCHA_FILESIZE"},
		{"base64 ok", post("/in.php", vals("key", k, "method", "base64", "body", base64.StdEncoding.EncodeToString(png))), "OK|"},
		{"multipart ok", multipartPost(t, map[string]string{"key": k, "method": "post", "json": "1"}, "c.png", png), `{"status":1,"request":"`},
		{"multipart bad extension", multipartPost(t, map[string]string{"key": k, "method": "post"}, "c.bmp", png), "ERROR_WRONG_FILE_EXTENSION"},
		{"post without file", post("/in.php", vals("key", k, "method", "post")), "ERROR_ZERO_CAPTCHA_FILESIZE"},
		{"res no action", post("/res.php", vals("key", k, "id", "1")), "ERROR_EMPTY_ACTION"},
		{"res bad id", post("/res.php", vals("key", k, "action", "get", "id", "x1")), "ERROR_WRONG_ID_FORMAT"},
		{"res unknown id", post("/res.php", vals("key", k, "action", "get", "id", "1")), "ERROR_WRONG_CAPTCHA_ID"},
		// 100 less the four captchas accepted above, at 1.00 per 1000.
		{"balance json", post("/res.php", vals("key", k, "action", "getbalance", "json", "1")), `{"status":1,"request":"99.99600"}`},
	}
	for _, tt := range tests {
		if _, body := do(t, s, tt.req); !strings.HasPrefix(body, tt.want) {
			t.Errorf("%s: body %q, want prefix %q", tt.name, body, tt.want)
		}
	}
}

// submit returns a new captcha's id.
func submit(t *testing.T, s *Server, kv ...string) string {
	t.Helper()
	v := vals(append([]string{"key", TestKey, "json", "1"}, kv...)...)
	_, body := do(t, s, post("/in.php", v))
	var r struct {
		Status  int
		Request json.RawMessage
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil || r.Status != 1 {
		t.Fatalf("submit: %q", body)
	}
	return strings.Trim(string(r.Request), `"`)
}

func TestLifecycle(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	s := New(Config{Threads: 1, NumericIDs: true, SolveTime: map[string]Range{KindTurnstile: {Min: 10 * time.Second, Max: 10 * time.Second}}})
	s.now = func() time.Time { return now }
	id := submit(t, s, "method", "turnstile", "sitekey", "x", "pageurl", "https://a.example/", "userAgent", "UA/1")
	if _, body := do(t, s, post("/in.php", vals("key", TestKey, "method", "turnstile", "sitekey", "x", "pageurl", "https://a.example/"))); body != "ERROR_ZERO_BALANCE" {
		t.Errorf("second submit with 1 thread: %q, want ERROR_ZERO_BALANCE", body)
	}
	if _, body := do(t, s, get("/res.php", vals("key", TestKey, "action", "get", "id", id))); body != "CAPCHA_NOT_READY" {
		t.Errorf("before ready: %q", body)
	}
	if st := s.Stats(); st.Concurrent != 1 || st.MaxConcurrent != 1 {
		t.Errorf("concurrent %d max %d, want 1 1", st.Concurrent, st.MaxConcurrent)
	}
	now = now.Add(13 * time.Second) // ready 3 s ago
	_, body := do(t, s, post("/res.php", vals("key", TestKey, "action", "get", "id", id, "json", "1")))
	var r struct {
		Status    int
		Request   string
		UserAgent string
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil || r.Status != 1 || !strings.HasPrefix(r.Request, "0.") || r.UserAgent != "UA/1" {
		t.Errorf("answer %q", body)
	}
	st := s.Stats()
	if st.Solved != 1 || st.Pickups != 1 || st.PickupLagMean != 3*time.Second || st.PickupLagMax != 3*time.Second ||
		st.ResCallsPerCaptcha[id] != 2 || st.Concurrent != 0 {
		t.Errorf("stats %+v", st)
	}
	if _, body := do(t, s, post("/res.php", vals("key", TestKey, "action", "reportbad", "id", id))); body != "OK_REPORT_RECORDED" {
		t.Errorf("reportbad: %q", body)
	}
	// A thread is free again.
	submit(t, s, "method", "turnstile", "sitekey", "x", "pageurl", "https://a.example/")
}

func TestFaultsAtRuntime(t *testing.T) {
	t.Parallel()
	s := New(Config{})
	ok := vals("key", TestKey, "action", "getbalance")
	s.SetFaults(Faults{Outage: true})
	if code, body := do(t, s, post("/res.php", ok)); code != 500 || !strings.Contains(body, "<html>") {
		t.Errorf("outage: %d %q", code, body)
	}
	s.SetFaults(Faults{Garbage: 1})
	if code, body := do(t, s, post("/res.php", ok)); code != 200 || body == "100.00000" {
		t.Errorf("garbage: %d %q", code, body)
	}
	s.SetFaults(Faults{})
	if _, body := do(t, s, post("/res.php", ok)); body != "100.00000" {
		t.Errorf("healthy: %q", body)
	}
	if st := s.Stats(); st.Codes[CodeHTTP500] != 1 || st.Codes[CodeGarbage] != 1 || st.ResCalls != 3 {
		t.Errorf("stats %+v", st)
	}
}

func TestBurstBan(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	s := New(Config{BurstLimit: 2})
	s.now = func() time.Time { return now }
	for i := range 3 {
		_, body := do(t, s, post("/in.php", vals("key", TestKey, "method", "turnstile", "sitekey", "x", "pageurl", "https://a.example/")))
		if want := i < 2; want != strings.HasPrefix(body, "OK|") {
			t.Errorf("call %d: %q", i, body)
		}
	}
	now = now.Add(5 * time.Second) // window passed, ban (10 s) not
	if _, body := do(t, s, post("/in.php", vals("key", TestKey, "method", "turnstile", "sitekey", "x", "pageurl", "https://a.example/"))); body != "MAX_USER_TURN" {
		t.Errorf("during ban: %q", body)
	}
	now = now.Add(6 * time.Second)
	if _, body := do(t, s, post("/in.php", vals("key", TestKey, "method", "turnstile", "sitekey", "x", "pageurl", "https://a.example/"))); !strings.HasPrefix(body, "OK|") {
		t.Errorf("after ban: %q", body)
	}
}

func TestDeterministicWithSeed(t *testing.T) {
	t.Parallel()
	run := func() []string {
		now := time.Unix(1_000_000, 0)
		s := New(Config{Seed: 42})
		s.now = func() time.Time { return now }
		var out []string
		for range 3 {
			id := submit(t, s, "method", "userrecaptcha", "googlekey", "g", "pageurl", "https://a.example/")
			now = now.Add(time.Minute)
			_, body := do(t, s, post("/res.php", vals("key", TestKey, "action", "get", "id", id)))
			out = append(out, id, body)
		}
		return out
	}
	a, b := run(), run()
	if strings.Join(a, ",") != strings.Join(b, ",") {
		t.Errorf("two runs with one seed differ:\n%v\n%v", a, b)
	}
	if a[1] == a[3] {
		t.Errorf("two captchas share token %q", a[1])
	}
}

// TestResCallsForgottenWithCaptchas: a long-running emulator forgets the
// per-captcha res.php counts with the captchas swept after ResultTTL, while
// MaxResCallsPerCaptcha still counts the forgotten ones.
func TestResCallsForgottenWithCaptchas(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	s := New(Config{BurstLimit: 1 << 20, ResultTTL: time.Minute,
		SolveTime: map[string]Range{KindTurnstile: {Min: time.Second, Max: time.Second}}})
	s.now = func() time.Time { return now }
	const n = 1100
	for i := range n {
		id := submit(t, s, "method", "turnstile", "sitekey", "x", "pageurl", "https://a.example/")
		for range 1 + i%3 {
			do(t, s, post("/res.php", vals("key", TestKey, "action", "get", "id", id)))
		}
	}
	if st := s.Stats(); len(st.ResCallsPerCaptcha) != n || st.MaxResCallsPerCaptcha != 3 {
		t.Fatalf("%d captchas with counts, max %d; want %d, 3", len(st.ResCallsPerCaptcha), st.MaxResCallsPerCaptcha, n)
	}
	now = now.Add(time.Hour) // every answer is past ResultTTL
	id := submit(t, s, "method", "turnstile", "sitekey", "x", "pageurl", "https://a.example/")
	do(t, s, post("/res.php", vals("key", TestKey, "action", "get", "id", id)))
	st := s.Stats()
	if len(st.ResCallsPerCaptcha) != 1 || st.ResCallsPerCaptcha[id] != 1 || st.MaxResCallsPerCaptcha != 3 {
		t.Errorf("after the sweep: counts %v, max %d; want only %s: 1, max 3", st.ResCallsPerCaptcha, st.MaxResCallsPerCaptcha, id)
	}
}

// TestBatchPoll asks res.php about several captchas at once: their states
// in order, joined by "|", plain or as the request string of JSON; a ready
// one counts as picked up. A Server without BatchPolls (the default) ignores ids.
func TestBatchPoll(t *testing.T) {
	clock := time.Unix(1_700_000_000, 0)
	s := New(Config{Seed: 1, BatchPolls: true, SolveTime: map[string]Range{
		KindImage:     {Min: time.Second, Max: time.Second},
		KindRecaptcha: {Min: time.Minute, Max: time.Minute}}})
	s.now = func() time.Time { return clock }
	submit := func(kv ...string) string {
		_, body := do(t, s, post("/in.php", vals(append([]string{"key", TestKey, "json", "1"}, kv...)...)))
		var r struct{ Request string }
		if err := json.Unmarshal([]byte(body), &r); err != nil || r.Request == "" {
			t.Fatalf("in.php: %s", body)
		}
		return r.Request
	}
	img := submit("method", "base64", "body", base64.StdEncoding.EncodeToString(png))
	rc := submit("method", "userrecaptcha", "googlekey", "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-", "pageurl", "https://a.example/")
	clock = clock.Add(2 * time.Second)

	_, body := do(t, s, post("/res.php", vals("key", TestKey, "action", "get", "ids", img+","+rc+",99999")))
	states := strings.Split(body, "|")
	if len(states) != 3 || states[0] == "CAPCHA_NOT_READY" || states[1] != "CAPCHA_NOT_READY" || states[2] != "ERROR_WRONG_CAPTCHA_ID" {
		t.Fatalf("batch poll = %q, want <answer>|CAPCHA_NOT_READY|ERROR_WRONG_CAPTCHA_ID", body)
	}
	_, body = do(t, s, post("/res.php", vals("key", TestKey, "action", "get", "ids", img+","+rc, "json", "1")))
	var j struct {
		Status  int
		Request string
	}
	if err := json.Unmarshal([]byte(body), &j); err != nil || j.Status != 1 || j.Request != states[0]+"|CAPCHA_NOT_READY" {
		t.Fatalf("JSON batch poll = %s, want status 1 and %q", body, states[0]+"|CAPCHA_NOT_READY")
	}
	st := s.Stats()
	if st.BatchCalls != 2 || st.BatchAsked != 5 || st.Pickups != 1 || st.Solved != 1 || st.ResCallsPerCaptcha[img] != 0 {
		t.Errorf("stats: %d batch calls asking %d, %d pickups, %d solved, %d single calls; want 2, 5, 1, 1, 0",
			st.BatchCalls, st.BatchAsked, st.Pickups, st.Solved, st.ResCallsPerCaptcha[img])
	}
	if _, body := do(t, s, post("/res.php", vals("key", TestKey, "action", "get", "ids", img+",x1"))); body != "ERROR_WRONG_ID_FORMAT" {
		t.Errorf("batch poll with a bad id = %q, want ERROR_WRONG_ID_FORMAT", body)
	}

	// Up to 100 ids in one call (2captcha's res.php with ids, as
	// classic.MaxBatchIDs cites it): 100 are answered, 101 refused.
	ids := strings.Repeat(img+",", 99) + img
	if _, body := do(t, s, post("/res.php", vals("key", TestKey, "action", "get", "ids", ids))); len(strings.Split(body, "|")) != 100 {
		t.Errorf("batch poll of 100 ids = %.80q…, want 100 states", body)
	}
	if _, body := do(t, s, post("/res.php", vals("key", TestKey, "action", "get", "ids", ids+","+img))); body != "ERROR_BAD_PARAMETERS" {
		t.Errorf("batch poll of 101 ids = %.80q…, want ERROR_BAD_PARAMETERS", body)
	}

	nb := New(Config{Seed: 1})
	if _, body := do(t, nb, post("/res.php", vals("key", TestKey, "action", "get", "ids", "1,2"))); body != "ERROR_WRONG_CAPTCHA_ID" {
		t.Errorf("without BatchPolls: batch poll = %q, want ERROR_WRONG_CAPTCHA_ID", body)
	}
}

// Demo site keys fail on demand: perm-fail at in.php every time, unsolvable
// at res.php every time, flaky-2 twice for the same page, then an answer.
func TestDemoSiteKeys(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	s := New(Config{NumericIDs: true, SolveTime: map[string]Range{KindTurnstile: {Min: time.Second, Max: time.Second}}})
	s.now = func() time.Time { return now }
	poll := func(id string) string {
		now = now.Add(2 * time.Second)
		_, body := do(t, s, get("/res.php", vals("key", TestKey, "action", "get", "id", id)))
		return body
	}
	for range 2 {
		if _, body := do(t, s, post("/in.php", vals("key", TestKey, "method", "userrecaptcha", "googlekey", "perm-fail", "pageurl", "https://a.example/"))); body != "ERROR_WRONG_GOOGLEKEY" {
			t.Errorf("perm-fail: %q", body)
		}
		if body := poll(submit(t, s, "method", "turnstile", "sitekey", "unsolvable", "pageurl", "https://a.example/")); body != "ERROR_CAPTCHA_UNSOLVABLE" {
			t.Errorf("unsolvable: %q", body)
		}
	}
	for i, want := range []string{"ERROR_CAPTCHA_UNSOLVABLE", "ERROR_CAPTCHA_UNSOLVABLE", "OK|"} {
		if body := poll(submit(t, s, "method", "turnstile", "sitekey", "flaky-2", "pageurl", "https://b.example/")); !strings.HasPrefix(body, want) {
			t.Errorf("flaky-2, submission %d: %q, want %s…", i+1, body, want)
		}
	}
	if body := poll(submit(t, s, "method", "turnstile", "sitekey", "flaky-2", "pageurl", "https://c.example/")); body != "ERROR_CAPTCHA_UNSOLVABLE" {
		t.Errorf("flaky-2 counts per page: %q", body)
	}
	if body := poll(submit(t, s, "method", "turnstile", "sitekey", "flaky-x", "pageurl", "https://b.example/")); !strings.HasPrefix(body, "OK|") {
		t.Errorf("flaky-x is no demo key: %q", body)
	}
}

// TestPingbackAsDocumented: each profile calls back as its service
// documents it: CaptchaAI with a GET carrying id and code in the query,
// 2captcha with a POST of the same form fields.
func TestPingbackAsDocumented(t *testing.T) {
	for _, tc := range []struct{ service, method string }{{ServiceCaptchaAI, http.MethodGet}, {Service2Captcha, http.MethodPost}} {
		t.Run(tc.service, func(t *testing.T) {
			type call struct{ method, id, code, query string }
			got := make(chan call, 1)
			cb := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				q := r.URL.RawQuery
				_ = r.ParseForm()
				got <- call{r.Method, r.FormValue("id"), r.FormValue("code"), q}
				w.Write([]byte("OK"))
			}))
			defer cb.Close()
			s := New(Config{Seed: 1, Service: tc.service, TimeScale: 0.001})
			code, body := do(t, s, get("/in.php", url.Values{"key": {TestKey}, "method": {"base64"},
				"body": {base64.StdEncoding.EncodeToString(png)}, "pingback": {cb.URL + "/cb/s3cret"}}))
			if code != http.StatusOK || !strings.HasPrefix(body, "OK|") {
				t.Fatalf("in.php: %d %s", code, body)
			}
			id := strings.TrimPrefix(body, "OK|")
			var c call
			select {
			case c = <-got:
			case <-time.After(10 * time.Second):
				t.Fatal("no callback")
			}
			if c.method != tc.method || c.id != id || c.code == "" {
				t.Errorf("callback %s id=%q code=%q, want %s id=%q and the answer", c.method, c.id, c.code, tc.method, id)
			}
			if inQuery := c.query != ""; inQuery != (tc.method == http.MethodGet) {
				t.Errorf("callback query %q: the fields belong in the query for GET only", c.query)
			}
			if st := s.Stats(); st.Pingbacks != 1 {
				t.Errorf("Pingbacks = %d, want 1", st.Pingbacks)
			}
		})
	}
}

// Every accepted captcha costs its price: the balance getbalance answers
// goes down with each, and a task submitted twice is counted twice under
// its key, which shows the page by host only.
func TestBalanceAndRepeatedTasks(t *testing.T) {
	t.Parallel()
	s := New(Config{Balance: 10, Price: map[string]float64{"turnstile": 2000}})
	submit := func(site string) {
		t.Helper()
		code, body := do(t, s, post("/in.php", vals("key", TestKey, "method", "turnstile", "sitekey", site,
			"pageurl", "https://shop.example/checkout/secret-path")))
		if code != http.StatusOK || !strings.HasPrefix(body, "OK|") {
			t.Fatalf("in.php: %d %q", code, body)
		}
	}
	submit("0x4AAA1")
	submit("0x4AAA1")
	submit("0x4AAA2")
	// Refused submissions cost nothing.
	if _, body := do(t, s, post("/in.php", vals("key", TestKey, "method", "turnstile", "pageurl", "https://shop.example/"))); strings.HasPrefix(body, "OK|") {
		t.Fatalf("a turnstile without sitekey was accepted: %q", body)
	}
	st := s.Stats()
	if st.Submitted != 3 || st.Spent != 6 || st.Balance != 4 {
		t.Errorf("submitted %d, spent %v, balance %v; want 3, 6, 4", st.Submitted, st.Spent, st.Balance)
	}
	if _, body := do(t, s, get("/res.php", vals("key", TestKey, "action", "getbalance"))); body != "4.00000" {
		t.Errorf("getbalance: %q, want 4.00000", body)
	}
	rep := st.Repeated()
	if len(rep) != 1 {
		t.Fatalf("repeated: %v, want one task", rep)
	}
	for k, n := range rep {
		if n != 2 || !strings.Contains(k, "0x4AAA1") || !strings.Contains(k, "shop.example#") || strings.Contains(k, "secret-path") {
			t.Errorf("repeated %q ×%d: want the 0x4AAA1 task twice, its page by host", k, n)
		}
	}
}
