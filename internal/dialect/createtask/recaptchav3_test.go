package createtask_test

import (
	"encoding/json"
	"testing"

	"github.com/captchaq/captchaq/internal/dialect/createtask"
)

// CapSolver's reCAPTCHA v3 types (docs.capsolver.com/guide/captcha/
// ReCaptchaV3: ReCaptchaV3Task and ReCaptchaV3EnterpriseTask with the
// caller's proxy, ReCaptchaV3TaskProxyLess and
// ReCaptchaV3EnterpriseTaskProxyLess without) are captchaq's userrecaptcha
// version=v3, the enterprise ones with enterprise=1, the proxy ones with
// the proxy: each is served, none answered ERROR_TASK_NOT_SUPPORTED.
func TestCapSolverRecaptchaV3Types(t *testing.T) {
	t.Parallel()
	proxy := `,"proxyType":"http","proxyAddress":"192.0.2.10","proxyPort":8080`
	for _, c := range []struct {
		typ, extra          string
		enterprise, proxied bool
	}{
		{"ReCaptchaV3TaskProxyLess", "", false, false},
		{"ReCaptchaV3Task", proxy, false, true},
		{"ReCaptchaV3EnterpriseTaskProxyLess", "", true, false},
		{"ReCaptchaV3EnterpriseTask", proxy, true, true},
		// CapMonster's (capmonstercloud-client-js src/TaskType.ts), no proxy.
		{"RecaptchaV3EnterpriseTask", "", true, false},
	} {
		raw := json.RawMessage(`{"type":"` + c.typ + `","websiteURL":"https://shop.example/","websiteKey":"6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-","pageAction":"login"` + c.extra + `}`)
		task, tt, err := createtask.ParseTask(raw)
		if err != nil {
			t.Errorf("%s: %v", c.typ, err)
			continue
		}
		method, p, err := task.Request(tt)
		if err != nil {
			t.Errorf("%s: %v", c.typ, err)
			continue
		}
		if method != "userrecaptcha" || p["version"] != "v3" || p["action"] != "login" {
			t.Errorf("%s: %s %v, want userrecaptcha version v3 action login", c.typ, method, p)
		}
		if (p["enterprise"] == "1") != c.enterprise {
			t.Errorf("%s: enterprise %q", c.typ, p["enterprise"])
		}
		if (p["proxy"] != "") != c.proxied {
			t.Errorf("%s: proxy %q", c.typ, p["proxy"])
		}
	}
}
