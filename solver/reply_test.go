package solver

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/captchaq/captchaq/retry"
)

func TestParseReply(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		status int
		body   string
		text   string // want a reply with this text…
		value  string // …and this JSON value
		ua     string
		code   string // or an error with this code…
		class  retry.Class
		msg    string // …whose message contains this
	}{
		{name: "json id string", status: 200, body: `{"status":1,"request":"73542817351"}`, text: "73542817351", value: `"73542817351"`},
		{name: "json id number", status: 200, body: `{"status":1,"request":73542817351}`, text: "73542817351", value: `"73542817351"`},
		{name: "json status string", status: 200, body: `{"status":"1","request":"7"}`, text: "7", value: `"7"`},
		{name: "json big id number keeps digits", status: 200, body: `{"status":1,"request":123456789012345678901}`, text: "123456789012345678901", value: `"123456789012345678901"`},
		{name: "json token with useragent", status: 200, body: `{"status":1,"request":"0.abc","useragent":"Mozilla/5.0 X"}`, text: "0.abc", value: `"0.abc"`, ua: "Mozilla/5.0 X"},
		{name: "json object", status: 200, body: `{"status":1,"request":{"geetest_challenge":"c", "geetest_validate":"v","geetest_seccode":"s|jordan"}}`,
			text: `{"geetest_challenge":"c","geetest_validate":"v","geetest_seccode":"s|jordan"}`, value: `{"geetest_challenge":"c","geetest_validate":"v","geetest_seccode":"s|jordan"}`},
		{name: "json error", status: 200, body: `{"status":0,"request":"ERROR_PAGEURL","error_text":"bad"}`, code: "ERROR_PAGEURL", class: retry.Permanent},
		{name: "json not ready", status: 200, body: `{"status":0,"request":"CAPCHA_NOT_READY"}`, code: "CAPCHA_NOT_READY", class: retry.Poll},
		{name: "json 1001", status: 200, body: `{"status":0,"request":"ERROR: 1001"}`, code: "ERROR: 1001", class: retry.Capacity},
		{name: "plain ok", status: 200, body: "OK|73542817351", text: "73542817351", value: `"73542817351"`},
		{name: "plain ok with newline", status: 200, body: "OK|click:1/3/5\r\n", text: "click:1/3/5", value: `"click:1/3/5"`},
		{name: "plain error", status: 200, body: "ERROR_WRONG_USER_KEY", code: "ERROR_WRONG_USER_KEY", class: retry.Fatal},
		{name: "plain not ready", status: 200, body: "CAPCHA_NOT_READY", code: "CAPCHA_NOT_READY", class: retry.Poll},
		{name: "plain report", status: 200, body: "OK_REPORT_RECORDED", code: "OK_REPORT_RECORDED", class: retry.Transient},
		{name: "html 200", status: 200, body: "<html><head><title>Just a moment...</title></head></html>", code: "BAD_REPLY", class: retry.Transient, msg: `HTML page "Just a moment..."`},
		{name: "html 502", status: 502, body: "<html><head><title>502 Bad Gateway</title></head></html>", code: "HTTP_502", class: retry.Transient, msg: "502 Bad Gateway"},
		{name: "503 carrying a code", status: 503, body: "ERROR_SERVER_ERROR", code: "ERROR_SERVER_ERROR", class: retry.Transient},
		{name: "403 carrying a code", status: 403, body: "IP_BANNED", code: "IP_BANNED", class: retry.Fatal},
		{name: "empty", status: 200, body: "", code: "BAD_REPLY", class: retry.Transient, msg: "empty body"},
		{name: "garbage", status: 200, body: "{\"status\":1,\"requ\x00\xff", code: "BAD_REPLY", class: retry.Transient, msg: "invalid JSON"},
		{name: "lowercase text", status: 200, body: "hello", code: "BAD_REPLY", class: retry.Transient},
		{name: "json status 0 with object", status: 200, body: `{"status":0,"request":{}}`, code: "BAD_REPLY", class: retry.Transient},
		{name: "json status 2", status: 200, body: `{"status":2,"request":"x"}`, code: "BAD_REPLY", class: retry.Transient, msg: "status 2"},
		{name: "json no request", status: 200, body: `{"status":1}`, code: "BAD_REPLY", class: retry.Transient, msg: "no request"},
		{name: "json array request", status: 200, body: `{"status":1,"request":[1]}`, code: "BAD_REPLY", class: retry.Transient},
		{name: "json trailing", status: 200, body: `{"status":1,"request":"1"} {}`, code: "BAD_REPLY", class: retry.Transient, msg: "trailing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, err := parseReply("res.php", tt.status, []byte(tt.body), "")
			if tt.code != "" {
				var e *Error
				if !errors.As(err, &e) {
					t.Fatalf("parseReply = %+v, %v; want error %s", r, err, tt.code)
				}
				if e.Code != tt.code || e.Class != tt.class || e.Op != "res.php" {
					t.Errorf("error %v: code %s class %s op %s, want %s %s res.php", e, e.Code, e.Class, e.Op, tt.code, tt.class)
				}
				if !strings.Contains(err.Error(), tt.msg) {
					t.Errorf("error %q does not say %q", err, tt.msg)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseReply: %v", err)
			}
			if r.text != tt.text || string(r.value) != tt.value || r.userAgent != tt.ua {
				t.Errorf("reply = text %q value %s ua %q, want %q %s %q", r.text, r.value, r.userAgent, tt.text, tt.value, tt.ua)
			}
		})
	}
}

