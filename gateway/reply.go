package gateway

import (
	"encoding/json"
	"io"
	"net/http"
)

// Reply shapes, as the service sends them and its clients read them:
//   - json=1: {"status":1,"request":<answer>} (an object for GeeTest, a
//     string otherwise), {"status":0,"request":"<CODE>","error_text":"…"}
//     (CaptchaAI-Examples, articles/how-to-solve-*-using-api/python/solve.py
//     read status and request; the project's fixtures of every code are
//     solver/testdata/service/replies.json);
//   - plain text: OK|<answer> or the bare code (2captcha/2captcha-go,
//     api2captcha.go: Send and GetResult cut "OK|", treat "ERROR_…" as
//     an error and CAPCHA_NOT_READY as not yet);
//   - Turnstile's user agent as useragent, cloudflare_challenge's as
//     user_agent, beside request (CaptchaAI-Examples,
//     articles/how-to-solve-cloudflare-challenge-using-api/python/solve.py);
//   - header_acao=1 asks for Access-Control-Allow-Origin: * on the reply
//     (@2captcha/captcha-solver sends it on every call:
//     src/structs/2captcha.ts, defaultPayload).

// replier writes the replies of one request in its dialect.
type replier struct {
	w    http.ResponseWriter
	json bool
}

func newReplier(w http.ResponseWriter, f form) replier {
	if f["header_acao"] == "1" {
		w.Header().Set("Access-Control-Allow-Origin", "*")
	}
	return replier{w: w, json: f["json"] == "1"}
}

// code answers an error code, or CAPCHA_NOT_READY; text says more under
// json=1 (error_text).
func (r replier) code(code, text string) {
	if !r.json {
		r.plain(code)
		return
	}
	out := struct {
		Status    int    `json:"status"`
		Request   string `json:"request"`
		ErrorText string `json:"error_text,omitempty"`
	}{0, code, text}
	r.writeJSON(out)
}

// ok answers a success: value is the answer as JSON (a string or an
// object), plain its text form; ua and uaField add the user agent.
func (r replier) ok(value json.RawMessage, plain, ua, uaField string) {
	if !r.json {
		r.plain("OK|" + plain)
		return
	}
	out := map[string]any{"status": 1, "request": value}
	if ua != "" {
		out[uaField] = ua
	}
	r.writeJSON(out)
}

// bare answers text as the service sends getbalance and report answers:
// bare in plain text, the request string of status 1 under json=1.
func (r replier) bare(text string) {
	if !r.json {
		r.plain(text)
		return
	}
	v, _ := json.Marshal(text)
	r.writeJSON(map[string]any{"status": 1, "request": json.RawMessage(v)})
}

func (r replier) plain(s string) {
	r.w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(r.w, s)
}

func (r replier) writeJSON(v any) {
	b, _ := json.Marshal(v)
	r.w.Header().Set("Content-Type", "application/json")
	r.w.Write(append(b, '\n'))
}
