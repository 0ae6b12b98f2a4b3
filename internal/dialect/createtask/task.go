package createtask

import (
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/captchaq/captchaq/captcha"
)

// Task is a createTask task object, with the fields of every type the
// dialect serves under the names the providers give them. Field names are
// matched in any case (encoding/json): CapMonster sends ImageToTextTask's
// case flag as "Case" (capmonstercloud-client-js src/Requests/
// ImageToTextRequest.ts), Anti-Captcha as "case" (index.js solveImage).
type Task struct {
	Type       string `json:"type"`
	WebsiteURL string `json:"websiteURL"`
	WebsiteKey string `json:"websiteKey"`

	// reCAPTCHA (Anti-Captcha index.js solveRecaptcha*; apidoc task-types).
	WebsiteSToken       string          `json:"websiteSToken,omitempty"`
	RecaptchaDataSValue string          `json:"recaptchaDataSValue,omitempty"`
	IsInvisible         Flag            `json:"isInvisible,omitempty"`
	IsEnterprise        Flag            `json:"isEnterprise,omitempty"`
	EnterprisePayload   json.RawMessage `json:"enterprisePayload,omitempty"`
	APIDomain           string          `json:"apiDomain,omitempty"`
	MinScore            Number          `json:"minScore,omitempty"`
	PageAction          string          `json:"pageAction,omitempty"`

	// Turnstile: Anti-Captcha's action, cData and chlPageData (index.js
	// solveTurnstile*), its docs' turnstileCData, CapSolver's metadata.
	Action         string    `json:"action,omitempty"`
	CData          string    `json:"cData,omitempty"`
	TurnstileCData string    `json:"turnstileCData,omitempty"`
	ChlPageData    string    `json:"chlPageData,omitempty"`
	Metadata       *Metadata `json:"metadata,omitempty"`
	// CapMonster's names for the same on a challenge page (pageAction,
	// data, pageData), and its mode: a token ("token", or none) is
	// served; a cookie (cf_clearance, wait_room) is not
	// (capmonstercloud-client-js, Requests/TurnstileRequest). Its hCaptcha
	// sends the rqdata as data too (Requests/HCaptchaRequest).
	Data               string `json:"data,omitempty"`
	PageData           string `json:"pageData,omitempty"`
	CloudflareTaskType string `json:"cloudflareTaskType,omitempty"`

	// GeeTest: v3 gt and challenge; v4 version 4 with the captcha id as gt
	// (Anti-Captcha index.js solveGeeTestV4*), as captchaId, or as
	// initParameters.captcha_id.
	GT                        string                     `json:"gt,omitempty"`
	Challenge                 string                     `json:"challenge,omitempty"`
	CaptchaID                 string                     `json:"captchaId,omitempty"`
	GeetestAPIServerSubdomain string                     `json:"geetestApiServerSubdomain,omitempty"`
	GeetestGetLib             string                     `json:"geetestGetLib,omitempty"`
	Version                   Text                       `json:"version,omitempty"`
	InitParameters            map[string]json.RawMessage `json:"initParameters,omitempty"`

	// ImageToTextTask (index.js solveImage; ImageToTextRequest.ts).
	Body      string `json:"body,omitempty"`
	Phrase    Flag   `json:"phrase,omitempty"`
	Case      Flag   `json:"case,omitempty"`
	Numeric   Number `json:"numeric,omitempty"`
	Math      Flag   `json:"math,omitempty"`
	MinLength Number `json:"minLength,omitempty"`
	MaxLength Number `json:"maxLength,omitempty"`
	Comment   string `json:"comment,omitempty"`

	// The browser and the proxy (index.js solve*ProxyOn; ProxyInfo.ts).
	UserAgent     string `json:"userAgent,omitempty"`
	Cookies       string `json:"cookies,omitempty"`
	ProxyType     string `json:"proxyType,omitempty"`
	ProxyAddress  string `json:"proxyAddress,omitempty"`
	ProxyPort     Number `json:"proxyPort,omitempty"`
	ProxyLogin    string `json:"proxyLogin,omitempty"`
	ProxyPassword string `json:"proxyPassword,omitempty"`
	// ProxyString is CapSolver's proxy as one string ("proxy",
	// docs.capsolver.com/guide/api-how-to-use-proxy), which the dialect
	// does not read: a task carrying it is refused rather than solved
	// without its proxy.
	ProxyString string `json:"proxy,omitempty"`
}

// Metadata is CapSolver's Turnstile extra data
// (docs.capsolver.com/guide/antibots/cloudflare_turnstile).
type Metadata struct {
	Action string `json:"action,omitempty"`
	CData  string `json:"cdata,omitempty"`
}

// Flag is a boolean written as true or false and read from a boolean, 0 or
// 1, or a string of one of them.
type Flag bool