func TestAnswerOfGeeTestString(t *testing.T) {
	t.Parallel()
	obj := `{"geetest_challenge":"c","geetest_validate":"v","geetest_seccode":"s|jordan"}`
	enc, _ := json.Marshal(obj)
	for _, body := range []string{
		`{"status":1,"request":` + obj + `}`,
		`{"status":1,"request":` + string(enc) + `}`,
	} {
		r, err := parseReply("res.php", 200, []byte(body), "")
		if err != nil {
			t.Fatal(err)
		}
		a := answerOf(r, "1")
		if string(a.Solution) != obj {
			t.Errorf("answer of %s = %s, want the object %s", body, a.Solution, obj)
		}
	}
}

// FuzzParseReply checks that any body gives either a reply whose value is
// valid JSON or a classified *Error that does not quote the key, never a
// panic, and that a status other than 200 is never a reply. Corpus: testdata/fuzz/FuzzParseReply.
func FuzzParseReply(f *testing.F) {
	for _, s := range []string{
		`{"status":1,"request":"73542817351"}`,
		`{"status":1,"request":73542817351}`,
		`{"status":0,"request":"ERROR_ZERO_BALANCE"}`,
		`{"status":1,"request":{"geetest_challenge":"c","geetest_validate":"v","geetest_seccode":"s"}}`,
		"OK|0.abc", "CAPCHA_NOT_READY", "ERROR: 1001", "<html></html>", "",
	} {
		f.Add(200, []byte(s))
	}
	f.Add(502, []byte("<html><title>502</title></html>"))
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		// A lower-case key, so that a body of just the key is no API code
		// (the Client scrubs codes itself).
		const key = "secretkey0123456789/+&<"
		r, err := parseReply("in.php", status, body, key)
		if err != nil {
			if strings.Contains(err.Error(), key) {
				t.Fatalf("error %q quotes the key", err)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v is not a *Error", err)
			}
			if e.Code == "" || e.Class == retry.Unknown || e.Op != "in.php" {
				t.Fatalf("error %+v lacks code, class or op", e)
			}
			if e.Class == retry.Poll && e.Code != CodeNotReady && e.Code != "CAPTCHA_NOT_READY" {
				t.Fatalf("code %s classified as poll", e.Code)
			}
			_ = err.Error()
			return
		}
		if status != 200 {
			t.Fatalf("status %d gave a reply", status)
		}
		if !json.Valid(r.value) {
			t.Fatalf("reply value %q is not JSON", r.value)
		}
		_ = answerOf(r, "1")
	})
}
