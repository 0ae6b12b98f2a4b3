package classic_test

import (
	"encoding/json"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/captchaq/captchaq/internal/dialect/classic"
)

// fixtures are the services' replies as the project records them, each
// with its source (solver/testdata/service/replies.json).
type fixtures struct {
	Codes []struct {
		Code, Plain, JSON string
	}
	Report struct{ Plain, JSON string }
	Submit []struct {
		Name, Plain, JSON, ID string
	}
}

func load(t *testing.T) fixtures {
	t.Helper()
	b, err := os.ReadFile("../../../solver/testdata/service/replies.json")
	if err != nil {
		t.Fatal(err)
	}
	var f fixtures
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestRepliesAsTheServicesSendThem writes every fixture's reply, plain and
// json=1, and compares it with what the service sends.
func TestRepliesAsTheServicesSendThem(t *testing.T) {
	t.Parallel()
	f := load(t)
	if len(f.Codes) < 30 {
		t.Fatalf("%d code fixtures, want the whole table", len(f.Codes))
	}
	for _, c := range f.Codes {
		if !classic.IsCode(c.Code) {
			t.Errorf("IsCode(%q) = false", c.Code)
		}
		var want classic.JSONReply
		if err := json.Unmarshal([]byte(c.JSON), &want); err != nil {
			t.Fatalf("%s: %v", c.Code, err)
		}
		plain, js := httptest.NewRecorder(), httptest.NewRecorder()
		classic.WriteCode(plain, false, c.Code, want.ErrorText)
		classic.WriteCode(js, true, c.Code, want.ErrorText)
		if plain.Body.String() != c.Plain {
			t.Errorf("%s plain: %q, want %q", c.Code, plain.Body, c.Plain)
		}
		sameJSON(t, c.Code, js.Body.Bytes(), c.JSON)
	}
	for _, s := range f.Submit {
		var r classic.JSONReply
		if err := json.Unmarshal([]byte(s.JSON), &r); err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		plain := httptest.NewRecorder()
		classic.WriteOK(plain, false, r.Request, "", "")
		if s.Plain != "" && plain.Body.String() != s.Plain {
			t.Errorf("%s plain: %q, want %q", s.Name, plain.Body, s.Plain)
		}
	}
	plain, js := httptest.NewRecorder(), httptest.NewRecorder()
	classic.WriteBare(plain, false, classic.CodeReportRecorded)
	classic.WriteBare(js, true, classic.CodeReportRecorded)
	if plain.Body.String() != f.Report.Plain {
		t.Errorf("report plain: %q, want %q", plain.Body, f.Report.Plain)
	}
	sameJSON(t, "report", js.Body.Bytes(), f.Report.JSON)
}

func sameJSON(t *testing.T, what string, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: %v in %s", what, err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("%s fixture: %v", what, err)
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	if string(gb) != string(wb) {
		t.Errorf("%s json=1: %s, want %s", what, gb, wb)
	}
}

// TestUserAgentField checks the user agent goes in the field the method's
// answers name it in: useragent (Turnstile), user_agent
// (cloudflare_challenge).
func TestUserAgentField(t *testing.T) {
	t.Parallel()
	for field, want := range map[string]string{
		"useragent":  `{"status":1,"request":"tok","useragent":"UA"}`,
		"user_agent": `{"status":1,"request":"tok","user_agent":"UA"}`,
	} {
		w := httptest.NewRecorder()
		classic.WriteOK(w, true, json.RawMessage(`"tok"`), field, "UA")
		sameJSON(t, field, w.Body.Bytes(), want)
	}
}

// TestSubmitRule checks the in.php rule: SubmitLimit calls in any
// SubmitWindow, the next one refused and every call for BanTime after it.
func TestSubmitRule(t *testing.T) {
	t.Parallel()
	if classic.SubmitLimit != 60 || classic.SubmitWindow != 3*time.Second || classic.BanTime != 10*time.Second {
		t.Fatalf("rule %d per %s, ban %s; the services publish 60 per 3 s, 10 s", classic.SubmitLimit, classic.SubmitWindow, classic.BanTime)
	}
	if got := (classic.Rule{}).Or(classic.SubmitRule); got != classic.SubmitRule {
		t.Errorf("the zero rule or the in.php rule: %+v", got)
	}
	if got := (classic.Rule{Limit: -1}).Or(classic.SubmitRule); got.Limit != -1 || got.Window != classic.SubmitWindow {
		t.Errorf("no limit or the in.php rule: %+v, want the limit off", got)
	}
	w := classic.NewSubmitWindow()
	t0 := time.Unix(1_700_000_000, 0)
	for i := range classic.SubmitLimit {
		if !w.Allow(t0.Add(time.Duration(i) * time.Millisecond)) {
			t.Fatalf("call %d refused within the limit", i+1)
		}
	}
	over := t0.Add(time.Second)
	if w.Allow(over) {
		t.Fatal("call 61 within 3 s allowed")
	}
	if !w.Banned(over.Add(classic.BanTime-time.Millisecond)) || w.Allow(over.Add(classic.BanTime-time.Millisecond)) {
		t.Error("a call during the ban allowed")
	}
	if !w.Allow(over.Add(classic.BanTime)) {
		t.Error("the first call after the ban refused")
	}
	// A steady SubmitLimit per SubmitWindow never bans.
	w = classic.NewSubmitWindow()
	step := classic.SubmitWindow / classic.SubmitLimit
	for i := range 5 * classic.SubmitLimit {
		if !w.Allow(t0.Add(time.Duration(i) * step)) {
			t.Fatalf("steady call %d refused", i+1)
		}
	}
}

// TestWindowBanStartsAfresh checks that the ban, not the calls before it,
// is what a caller over the limit serves: once a ban shorter than the span
// ends (a gateway's Limits may set one), the full limit is allowed again
// rather than the old calls banning the caller anew.
func TestWindowBanStartsAfresh(t *testing.T) {
	t.Parallel()
	w := classic.NewWindow(3, 10*time.Second, time.Second)
	t0 := time.Unix(1_700_000_000, 0)
	for i := range 3 {
		if !w.Allow(t0.Add(time.Duration(i) * time.Millisecond)) {
			t.Fatalf("call %d refused within the limit", i+1)
		}
	}
	if w.Allow(t0.Add(10 * time.Millisecond)) {
		t.Fatal("call 4 within the span allowed")
	}
	after := t0.Add(2 * time.Second) // the ban is over, the span is not
	for i := range 3 {
		if !w.Allow(after.Add(time.Duration(i) * time.Millisecond)) {
			t.Fatalf("call %d after the ban refused: the calls before the ban still count", i+1)
		}
	}
}

// TestIsCodeRefusesWhatIsNoCode: a body that only looks like a code (an
// HTML page, a lower-case word, "ERROR: " without its number, one too long)
// is no code of the dialect, so the client takes it for a bad reply.
func TestIsCodeRefusesWhatIsNoCode(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "ERROR: ", "ERROR: 10a", "error_wrong_user_key", "<html>", "OK|123", "Error_X",
		"ERROR_" + strings.Repeat("X", 59)} {
		if classic.IsCode(s) {
			t.Errorf("IsCode(%q) = true", s)
		}
	}
	for _, s := range []string{"ERROR: 1001", "MAX_USER_TURN", "ERROR_" + strings.Repeat("X", 58)} {
		if !classic.IsCode(s) {
			t.Errorf("IsCode(%q) = false", s)
		}
	}
}