// UnmarshalJSON reads true, false, 0, 1, "true", "false", "0" or "1".
func (f *Flag) UnmarshalJSON(b []byte) error {
	switch strings.Trim(string(b), `"`) {
	case "true", "1":
		*f = true
	case "false", "0", "null", "":
		*f = false
	default:
		return typeError(b, flagType)
	}
	return nil
}

// Text is a string read from a string or a number (GeeTest's version is 4
// in Anti-Captcha's client, '4' in CapMonster's).
type Text string

// UnmarshalJSON reads a string or a number.
func (t *Text) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*t = Text(s)
		return nil
	}
	if _, err := strconv.ParseFloat(string(b), 64); err != nil {
		return typeError(b, textType)
	}
	*t = Text(b)
	return nil
}

// Error is a task the dialect cannot take: its code and what is wrong.
type Error struct {
	Code        string
	Description string
}

func (e *Error) Error() string { return e.Code + ": " + e.Description }

func invalid(format string, a ...any) *Error {
	return &Error{Code: CodeInvalidTaskData, Description: fmt.Sprintf(format, a...)}
}

// ReadCreateTask reads a createTask body: the request, and the method and
// parameters of captchaq its task asks for, or the error to answer. The
// gateway and the emulator read the call so, one reading for both.
func ReadCreateTask(body []byte) (CreateTaskRequest, string, map[string]string, *Error) {
	var req CreateTaskRequest
	if err := Decode(body, &req); err != nil {
		return req, "", nil, &Error{Code: CodeInvalidTaskData, Description: err.Error()}
	}
	task, tt, terr := ParseTask(req.Task)
	if terr != nil {
		return req, "", nil, terr
	}
	method, params, terr := task.Request(tt)
	if terr != nil {
		return req, "", nil, terr
	}
	return req, method, params, nil
}

// ParseTask reads a createTask task object. A missing task is
// ERROR_TASK_ABSENT, a type the dialect does not serve
// ERROR_TASK_NOT_SUPPORTED, a field of the wrong type ERROR_INVALID_TASK_DATA
// naming it.
func ParseTask(raw json.RawMessage) (Task, TaskType, *Error) {
	var t Task
	if s := strings.TrimSpace(string(raw)); s == "" || s == "null" {
		return t, TaskType{}, &Error{Code: CodeTaskAbsent, Description: "task: required"}
	}
	if err := Decode(raw, &t); err != nil {
		msg, whole := strings.CutPrefix(err.Error(), "the body: ")
		if whole {
			return t, TaskType{}, invalid("task: %s", msg)
		}
		return t, TaskType{}, invalid("task.%s", msg)
	}
	if t.Type == "" {
		return t, TaskType{}, &Error{Code: CodeTaskNotSupported, Description: "task.type: required"}
	}
	tt, ok := LookupType(t.Type)
	if !ok {
		return t, TaskType{}, &Error{Code: CodeTaskNotSupported, Description: fmt.Sprintf("task.type %.64q: not a type captchaq serves", t.Type)}
	}
	return t, tt, nil
}

