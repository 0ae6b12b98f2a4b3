package classic

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
)

// Reply shapes, as the services send them and their clients read them:
//   - json=1: {"status":1,"request":<answer>} (an object for GeeTest, a
//     string otherwise), {"status":0,"request":"<CODE>","error_text":"…"}
//     (docs.captchaai.com/pages/err_handling: "Use json=1 to receive JSON
//     responses ({"status":0,"request":"ERROR_CODE"})"; CaptchaAI-Examples,
//     articles/*/python/solve.py read status and request);
//   - plain text: OK|<answer> or the bare code (2captcha-python,
//     twocaptcha/solver.py: send and get_result cut "OK|", take
//     CAPCHA_NOT_READY for not yet, anything else for an error);
//   - Turnstile's user agent as useragent, cloudflare_challenge's as
//     user_agent, beside request (CaptchaAI-Examples,
//     articles/how-to-solve-cloudflare-challenge-using-api/python/solve.py);
//     captcha.UserAgentField names a method's.

// OKPrefix begins a plain-text success: OK|<answer>.
const OKPrefix = "OK|"

// JSONReply is a json=1 reply, as written and as read. Status is 1 for a
// success and 0 for a code; a reader takes 1 and 0 as numbers, strings or
// booleans, since the services are not consistent.
type JSONReply struct {
	Status    json.RawMessage `json:"status"`
	Request   json.RawMessage `json:"request"`
	ErrorText string          `json:"error_text,omitempty"`
	// UserAgent is Turnstile's user agent (useragent), UserAgentCF
	// cloudflare_challenge's (user_agent).
	UserAgent   string `json:"useragent,omitempty"`
	UserAgentCF string `json:"user_agent,omitempty"`
}

// WriteCode answers code (an error code, or CAPCHA_NOT_READY): the bare
// code in plain text; under json=1 status 0 with text as error_text
// (omitted when empty).
func WriteCode(w http.ResponseWriter, jsonOut bool, code, text string) {
	if !jsonOut {
		writePlain(w, code)
		return
	}
	req, _ := json.Marshal(code)
	writeJSON(w, JSONReply{Status: json.RawMessage("0"), Request: req, ErrorText: text})
}

// WriteOK answers a success: value is the answer as JSON (a string, a
// number or an object); OK|<its text> in plain text (PlainText). Under
// json=1 ua, when set, goes in uaField ("user_agent" or "useragent").
func WriteOK(w http.ResponseWriter, jsonOut bool, value json.RawMessage, uaField, ua string) {
	if !jsonOut {
		writePlain(w, OKPrefix+PlainText(value))
		return
	}
	r := JSONReply{Status: json.RawMessage("1"), Request: value}
	if uaField == "user_agent" {
		r.UserAgentCF = ua
	} else {
		r.UserAgent = ua
	}
	writeJSON(w, r)
}

// WriteBare answers text as the services send getbalance and report
// answers: bare in plain text, the request string of status 1 under json=1.
func WriteBare(w http.ResponseWriter, jsonOut bool, text string) {
	if !jsonOut {
		writePlain(w, text)
		return
	}
	req, _ := json.Marshal(text)
	writeJSON(w, JSONReply{Status: json.RawMessage("1"), Request: req})
}

// PlainText is an answer's text form: a string's contents, or the JSON of
// a number or an object.
func PlainText(value json.RawMessage) string {
	var s string
	if json.Unmarshal(value, &s) == nil {
		return s
	}
	return string(value)
}

func writePlain(w http.ResponseWriter, s string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, s)
}

func writeJSON(w http.ResponseWriter, r JSONReply) {
	b, _ := json.Marshal(r)
	w.Header().Set("Content-Type", "application/json")
	w.Write(append(b, '\n'))
}

// IsCode reports whether s looks like a code of the dialect:
// CAPCHA_NOT_READY, ERROR_…, MAX_USER_TURN, IP_BANNED, OK_REPORT_RECORDED,
// or "ERROR: 1001": upper-case letters, digits and underscores, or "ERROR: "
// and digits, at most 64 bytes.
func IsCode(s string) bool {
	if len(s) == 0 || len(s) > 64 || s[0] < 'A' || s[0] > 'Z' {
		return false
	}
	if rest, ok := strings.CutPrefix(s, "ERROR: "); ok {
		if len(rest) == 0 {
			return false
		}
		for _, c := range []byte(rest) {
			if c < '0' || c > '9' {
				return false
			}
		}
		return true
	}
	for _, c := range []byte(s) {
		if (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}