// TestWindowBanOutlivesItsSpan: a window whose ban holds is not idle even
// when its span has no call left, so a sweep that forgets idle windows (the
// gateway's bad-key bans) never lifts a ban early.
func TestWindowBanOutlivesItsSpan(t *testing.T) {
	t.Parallel()
	w := classic.NewWindow(1, time.Second, time.Minute)
	t0 := time.Unix(1_700_000_000, 0)
	w.Allow(t0)
	if w.Allow(t0.Add(time.Millisecond)) {
		t.Fatal("call 2 within the span allowed")
	}
	if at := t0.Add(30 * time.Second); w.Idle(at) || !w.Banned(at) {
		t.Errorf("30 s into a 1-minute ban: idle %v, banned %v; want banned and not idle", w.Idle(at), w.Banned(at))
	}
	if at := t0.Add(2 * time.Minute); !w.Idle(at) {
		t.Error("after the ban and its span: not idle")
	}
}

// TestWindowNotIdleWhileItCountsACall: a window with a call within its
// span is not idle, so a sweep that forgets idle windows never hands a
// caller a fresh limit within the span; once the span has passed, it is.
func TestWindowNotIdleWhileItCountsACall(t *testing.T) {
	t.Parallel()
	w := classic.NewWindow(2, time.Second, time.Minute)
	t0 := time.Unix(1_700_000_000, 0)
	if !w.Idle(t0) {
		t.Error("a window without calls: not idle")
	}
	w.Allow(t0)
	if w.Idle(t0.Add(999 * time.Millisecond)) {
		t.Error("idle with a call within its span")
	}
	if !w.Idle(t0.Add(time.Second)) {
		t.Error("not idle once its only call is a span old")
	}
}