// Request is the captchaq request a task of type tt asks for: the method of
// the catalogue and its parameters, named as in.php names them. It checks
// the fields each type requires, naming them as the task does; the values'
// formats are the catalogue's to check (captcha.Validate).
func (t Task) Request(tt TaskType) (string, map[string]string, *Error) {
	p := map[string]string{}
	set := func(k, v string) {
		if v != "" {
			p[k] = v
		}
	}
	need := func(field, v string) *Error {
		if strings.TrimSpace(v) == "" {
			return invalid("task.%s: required for %s", field, tt.Name)
		}
		return nil
	}
	if tt.Kind != KindImage {
		if err := need("websiteURL", t.WebsiteURL); err != nil {
			return "", nil, err
		}
		set("pageurl", t.WebsiteURL)
		set("userAgent", t.UserAgent)
		set("cookies", t.Cookies)
		if err := t.proxy(p); err != nil {
			return "", nil, err
		}
	}
	var method string
	switch tt.Kind {
	case KindRecaptchaV2, KindRecaptchaV2Enterprise, KindRecaptchaV3:
		method = captcha.MethodReCaptcha
		if err := need("websiteKey", t.WebsiteKey); err != nil {
			return "", nil, err
		}
		set("googlekey", t.WebsiteKey)
		if t.IsInvisible {
			p["invisible"] = "1"
		}
		if tt.Kind == KindRecaptchaV2Enterprise || tt.Enterprise || bool(t.IsEnterprise) {
			p["enterprise"] = "1"
		}
		s, err := payload(t.EnterprisePayload, "s")
		if err != nil {
			return "", nil, err
		}
		set("data-s", firstOf(t.RecaptchaDataSValue, t.WebsiteSToken, s))
		set("domain", strings.TrimPrefix(t.APIDomain, "www."))
		if tt.Kind == KindRecaptchaV3 {
			p["version"] = "v3"
			set("action", t.PageAction)
			if t.MinScore != 0 {
				p["min_score"] = strconv.FormatFloat(float64(t.MinScore), 'f', -1, 64)
			}
		}
	case KindTurnstile:
		method = captcha.MethodTurnstile
		if err := need("websiteKey", t.WebsiteKey); err != nil {
			return "", nil, err
		}
		set("sitekey", t.WebsiteKey)
		var m Metadata
		if t.Metadata != nil {
			m = *t.Metadata
		}
		if mode := t.CloudflareTaskType; mode != "" && mode != "token" {
			return "", nil, &Error{Code: CodeTaskNotSupported, Description: fmt.Sprintf("task.cloudflareTaskType %.32q: only token is served (a cookie is not a Turnstile answer)", mode)}
		}
		set("action", firstOf(t.Action, m.Action, t.PageAction))
		set("data", firstOf(t.CData, t.TurnstileCData, m.CData, t.Data))
		set("pagedata", firstOf(t.ChlPageData, t.PageData))
	case KindGeeTest:
		method = captcha.MethodGeeTest
		id, err := payload(json.RawMessage(mustJSON(t.InitParameters)), "captcha_id")
		if err != nil {
			return "", nil, err
		}
		gt := firstOf(t.GT, t.CaptchaID, id)
		if err := need("gt", gt); err != nil {
			return "", nil, err
		}
		set("gt", gt)
		set("api_server", t.GeetestAPIServerSubdomain)
		switch t.Version {
		case "", "3":
			if err := need("challenge", t.Challenge); err != nil {
				return "", nil, err
			}
			set("challenge", t.Challenge)
		case "4":
			p["version"] = "4"
		default:
			return "", nil, invalid("task.version %.16q: want 3 or 4", string(t.Version))
		}
	case KindHCaptcha:
		method = captcha.MethodHCaptcha
		if err := need("websiteKey", t.WebsiteKey); err != nil {
			return "", nil, err
		}
		set("sitekey", t.WebsiteKey)
		if t.IsInvisible {
			p["invisible"] = "1"
		}
		rq, err := payload(t.EnterprisePayload, "rqdata")
		if err != nil {
			return "", nil, err
		}
		// CapMonster sends the rqdata as data (HCaptchaRequest).
		set("data", firstOf(rq, t.Data))
	case KindFriendlyCaptcha:
		method = captcha.MethodFriendly
		if err := need("websiteKey", t.WebsiteKey); err != nil {
			return "", nil, err
		}
		set("sitekey", t.WebsiteKey)
	case KindImage:
		method = captcha.MethodBase64
		if err := need("body", t.Body); err != nil {
			return "", nil, err
		}
		p["body"] = t.Body
		flag := func(k string, f Flag) {
			if f {
				p[k] = "1"
			}
		}
		flag("phrase", t.Phrase)
		flag("regsense", t.Case)
		flag("calc", t.Math)
		num := func(k string, n Number) {
			if n != 0 {
				p[k] = strconv.FormatFloat(float64(n), 'f', -1, 64)
			}
		}
		num("numeric", t.Numeric)
		num("min_len", t.MinLength)
		num("max_len", t.MaxLength)
		set("textinstructions", t.Comment)
	default:
		return "", nil, &Error{Code: CodeTaskNotSupported, Description: "task.type " + tt.Name + ": no method serves it"}
	}
	return method, p, nil
}

// proxy sets the task's proxy as in.php takes it: proxytype (HTTP,
// HTTPS, SOCKS4, SOCKS5) and proxy, login:password@host:port.
func (t Task) proxy(p map[string]string) *Error {
	if t.ProxyString != "" {
		return invalid("task.proxy: a proxy as one string is not taken; send it as proxyType, proxyAddress, proxyPort, proxyLogin and proxyPassword")
	}
	if t.ProxyAddress == "" && t.ProxyType == "" {
		return nil
	}
	switch {
	case t.ProxyAddress == "":
		return invalid("task.proxyAddress: required with proxyType")
	case t.ProxyPort <= 0 || t.ProxyPort > 65535 || t.ProxyPort != Number(int(t.ProxyPort)):
		return invalid("task.proxyPort: want a port, 1 to 65535")
	case t.ProxyType == "":
		return invalid("task.proxyType: required with proxyAddress (http, https, socks4 or socks5)")
	}
	hostport := net.JoinHostPort(t.ProxyAddress, strconv.Itoa(int(t.ProxyPort)))
	if t.ProxyLogin != "" || t.ProxyPassword != "" {
		hostport = t.ProxyLogin + ":" + t.ProxyPassword + "@" + hostport
	}
	p["proxy"], p["proxytype"] = hostport, strings.ToUpper(t.ProxyType)
	return nil
}

// payload returns the string field key of a JSON object (enterprisePayload's
// s or rqdata, initParameters' captcha_id), or "" when absent.
func payload(raw json.RawMessage, key string) (string, *Error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return "", invalid("task: the object holding %s: want an object", key)
	}
	v, ok := obj[key]
	if !ok {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", invalid("task: %s: want a string", key)
	}
	return s, nil
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

func firstOf(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}
