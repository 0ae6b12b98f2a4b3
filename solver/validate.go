package solver

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxImageSize is the largest image the service accepts, decoded: 1024 KB.
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

// method describes one API method: its own parameters (the common ones are in
// commonParams) and a check across parameters.
type method struct {
	params map[string]param
	cross  func(method string, p map[string]string) *ValidationError
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

// methods is the one place that knows each method's parameters.
var methods = map[string]method{
	"userrecaptcha": {
		params: map[string]param{
			"googlekey":  {required: true, check: checkKey},
			"pageurl":    {required: true, check: checkPageURL},
			"invisible":  {check: intRange(0, 1)},
			"enterprise": {check: intRange(0, 1)},
			"version":    {check: oneOf("v2", "v3")},
			"action":     {check: maxLen(256)},
			"min_score":  {check: checkScore},
			"data-s":     {check: maxLen(4096)},
			"domain":     {check: oneOf("google.com", "recaptcha.net")},
		},
		cross: func(m string, p map[string]string) *ValidationError {
			if _, ok := p["min_score"]; ok && p["version"] != "v3" {
				return &ValidationError{"params.min_score", "only with version=v3 for method " + m}
			}
			return nil
		},
	},
	"turnstile": {
		params: map[string]param{
			"sitekey":  {required: true, check: checkKey},
			"pageurl":  {required: true, check: checkPageURL},
			"action":   {check: maxLen(256)},
			"data":     {check: maxLen(4096)},
			"pagedata": {check: maxLen(4096)},
		},
	},
	// GeeTest v3 (gt, challenge) and, with version=4, v4 (gt is the
	// captcha_id, no challenge): CaptchaAI-Examples,
	// articles/how-to-solve-geetest-v3-using-api/ and
	// articles/how-to-solve-geetest-v4-using-api/.
	"geetest": {
		params: map[string]param{
			"gt":         {required: true, check: checkKey},
			"challenge":  {check: checkKey},
			"pageurl":    {required: true, check: checkPageURL},
			"api_server": {check: checkHost},
			"version":    {check: oneOf("3", "4")},
		},
		cross: func(m string, p map[string]string) *ValidationError {
			if _, ok := p["challenge"]; !ok && p["version"] != "4" {
				return &ValidationError{"params.challenge", "required for method " + m + " (GeeTest v3; v4 takes version=4 and no challenge)"}
			}
			return nil
		},
	},
	// CaptchaAI-Examples, articles/how-to-solve-hcaptcha-using-api/.
	"hcaptcha": {
		params: map[string]param{
			"sitekey":   {required: true, check: checkKey},
			"pageurl":   {required: true, check: checkPageURL},
			"invisible": {check: intRange(0, 1)},
			"data":      {check: maxLen(4096)},
		},
	},
	// The service opens the page through the task's proxy, so proxy and
	// proxytype are required: CaptchaAI-Examples,
	// articles/how-to-solve-cloudflare-challenge-using-api/.
	"cloudflare_challenge": {
		params: map[string]param{
			"pageurl":   {required: true, check: checkPageURL},
			"proxy":     {required: true, check: checkProxy},
			"proxytype": {required: true, check: oneOf("HTTP", "HTTPS", "SOCKS4", "SOCKS5")},
		},
	},
	// CaptchaAI-Examples, articles/how-to-solve-bls-captcha-step-by-step/
	// README.md: body and textinstructions, both required.
	"bls": {
		params: map[string]param{
			"body":             {required: true, check: checkImage},
			"textinstructions": {required: true, check: maxChars(140)},
		},
	},
	// post takes the image as file (sent as a multipart upload) or, as
	// CaptchaAI's grid example sends it, as body (base64, sent as a form):
	// CaptchaAI-Examples, articles/how-to-solve-grid-image-captcha-automatically/.
	"post": {
		params: with(imageParams, map[string]param{
			"file": {check: checkImage},
			"body": {check: checkImage},
		}),
		cross: func(m string, p map[string]string) *ValidationError {
			_, file := p["file"]
			_, body := p["body"]
			switch {
			case !file && !body:
				return &ValidationError{"params.file", "required for method " + m + " (or body)"}
			case file && body:
				return &ValidationError{"params.body", "not with file for method " + m + ": give the image once"}
			}
			return checkGrid(m, p)
		},
	},
	"base64": {
		params: with(imageParams, map[string]param{
			"body": {required: true, check: checkImage},
		}),
		cross: checkGrid,
	},
}

// Methods returns the names of the methods Validate accepts, sorted.
func Methods() []string {
	out := make([]string, 0, len(methods))
	for m := range methods {
		out = append(out, m)
	}
	slices.Sort(out)
	return out
}

// Validate checks a request's method and parameters the way the service would,
// before anything is sent: required parameters are present, values of the
// parameters it knows are well-formed (sizes in characters where the service
// counts characters), and images (file for post, body for base64 and bls,
// base64-encoded) are JPEG, PNG or GIF of at most MaxImageSize. Parameters
// the method does not know pass, since the service ignores them;
// UnknownParams names them for a warning. Only the names captchaq sets
// itself (key, method, json) are refused. Producers and
// workers share it. A failure is a *ValidationError naming the field.
func Validate(methodName string, params map[string]string) error {
	m, ok := methods[methodName]
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
			continue // passed through, as the service ignores it: see UnknownParams
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

// UnknownParam is a parameter its method does not know: it is passed
// through to the service, which ignores it.
type UnknownParam struct {
	// Name is the parameter's name.
	Name string
	// Method is the method it was given to.
	Method string
	// Suggest is the known parameter it is a near miss of ("googelkey" for
	// googlekey), or "".
	Suggest string
}

// String reads like `params.googelkey: not a parameter of method
// userrecaptcha; passed through, the service ignores it (did you mean
// "googlekey"?)`.
func (u UnknownParam) String() string {
	s := "params." + u.Name + ": not a parameter of method " + u.Method + "; passed through, the service ignores it"
	if u.Suggest != "" {
		s += fmt.Sprintf(" (did you mean %q?)", u.Suggest)
	}
	return s
}

// UnknownParams returns the parameters of params that methodName does not
// know, sorted by name, each with the known name it is a near miss of (an
// edit distance of at most 2, or the same letters in another case). It
// returns nil for an unknown method: Validate refuses that.
func UnknownParams(methodName string, params map[string]string) []UnknownParam {
	m, ok := methods[methodName]
	if !ok {
		return nil
	}
	var out []UnknownParam
	for n := range params {
		if _, ok := m.params[n]; ok {
			continue
		}
		if _, ok := commonParams[n]; ok || reserved[n] {
			continue
		}
		out = append(out, UnknownParam{Name: n, Method: methodName, Suggest: nearest(n, m.params)})
	}
	slices.SortFunc(out, func(a, b UnknownParam) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// nearest returns the known parameter name closest to n, if close enough to
// be a typo of it.
func nearest(n string, own map[string]param) string {
	best, bestD := "", 3
	try := func(k string) {
		d := editDistance(strings.ToLower(n), strings.ToLower(k))
		if d < bestD || d == bestD && k < best {
			best, bestD = k, d
		}
	}
	for k := range own {
		try(k)
	}
	for k := range commonParams {
		try(k)
	}
	if bestD > 2 || bestD >= len(n) {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance of a and b, by bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
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

func oneOf(vals ...string) func(string) string {
	return func(v string) string {
		for _, a := range vals {
			if strings.EqualFold(v, a) {
				return ""
			}
		}
		return "must be one of " + strings.Join(vals, ", ")
	}
}

func intRange(lo, hi int) func(string) string {
	return func(v string) string {
		n, err := strconv.Atoi(v)
		if err != nil || n < lo || n > hi {
			return fmt.Sprintf("must be an integer from %d to %d", lo, hi)
		}
		return ""
	}
}

func maxLen(n int) func(string) string {
	return func(v string) string {
		if len(v) > n {
			return fmt.Sprintf("longer than %d bytes", n)
		}
		return ""
	}
}

// maxChars limits a text to n characters (not bytes): the service counts
// characters, so 140 Cyrillic letters are as fine as 140 Latin ones. The
// text must be UTF-8.
func maxChars(n int) func(string) string {
	return func(v string) string {
		if !utf8.ValidString(v) {
			return "must be UTF-8 text"
		}
		if c := utf8.RuneCountInString(v); c > n {
			return fmt.Sprintf("longer than %d characters (%d)", n, c)
		}
		return ""
	}
}

func checkScore(v string) string {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 0.1 || f > 0.9 {
		return "must be a number from 0.1 to 0.9"
	}
	return ""
}

func checkKey(v string) string {
	switch {
	case strings.TrimSpace(v) == "":
		return "must not be empty"
	case len(v) > 256:
		return "longer than 256 bytes"
	case strings.ContainsAny(v, " \t\r\n"):
		return "must not contain white space"
	}
	return ""
}

func checkPageURL(v string) string {
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "must be an absolute http or https URL"
	}
	if len(v) > 4096 {
		return "longer than 4096 bytes"
	}
	return ""
}

func checkHost(v string) string {
	if v == "" || strings.ContainsAny(v, "/ \t:@") {
		return "must be a host name"
	}
	return ""
}

// checkProxy accepts host:port and login:password@host:port.
func checkProxy(v string) string {
	const want = "must be host:port or login:password@host:port"
	hostport := v
	if i := strings.LastIndexByte(v, '@'); i >= 0 {
		cred := v[:i]
		if c := strings.IndexByte(cred, ':'); c <= 0 || c == len(cred)-1 {
			return want
		}
		hostport = v[i+1:]
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil || host == "" {
		return want
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return want
	}
	return ""
}

// checkImage checks a base64-encoded image: decodable, not empty, at most
// MaxImageSize, JPEG, PNG or GIF.
func checkImage(v string) string {
	img, err := decodeImage(v)
	if err != nil {
		return "must be base64-encoded: " + err.Error()
	}
	switch {
	case len(img) == 0:
		return "empty image"
	case len(img) > MaxImageSize:
		return fmt.Sprintf("image of %d bytes is larger than %d KB", len(img), MaxImageSize/1024)
	case imageType(img) == "":
		return "image must be JPEG, PNG or GIF"
	}
	return ""
}

// decodeImage decodes a base64 image as the API takes it (standard alphabet,
// padding optional, line breaks ignored).
func decodeImage(v string) ([]byte, error) {
	s := strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == ' ' || r == '\t' {
			return -1
		}
		return r
	}, v)
	if base64.StdEncoding.DecodedLen(len(s)) > 2*MaxImageSize {
		return nil, fmt.Errorf("%d base64 bytes is far over the %d KB limit", len(s), MaxImageSize/1024)
	}
	return base64.RawStdEncoding.DecodeString(strings.TrimRight(s, "="))
}

// imageType names the image type from its magic bytes: "jpg", "png", "gif",
// or "" when it is none of them.
func imageType(b []byte) string {
	switch {
	case bytes.HasPrefix(b, []byte{0xFF, 0xD8, 0xFF}):
		return "jpg"
	case bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")):
		return "png"
	case bytes.HasPrefix(b, []byte("GIF87a")), bytes.HasPrefix(b, []byte("GIF89a")):
		return "gif"
	}
	return ""
}

// Kinds of captcha that poll on their own timing (see Kind).
const (
	KindRecaptcha   = "recaptcha"            // userrecaptcha v2, invisible, enterprise
	KindRecaptchaV3 = "recaptcha_v3"         // userrecaptcha version=v3
	KindTurnstile   = "turnstile"            // turnstile
	KindGeeTest     = "geetest"              // geetest (v3)
	KindGeeTestV4   = "geetest_v4"           // geetest version=4
	KindHCaptcha    = "hcaptcha"             // hcaptcha
	KindCloudflare  = "cloudflare_challenge" // cloudflare_challenge
	KindImage       = "image"                // post and base64
	KindGrid        = "grid"                 // post and base64 with recaptcha=1
	KindBLS         = "bls"                  // bls
)

// Kinds lists every kind Kind returns for a method Validate accepts.
func Kinds() []string {
	return []string{KindRecaptcha, KindRecaptchaV3, KindTurnstile, KindGeeTest, KindGeeTestV4,
		KindHCaptcha, KindCloudflare, KindImage, KindGrid, KindBLS}
}

// Kind groups requests whose solve times are alike: it keys Timing's maps and
// the adaptive poller's learning. Unknown methods are their own kind.
func Kind(methodName string, params map[string]string) string {
	switch methodName {
	case "userrecaptcha":
		if params["version"] == "v3" {
			return KindRecaptchaV3
		}
		return KindRecaptcha
	case "turnstile":
		return KindTurnstile
	case "geetest":
		if params["version"] == "4" {
			return KindGeeTestV4
		}
		return KindGeeTest
	case "hcaptcha":
		return KindHCaptcha
	case "cloudflare_challenge":
		return KindCloudflare
	case "bls":
		return KindBLS
	case "post", "base64":
		if params["recaptcha"] == "1" {
			return KindGrid
		}
		return KindImage
	}
	return methodName
}
