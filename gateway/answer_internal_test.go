package gateway

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/captchaq/captchaq/stream"
)

// TestAnswerOfDeadTasks: what res.php answers for a task that died, by the
// code it died on. The service's word on the captcha is passed on; an
// invalid task is the caller's bad parameters, which it must fix rather
// than submit again; captchaq's own codes are an unsolvable captcha.
func TestAnswerOfDeadTasks(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	for died, want := range map[string]string{
		"INVALID_TASK":             "ERROR_BAD_PARAMETERS",
		"DEADLINE_PASSED":          "ERROR_CAPTCHA_UNSOLVABLE",
		"WORKER_LOST":              "ERROR_CAPTCHA_UNSOLVABLE",
		"ERROR_PAGEURL":            "ERROR_PAGEURL",
		"ERROR_CAPTCHA_UNSOLVABLE": "ERROR_CAPTCHA_UNSOLVABLE",
		"ERROR_ZERO_BALANCE":       "ERROR_CAPTCHA_UNSOLVABLE",
	} {
		a := (&Gateway{}).answerOf(stream.Outcome{Status: stream.StatusDead, Error: died}, "turnstile", now)
		if a.code != want {
			t.Errorf("a task dead on %s answers %s, want %s", died, a.code, want)
		}
	}
	solved := stream.Outcome{Method: "cloudflare_challenge", Solution: json.RawMessage(`"cf"`), UserAgent: "Mozilla/5.0",
		ExpiresAt: now.Add(time.Minute)}
	if a := (&Gateway{}).answerOf(solved, "", now); a.code != "" || a.uaField != "user_agent" || a.ua != "Mozilla/5.0" {
		t.Errorf("a solved cloudflare_challenge answers code %q, %s %q; want its user agent as user_agent", a.code, a.uaField, a.ua)
	}
}

// A task dead on a code without detail (DEADLINE_PASSED of a task no one
// solved in time) names the code alone, not "DEADLINE_PASSED:".
func TestAnswerOfDeadTaskWithoutDetail(t *testing.T) {
	t.Parallel()
	a := (&Gateway{}).answerOf(stream.Outcome{Status: stream.StatusDead, Error: "DEADLINE_PASSED"}, "userrecaptcha", time.Unix(1_700_000_000, 0))
	if a.text != "DEADLINE_PASSED" {
		t.Errorf("error text %q, want DEADLINE_PASSED", a.text)
	}
	a = (&Gateway{}).answerOf(stream.Outcome{Status: stream.StatusDead, Error: "ERROR_PAGEURL", Detail: "bad page"}, "userrecaptcha", time.Unix(1_700_000_000, 0))
	if a.text != "ERROR_PAGEURL: bad page" {
		t.Errorf("error text %q, want ERROR_PAGEURL: bad page", a.text)
	}
}
