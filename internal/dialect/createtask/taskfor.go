package createtask

import (
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/captchaq/captchaq/captcha"
)

// TaskFor is the inverse of Task.Request, for a client of the dialect: the
// task object asking a JSON provider for captchaq's request of method with
// params (in.php's names), under Anti-Captcha's type names (the proxy type
// when params name a proxy), with the kind its solution comes back in
// (Answer). A request the dialect has no type for (cloudflare_challenge,
// bls, a grid image) is an error naming it.
func TaskFor(method string, params map[string]string) (Task, Kind, error) {
	t := Task{WebsiteURL: params["pageurl"], UserAgent: params["userAgent"], Cookies: params["cookies"]}
	proxied := params["proxy"] != ""
	if proxied {
		if err := t.setProxy(params["proxy"], params["proxytype"]); err != nil {
			return Task{}, 0, err
		}
	}
	name := func(proxyless, proxy string) string {
		if proxied {
			return proxy
		}
		return proxyless
	}
	var kind Kind
	switch method {
	case captcha.MethodReCaptcha:
		t.WebsiteKey, t.APIDomain = params["googlekey"], params["domain"]
		t.IsInvisible, t.IsEnterprise = params["invisible"] == "1", params["enterprise"] == "1"
		switch {
		case params["version"] == "v3":
			if proxied {
				return Task{}, 0, fmt.Errorf("method %s version v3 with a proxy: the JSON dialect's v3 type takes none", method)
			}
			kind, t.Type = KindRecaptchaV3, "RecaptchaV3TaskProxyless"
			t.PageAction = params["action"]
			if s := params["min_score"]; s != "" {
				f, err := strconv.ParseFloat(s, 64)
				if err != nil {
					return Task{}, 0, fmt.Errorf("params.min_score %q: not a number", s)
				}
				t.MinScore = Number(f)
			}
		case bool(t.IsEnterprise):
			kind, t.Type, t.IsEnterprise = KindRecaptchaV2Enterprise, name("RecaptchaV2EnterpriseTaskProxyless", "RecaptchaV2EnterpriseTask"), false
			if s := params["data-s"]; s != "" {
				t.EnterprisePayload, _ = json.Marshal(map[string]string{"s": s})
			}
		default:
			kind, t.Type = KindRecaptchaV2, name("RecaptchaV2TaskProxyless", "RecaptchaV2Task")
			t.RecaptchaDataSValue = params["data-s"]
		}
	case captcha.MethodTurnstile:
		kind, t.Type = KindTurnstile, name("TurnstileTaskProxyless", "TurnstileTask")
		t.WebsiteKey, t.Action, t.CData, t.ChlPageData = params["sitekey"], params["action"], params["data"], params["pagedata"]
	case captcha.MethodGeeTest:
		kind, t.Type = KindGeeTest, name("GeeTestTaskProxyless", "GeeTestTask")
		t.GT, t.Challenge, t.GeetestAPIServerSubdomain = params["gt"], params["challenge"], params["api_server"]
		if params["version"] == "4" {
			t.Version = "4"
		}
	case captcha.MethodHCaptcha:
		kind, t.Type = KindHCaptcha, name("HCaptchaTaskProxyless", "HCaptchaTask")
		t.WebsiteKey, t.IsInvisible = params["sitekey"], params["invisible"] == "1"
		if rq := params["data"]; rq != "" {
			t.EnterprisePayload, _ = json.Marshal(map[string]string{"rqdata": rq})
		}
	case captcha.MethodFriendly:
		kind, t.Type = KindFriendlyCaptcha, name("FriendlyCaptchaTaskProxyless", "FriendlyCaptchaTask")
		t.WebsiteKey = params["sitekey"]
	case captcha.MethodBase64, captcha.MethodPost:
		if params["recaptcha"] == "1" {
			return Task{}, 0, fmt.Errorf("method %s with recaptcha=1 (a grid): no type of the JSON dialect is mapped to it", method)
		}
		kind, t.Type = KindImage, "ImageToTextTask"
		t = Task{Type: t.Type, Body: firstOf(params["body"], params["file"]), Comment: params["textinstructions"],
			Phrase: params["phrase"] == "1", Case: params["regsense"] == "1", Math: params["calc"] == "1"}
		for field, p := range map[*Number]string{&t.Numeric: "numeric", &t.MinLength: "min_len", &t.MaxLength: "max_len"} {
			if v := params[p]; v != "" {
				n, err := strconv.Atoi(v)
				if err != nil {
					return Task{}, 0, fmt.Errorf("params.%s %q: not a whole number", p, v)
				}
				*field = Number(n)
			}
		}
	default:
		return Task{}, 0, fmt.Errorf("method %s: no type of the JSON dialect is mapped to it", method)
	}
	return t, kind, nil
}

// setProxy sets the task's proxy fields from in.php's proxy
// (login:password@host:port or host:port) and proxytype.
func (t *Task) setProxy(proxy, proxyType string) error {
	hostport := proxy
	if i := strings.LastIndexByte(proxy, '@'); i >= 0 {
		login, password, _ := strings.Cut(proxy[:i], ":")
		t.ProxyLogin, t.ProxyPassword, hostport = login, password, proxy[i+1:]
	}
	host, port, err := net.SplitHostPort(hostport)
	n, perr := strconv.Atoi(port)
	if err != nil || perr != nil {
		return fmt.Errorf("params.proxy: want host:port or login:password@host:port")
	}
	t.ProxyAddress, t.ProxyPort, t.ProxyType = host, Number(n), strings.ToLower(proxyType)
	return nil
}

// jsonFields are the task fields in.php's parameters come from (Request).
var jsonFields = map[string]string{
	"pageurl": "websiteURL", "googlekey": "websiteKey", "sitekey": "websiteKey", "data-s": "recaptchaDataSValue",
	"domain": "apiDomain", "min_score": "minScore", "data": "cData", "pagedata": "chlPageData",
	"gt": "gt", "challenge": "challenge", "api_server": "geetestApiServerSubdomain", "body": "body",
	"textinstructions": "comment", "numeric": "numeric", "min_len": "minLength", "max_len": "maxLength",
	"proxy": "proxyAddress", "proxytype": "proxyType", "userAgent": "userAgent", "cookies": "cookies",
}

// Describe rewrites a description of captchaq's that names a request
// parameter ("params.pageurl: must be an absolute http or https URL") to
// name the task field it came from ("task.websiteURL: …"), so a JSON
// caller reads its own field's name; other descriptions pass as they are.
func Describe(text string) string {
	rest, ok := strings.CutPrefix(text, "params.")
	if !ok {
		return text
	}
	param, msg, ok := strings.Cut(rest, ": ")
	field, known := jsonFields[param]
	if !ok || !known {
		return text
	}
	return "task." + field + ": " + msg
}