// TestWriteThreadsInfo checks threadsinfo's reply: a JSON object (and
// said to be one) holding the three fields, and under json=1 status 1 and
// the same object as request beside them.
func TestWriteThreadsInfo(t *testing.T) {
	t.Parallel()
	ti := classic.ThreadsInfo{Threads: 5, WorkingThreads: 2, FreeThreads: 3}
	for _, jsonOut := range []bool{false, true} {
		rec := httptest.NewRecorder()
		classic.WriteThreadsInfo(rec, jsonOut, ti)
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("json=%v: Content-Type %q", jsonOut, ct)
		}
		var got struct {
			classic.ThreadsInfo
			Status  *int                 `json:"status"`
			Request *classic.ThreadsInfo `json:"request"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || got.ThreadsInfo != ti {
			t.Errorf("json=%v: %s (%v), want the three fields %+v", jsonOut, rec.Body, err, ti)
		}
		if jsonOut && (got.Status == nil || *got.Status != 1 || got.Request == nil || *got.Request != ti) {
			t.Errorf("json=1: %s, want status 1 and the fields as request", rec.Body)
		}
		if !jsonOut && (got.Status != nil || got.Request != nil) {
			t.Errorf("json=0: %s, want the fields alone", rec.Body)
		}
	}
}

// TestCaptchaUnknown checks both services' words for an unknown captcha id.
func TestCaptchaUnknown(t *testing.T) {
	t.Parallel()
	for code, want := range map[string]bool{
		classic.CodeWrongCaptchaID: true, classic.CodeNoSuchCaptchaID: true,
		classic.CodeWrongIDFormat: false, classic.CodeCaptchaUnsolvable: false,
	} {
		if got := classic.CaptchaUnknown(code); got != want {
			t.Errorf("CaptchaUnknown(%s) = %v", code, got)
		}
	}
}

// TestStates checks a batch poll's answer: the states in the order asked,
// joined by "|", bare or as the request string of status 1.
func TestStates(t *testing.T) {
	t.Parallel()
	states := []string{"tok1", classic.CodeNotReady, classic.CodeWrongCaptchaID}
	plain, js := httptest.NewRecorder(), httptest.NewRecorder()
	classic.WriteStates(plain, false, states)
	classic.WriteStates(js, true, states)
	if want := "tok1|CAPCHA_NOT_READY|ERROR_WRONG_CAPTCHA_ID"; plain.Body.String() != want {
		t.Errorf("plain %q, want %q", plain.Body, want)
	}
	sameJSON(t, "states", js.Body.Bytes(), `{"status":1,"request":"tok1|CAPCHA_NOT_READY|ERROR_WRONG_CAPTCHA_ID"}`)
}
