package fakeapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

// call POSTs body (JSON) to the JSON dialect's path and decodes the reply.
func call(t *testing.T, s *Server, path, body string) map[string]any {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/"+path, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	code, out := do(t, s, r)
	if code != http.StatusOK {
		t.Fatalf("%s: status %d: %s", path, code, out)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("%s: %v: %s", path, err, out)
	}
	return m
}

func wantCode(t *testing.T, m map[string]any, code string) {
	t.Helper()
	if m["errorCode"] != code || m["errorId"] == 0.0 {
		t.Fatalf("want %s, got %v", code, m)
	}
}

// TestTasksDialect: createTask, getTaskResult (processing, then ready with
// the type's solution, cost and times), getBalance and a report, on the
// captchas and the bill in.php and res.php use: the classic res.php
// answers for a task the JSON dialect created.
func TestTasksDialect(t *testing.T) {
	t.Parallel()
	clock := time.Unix(1_700_000_000, 0)
	s := New(Config{SolveTime: map[string]Range{KindTurnstile: {Min: time.Second, Max: time.Second}},
		Price: map[string]float64{"turnstile": 2}})
	s.now = func() time.Time { return clock }
	key := `"clientKey":"` + TestKey + `"`

	created := call(t, s, "createTask", `{`+key+`,"task":{"type":"AntiTurnstileTaskProxyLess","websiteURL":"https://a.example/","websiteKey":"0x4AAA","metadata":{"action":"login"}}}`)
	id, ok := created["taskId"].(float64)
	if !ok || created["errorId"] != 0.0 {
		t.Fatalf("createTask: %v", created)
	}
	poll := `{` + key + `,"taskId":` + strconv.FormatInt(int64(id), 10) + `}`
	if m := call(t, s, "getTaskResult", poll); m["status"] != "processing" {
		t.Fatalf("before its solve time: %v", m)
	}
	clock = clock.Add(time.Second)
	m := call(t, s, "getTaskResult", poll)
	sol, _ := m["solution"].(map[string]any)
	if m["status"] != "ready" || sol["token"] == "" || sol["userAgent"] == "" || m["cost"] != 0.002 ||
		m["createTime"] != 1_700_000_000.0 || m["endTime"] != 1_700_000_001.0 {
		t.Fatalf("ready: %v", m)
	}
	_, classic := do(t, s, get("/res.php", url.Values{"key": {TestKey}, "action": {"get"}, "id": {strconv.FormatInt(int64(id), 10)}, "json": {"1"}}))
	if !strings.Contains(classic, sol["token"].(string)) {
		t.Fatalf("res.php on the same captcha: %s", classic)
	}
	if b := call(t, s, "getBalance", `{`+key+`}`); b["balance"] != 100-0.002 {
		t.Fatalf("getBalance: %v", b)
	}
	if r := call(t, s, "reportIncorrectRecaptcha", poll); r["status"] != "success" {
		t.Fatalf("report: %v", r)
	}
	wantCode(t, call(t, s, "reportCorrectRecaptcha", poll), "ERROR_REPORT_NOT_RECORDED") // a second report
	st := s.Stats()
	if st.Submitted != 1 || st.Solved != 1 || st.ReportsBad != 1 || st.InCalls != 1 || st.ResCalls < 4 {
		t.Fatalf("stats: %+v", st)
	}
}

// TestTasksDialectRefusals: each refusal in the JSON dialect's words, and
// none of them billed; faults and a full plan answer it as they answer
// in.php.
func TestTasksDialectRefusals(t *testing.T) {
	t.Parallel()
	s := New(Config{Threads: 1})
	key := `"clientKey":"` + TestKey + `"`
	task := `"task":{"type":"RecaptchaV2TaskProxyless","websiteURL":"https://a.example/","websiteKey":"6Le"}`
	wantCode(t, call(t, s, "createTask", `{"clientKey":"nope",`+task+`}`), "ERROR_KEY_DOES_NOT_EXIST")
	wantCode(t, call(t, s, "createTask", `{`+key+`}`), "ERROR_TASK_ABSENT")
	wantCode(t, call(t, s, "createTask", `{`+key+`,"task":{"type":"FunCaptchaTask"}}`), "ERROR_TASK_NOT_SUPPORTED")
	wantCode(t, call(t, s, "createTask", `{`+key+`,"task":{"type":"RecaptchaV2TaskProxyless","websiteURL":"https://a.example/"}}`), "ERROR_INVALID_TASK_DATA")
	wantCode(t, call(t, s, "createTask", `{`+key+`,"task":{"type":"ImageToTextTask","body":"bm90IGFuIGltYWdl"}}`), "ERROR_IMAGE_TYPE_NOT_SUPPORTED")
	wantCode(t, call(t, s, "getTaskResult", `{`+key+`,"taskId":12345}`), "ERROR_NO_SUCH_CAPCHA_ID")
	if m := call(t, s, "createTask", `{`+key+`,`+task+`}`); m["errorId"] != 0.0 {
		t.Fatalf("createTask: %v", m)
	}
	// The plan's one thread is busy: no free worker, not no money.
	wantCode(t, call(t, s, "createTask", `{`+key+`,`+task+`}`), "ERROR_NO_SLOT_AVAILABLE")
	s.SetFaults(Faults{Outage: true})
	if code, _ := do(t, s, httptest.NewRequest(http.MethodPost, "/createTask", strings.NewReader(`{`+key+`,`+task+`}`))); code != http.StatusInternalServerError {
		t.Fatalf("outage: status %d", code)
	}
	if st := s.Stats(); st.Submitted != 1 || st.Codes[CodeHTTP500] != 1 {
		t.Fatalf("refusals billed: %+v", s.Stats())
	}
}

// TestTasksCallbackURL: createTask's callbackUrl gets a POST of what
// getTaskResult answers once the task is ready, counted as a pingback.
func TestTasksCallbackURL(t *testing.T) {
	t.Parallel()
	got := make(chan map[string]any, 1)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m map[string]any
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" || json.NewDecoder(r.Body).Decode(&m) != nil {
			t.Errorf("callback: %s %s", r.Method, r.Header.Get("Content-Type"))
		}
		got <- m
	}))
	defer hook.Close()
	s := New(Config{SolveTime: map[string]Range{KindRecaptcha: {Min: time.Millisecond, Max: time.Millisecond}}})
	m := call(t, s, "createTask", `{"clientKey":"`+TestKey+`","callbackUrl":"`+hook.URL+`/done",
		"task":{"type":"NoCaptchaTaskProxyless","websiteURL":"https://a.example/","websiteKey":"6Le"}}`)
	if m["errorId"] != 0.0 {
		t.Fatalf("createTask: %v", m)
	}
	select {
	case m := <-got:
		sol, _ := m["solution"].(map[string]any)
		if m["status"] != "ready" || sol["gRecaptchaResponse"] == nil {
			t.Fatalf("callback body: %v", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no callback")
	}
	if st := s.Stats(); st.Pingbacks != 1 || st.Submitted != 1 {
		t.Fatalf("stats: %+v", st)
	}
}
