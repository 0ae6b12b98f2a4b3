package gateway

import (
	"encoding/json"
	"net/http"

	"github.com/captchaq/captchaq/internal/dialect/classic"
)

// Replies take the dialect's shapes (package classic: OK|…, the bare code,
// json=1's {"status":…,"request":…}); header_acao=1 asks for
// Access-Control-Allow-Origin: * on the reply (@2captcha/captcha-solver
// sends it on every call: src/structs/2captcha.ts, defaultPayload).

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
func (r replier) code(code, text string) { classic.WriteCode(r.w, r.json, code, text) }

// ok answers a success: value is the answer as JSON (a string or an
// object); ua and uaField add the user agent.
func (r replier) ok(value json.RawMessage, ua, uaField string) {
	classic.WriteOK(r.w, r.json, value, uaField, ua)
}

// bare answers text as the service sends getbalance and report answers:
// bare in plain text, the request string of status 1 under json=1.
func (r replier) bare(text string) { classic.WriteBare(r.w, r.json, text) }
