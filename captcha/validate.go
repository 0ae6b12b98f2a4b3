package captcha

import (
	"fmt"
	"slices"
	"strings"
)

// MaxImageSize is the largest image the service accepts, decoded: 1024 KB
// ("Uploaded image exceeds the allowed size (1024 KB Max)",
// ERROR_TOO_BIG_CAPTCHA_FILESIZE: docs.captchaai.com/pages/err_handling).
const MaxImageSize = 1024 * 1024

// ValidationError says which field of a request is wrong and why. Field is
// "method" or "params.<name>".
type ValidationError struct {
	// Field is the wrong field: "method" or "params.<name>".
	Field string
	// Msg says what is wrong with it, e.g. "required for method turnstile".
	Msg string
}

// Error reads like "params.pageurl: required for method turnstile".
func (e *ValidationError) Error() string { return e.Field + ": " + e.Msg }

// param describes one parameter of a method.
type param struct {
	required bool
	check    func(v string) string // "" if v is fine, else why not
}

// commonParams are accepted by every method. soft_id is the developer id
// the official 2captcha SDK sends on every call (2captcha/2captcha-go,
// api2captcha.go); header_acao=1 asks for a CORS header on the reply.
var commonParams = map[string]param{
	"proxy":       {check: checkProxy},
	"proxytype":   {check: oneOf("HTTP", "HTTPS", "SOCKS4", "SOCKS5")},
	"userAgent":   {check: maxLen(1024)},
	"cookies":     {check: maxLen(8192)},
	"soft_id":     {check: intRange(0, 1<<31-1)},
	"header_acao": {check: intRange(0, 1)},
}

// reserved are the request fields captchaq sets itself; a task parameter of
// one of these names would replace them.
var reserved = map[string]bool{"key": true, "method": true, "json": true}

// imageParams are the options of the image methods (post, base64), including
// the grid ones (recaptcha=1 with instructions).
var imageParams = map[string]param{
	"numeric":          {check: intRange(0, 4)},
	"min_len":          {check: intRange(0, 20)},
	"max_len":          {check: intRange(0, 20)},
	"phrase":           {check: intRange(0, 1)},
	"regsense":         {check: intRange(0, 1)},
	"calc":             {check: intRange(0, 1)},
	"language":         {check: intRange(0, 2)},
	"lang":             {check: maxLen(8)},
	"textinstructions": {check: maxChars(140)},
	"instructions":     {check: maxChars(140)},
	"imginstructions":  {check: checkImage},
	"recaptcha":        {check: intRange(0, 1)},
	"recaptcharows":    {check: intRange(1, 6)},
	"recaptchacols":    {check: intRange(1, 6)},
	"can_no_answer":    {check: intRange(0, 1)},
}

// Validate checks a request's method and parameters the way the service would,
// before anything is sent: required parameters are present, values of the
// parameters it knows are well-formed (sizes in characters where the service
// counts characters), and images (file for post, body for base64 and bls,
// base64-encoded) are JPEG, PNG or GIF of at most MaxImageSize. A parameter
// the method does not know is refused, naming it and the known name it is a
// near miss of: the service would ignore it, so a typo ("pageUrl") or a
// parameter of another method would otherwise be dropped without a word,
// and the names captchaq sets itself (key, method, json) would replace
// them. Producers and workers share it. A failure is a *ValidationError
// naming the field.
func Validate(methodName string, params map[string]string) error {
	m, ok := byName[methodName]
	if !ok {
		if methodName == "" {
			return &ValidationError{"method", "required"}
		}
		return &ValidationError{"method", fmt.Sprintf("unknown method %q (known: %s)", methodName, strings.Join(Methods(), ", "))}
	}
	// Deterministic order: required first, then the rest by name.
	names := make([]string, 0, len(m.params))
	for n := range m.params {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if _, ok := params[n]; m.params[n].required && !ok {
			return &ValidationError{"params." + n, "required for method " + methodName}
		}
	}
	given := make([]string, 0, len(params))
	for n := range params {
		given = append(given, n)
	}
	slices.Sort(given)
	for _, n := range given {
		if reserved[n] {
			return &ValidationError{"params." + n, "reserved: captchaq sets " + n + " itself"}
		}
		p, ok := m.params[n]
		if !ok {
			p, ok = commonParams[n]
		}
		if !ok {
			u := UnknownParam{Name: n, Method: methodName, Suggest: nearest(n, m.params)}
			return &ValidationError{"params." + n, u.reason()}
		}
		v := params[n]
		if p.required && strings.TrimSpace(v) == "" {
			return &ValidationError{"params." + n, "required for method " + methodName}
		}
		if p.check != nil {
			if msg := p.check(v); msg != "" {
				return &ValidationError{"params." + n, msg}
			}
		}
	}
	if _, ok := params["proxytype"]; ok && params["proxy"] == "" {
		return &ValidationError{"params.proxy", "required with proxytype"}
	}
	if m.cross != nil {
		if err := m.cross(methodName, params); err != nil {
			return err
		}
	}
	return nil
}

func with(a, b map[string]param) map[string]param {
	out := make(map[string]param, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

func checkGrid(m string, p map[string]string) *ValidationError {
	if p["recaptcha"] != "1" {
		return nil
	}
	if p["textinstructions"] == "" && p["instructions"] == "" && p["imginstructions"] == "" {
		return &ValidationError{"params.textinstructions", "required with recaptcha=1 (grid) for method " + m + " (or imginstructions)"}
	}
	return nil
}
