package createtask_test

import (
	"encoding/json"
	"testing"

	"github.com/captchaq/captchaq/internal/dialect/createtask"
)

// CapMonster's TurnstileTask on a Cloudflare challenge page
// (capmonstercloud-client-js 2.6.1, dist/Requests/TurnstileRequest:
// cloudflareTaskType 'token' requires userAgent, pageAction, data and
// pageData) keeps its page's action, data and page data: dropped, the
// answer is a plain widget's token the page refuses, and paid. Its
// cf_clearance and wait_room modes ask for a cookie, not a token: refused
// as a type not served rather than answered with a token.
func TestCapMonsterTurnstileChallengeFields(t *testing.T) {
	t.Parallel()
	method, p := request(t, `{"type":"TurnstileTask","websiteURL":"https://shop.example/","websiteKey":"0x4AAAAAAABkMYinukE8nzY",
		"cloudflareTaskType":"token","userAgent":"Mozilla/5.0","pageAction":"managed","data":"80001aa1affffc21","pageData":"3gAFo2l2MbhGSXdCamp1"}`)
	if method != "turnstile" || p["action"] != "managed" || p["data"] != "80001aa1affffc21" || p["pagedata"] != "3gAFo2l2MbhGSXdCamp1" {
		t.Errorf("%s %v: want turnstile with action, data and pagedata", method, p)
	}
	for _, mode := range []string{"cf_clearance", "wait_room"} {
		raw := json.RawMessage(`{"type":"TurnstileTask","websiteURL":"https://shop.example/","websiteKey":"0x4AAAAAAABkMYinukE8nzY","cloudflareTaskType":"` + mode + `"}`)
		task, tt, err := createtask.ParseTask(raw)
		if err == nil {
			_, _, err = task.Request(tt)
		}
		if err == nil || err.Code != createtask.CodeTaskNotSupported {
			t.Errorf("cloudflareTaskType %s: %v, want %s", mode, err, createtask.CodeTaskNotSupported)
		}
	}
}

// CapMonster's HCaptchaTask sends hCaptcha's rqdata as data
// (capmonstercloud-client-js 2.6.1, dist/Requests/HCaptchaRequest: "In
// most cases you see it as <![CDATA[rqdata]]>"), where Anti-Captcha sends
// enterprisePayload.rqdata: either is the task's data, not dropped.
func TestCapMonsterHCaptchaData(t *testing.T) {
	t.Parallel()
	method, p := request(t, `{"type":"HCaptchaTaskProxyless","websiteURL":"https://shop.example/","websiteKey":"a5f74b19-9e45-40e0-b45d-47ff91b7a6c2",
		"data":"rqdata-of-the-page","userAgent":"Mozilla/5.0"}`)
	if method != "hcaptcha" || p["data"] != "rqdata-of-the-page" {
		t.Errorf("%s %v: want hcaptcha with data", method, p)
	}
}

// request is the captchaq request of a createTask task object, which must
// be one the dialect takes.
func request(t *testing.T, task string) (string, map[string]string) {
	t.Helper()
	parsed, tt, err := createtask.ParseTask(json.RawMessage(task))
	if err != nil {
		t.Fatal(err)
	}
	method, p, err := parsed.Request(tt)
	if err != nil {
		t.Fatal(err)
	}
	return method, p
}
