// The catalogue: one entry per method captchaq solves, and what every other
// package asks of it.

package captcha

import (
	"maps"
	"slices"
	"time"
)

// Lane groups methods by how long they take, so that a backlog of slow ones
// never starves fast ones (stream/wire.Lane carries it on a task's subject).
type Lane string

// The lanes.
const (
	// LaneSlow holds the kinds of 15–60 s solves, whose first poll
	// CaptchaAI's examples wait 15–20 s for.
	LaneSlow Lane = "slow"
	// LaneFast holds the kinds of 2–15 s solves.
	LaneFast Lane = "fast"
)

// Batch says what a batch poll (res.php action=get&ids) does for a kind.
type Batch int

const (
	// BatchAnswer: a batch reply carries the answer.
	BatchAnswer Batch = iota
	// BatchReady: a batch reply says the answer is ready, and the answer is
	// then fetched on its own, since only a single reply carries the user
	// agent the token is bound to.
	BatchReady
	// BatchNone: polled on its own only, since a batch reply would lose
	// part of the answer (an object, a cookie without its user agent).
	BatchNone
)

// Answer is the shape of a method's answer.
type Answer int

const (
	// AnswerToken is a token string the page submits.
	AnswerToken Answer = iota
	// AnswerText is the text read off an image (or a grid's cells).
	AnswerText
	// AnswerObject is a JSON object of several values (GeeTest's
	// challenge, validate and seccode).
	AnswerObject
	// AnswerCookie is a cookie value (cf_clearance) that works only with
	// the user agent that earned it.
	AnswerCookie
)

// Cond is a parameter's value that makes a request of a method another
// kind ("version" "v3" for reCAPTCHA v3). The zero Cond always holds.
type Cond struct {
	Param, Value string
}

func (c Cond) holds(params map[string]string) bool {
	return c.Param == "" || params[c.Param] == c.Value
}

// Kind groups requests whose solve times are alike: it keys the poller's
// timings and what the queue learns of solve times.
type Kind struct {
	// Name is the kind's name (KindRecaptcha, …).
	Name string
	// If is what makes a request this kind rather than its method's
	// first; the zero Cond for the first.
	If Cond
	// Lane is the lane its tasks travel in.
	Lane Lane
	// FirstPoll is how long after submission the first res.php call is
	// made, until the kind's solve times are learned.
	FirstPoll time.Duration
	// MaxWait is how long after submission the client gives up.
	MaxWait time.Duration
	// Batch is what a batch poll does for it.
	Batch Batch
	// NotOn2Captcha says why 2captcha does not take this kind as captchaq
	// sends it, or "" when it does.
	NotOn2Captcha string
}

// Method is one API method's entry in the catalogue.
type Method struct {
	// Name is the method as the service names it (in.php's method).
	Name string
	// Kinds are the kinds its requests can be: the first, or the first
	// of the others whose If holds.
	Kinds []Kind
	// TokenLifetime is how long an answer is good for once solved.
	TokenLifetime time.Duration
	// Answer is the shape of its answer.
	Answer Answer
	// UserAgentField names the reply field holding the user agent the
	// answer is bound to ("useragent", "user_agent"), or "" when it is
	// bound to none.
	UserAgentField string

	params map[string]param
	cross  func(method string, p map[string]string) *ValidationError
}

// Kinds of captcha that poll on their own timing (see KindOf).
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

// Where the timings come from:
//
//   - 2captcha.com/api-docs/limits: "After uploading a captcha wait at least
//     5 seconds (10-20 for recaptcha) and only then try to get the answer. If
//     captcha is not solved yet - retry in 5 seconds."
//   - CaptchaAI's example pack (github.com/CaptchaAI/CaptchaAI-Examples,
//     articles/how-to-solve-*/python/solve.py) sleeps 15 s before its first
//     poll (20 s for cloudflare_challenge), polls every 5 s (POLL_INTERVAL)
//     and gives up after MAX_TIMEOUT = 120 s.
//
// Token lifetimes: "Each reCAPTCHA user response token is valid for two
// minutes" (developers.google.com/recaptcha/docs/verify); a Turnstile token
// "is valid for 300 seconds (5 minutes) after generation"
// (developers.cloudflare.com/turnstile/get-started/server-side-validation).
// The others are captchaq's own choice, said at each entry.

// imageKinds are the kinds of post and base64: an image, or with recaptcha=1
// a grid. 5 s first poll: 2captcha's "at least 5 seconds" (CaptchaAI's grid
// example waits 15 s; images come back in seconds). 120 s: the examples'
// MAX_TIMEOUT.
var imageKinds = []Kind{
	{Name: KindImage, Lane: LaneFast, FirstPoll: 5 * time.Second, MaxWait: 120 * time.Second},
	{Name: KindGrid, If: Cond{"recaptcha", "1"}, Lane: LaneFast, FirstPoll: 5 * time.Second, MaxWait: 120 * time.Second},
}

// catalogue is the one place that knows each method, in the order Kinds
// lists their kinds.
var catalogue = []Method{
	{
		Name: "userrecaptcha",
		Kinds: []Kind{
			// 15 s: the example (recaptcha-v2) sleeps 15, within 2captcha's
			// 10–20 for reCAPTCHA. 180 s: captchaq's own choice, longer than
			// the examples' 120 since v2 solves take up to a minute and
			// more when the service is busy.
			{Name: KindRecaptcha, Lane: LaneSlow, FirstPoll: 15 * time.Second, MaxWait: 180 * time.Second},
			// 10 s: the low end of 2captcha's 10–20 for reCAPTCHA, captchaq's
			// choice for v3's faster solves (the example sleeps 15).
			// 180 s: as v2.
			{Name: KindRecaptchaV3, If: Cond{"version", "v3"}, Lane: LaneFast, FirstPoll: 10 * time.Second, MaxWait: 180 * time.Second},
		},
		TokenLifetime: 120 * time.Second, // Google: two minutes
		Answer:        AnswerToken,
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
	{
		Name: "turnstile",
		Kinds: []Kind{
			// 5 s: 2captcha's "at least 5 seconds", captchaq's choice for
			// solves of a few seconds (the example sleeps 15). 120 s: the
			// examples' MAX_TIMEOUT. A batch reply lacks the user agent:
			// the answer is fetched on its own.
			{Name: KindTurnstile, Lane: LaneFast, FirstPoll: 5 * time.Second, MaxWait: 120 * time.Second, Batch: BatchReady},
		},
		TokenLifetime: 300 * time.Second, // Cloudflare: 300 s
		Answer:        AnswerToken,
		// The answer is bound to a user agent, in the reply's useragent
		// (CaptchaAI-Examples, articles/how-to-solve-cloudflare-turnstile-using-api/).
		UserAgentField: "useragent",
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
	{
		Name: "geetest",
		Kinds: []Kind{
			// 15 s and 120 s: the examples (geetest-v3, geetest-v4). The
			// answer is an object, which a batch reply does not carry.
			{Name: KindGeeTest, Lane: LaneSlow, FirstPoll: 15 * time.Second, MaxWait: 120 * time.Second, Batch: BatchNone},
			{Name: KindGeeTestV4, If: Cond{"version", "4"}, Lane: LaneSlow, FirstPoll: 15 * time.Second, MaxWait: 120 * time.Second, Batch: BatchNone,
				// 2captcha/2captcha-python, twocaptcha/solver.py.
				NotOn2Captcha: "GeeTest v4 as method geetest with version=4 is CaptchaAI's form; 2captcha names it geetest_v4, which captchaq does not send"},
		},
		TokenLifetime: 120 * time.Second, // captchaq's choice: as reCAPTCHA
		Answer:        AnswerObject,
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
	{
		Name: "hcaptcha",
		Kinds: []Kind{
			// 15 s and 120 s: the example.
			{Name: KindHCaptcha, Lane: LaneSlow, FirstPoll: 15 * time.Second, MaxWait: 120 * time.Second},
		},
		TokenLifetime: 120 * time.Second, // captchaq's choice: as reCAPTCHA
		Answer:        AnswerToken,
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
	{
		Name: "cloudflare_challenge",
		Kinds: []Kind{
			// 20 s and 120 s: the example. The cookie is bound to the user
			// agent, which a batch reply does not carry.
			{Name: KindCloudflare, Lane: LaneSlow, FirstPoll: 20 * time.Second, MaxWait: 120 * time.Second, Batch: BatchNone,
				NotOn2Captcha: "2captcha has no such method (CaptchaAI offers it)"},
		},
		// captchaq's choice: the site sets the cookie's real lifetime,
		// often longer; the outcome need not outlive the first use.
		TokenLifetime:  300 * time.Second,
		Answer:         AnswerCookie,
		UserAgentField: "user_agent",
		params: map[string]param{
			"pageurl":   {required: true, check: checkPageURL},
			"proxy":     {required: true, check: checkProxy},
			"proxytype": {required: true, check: oneOf("HTTP", "HTTPS", "SOCKS4", "SOCKS5")},
		},
	},
	// post takes the image as file (sent as a multipart upload) or, as
	// CaptchaAI's grid example sends it, as body (base64, sent as a form):
	// CaptchaAI-Examples, articles/how-to-solve-grid-image-captcha-automatically/.
	{
		Name:          "post",
		Kinds:         imageKinds,
		TokenLifetime: 300 * time.Second, // captchaq's choice: a text does not expire
		Answer:        AnswerText,
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
	{
		Name:          "base64",
		Kinds:         imageKinds,
		TokenLifetime: 300 * time.Second, // captchaq's choice: a text does not expire
		Answer:        AnswerText,
		params: with(imageParams, map[string]param{
			"body": {required: true, check: checkImage},
		}),
		cross: checkGrid,
	},
	// CaptchaAI-Examples, articles/how-to-solve-bls-captcha-step-by-step/
	// README.md: body and textinstructions, both required.
	{
		Name: "bls",
		Kinds: []Kind{
			// 15 s and 120 s: the example.
			{Name: KindBLS, Lane: LaneFast, FirstPoll: 15 * time.Second, MaxWait: 120 * time.Second,
				NotOn2Captcha: "2captcha has no such method (CaptchaAI offers it)"},
		},
		TokenLifetime: 300 * time.Second, // captchaq's choice: cell numbers do not expire
		Answer:        AnswerText,
		params: map[string]param{
			"body":             {required: true, check: checkImage},
			"textinstructions": {required: true, check: maxChars(140)},
		},
	},
}

// Timings of a kind the catalogue does not know.
const (
	// UnknownFirstPoll is 2captcha's least wait before the first poll.
	UnknownFirstPoll = 5 * time.Second
	// UnknownMaxWait is the examples' MAX_TIMEOUT.
	UnknownMaxWait = 120 * time.Second
)

var (
	byName = func() map[string]*Method {
		m := make(map[string]*Method, len(catalogue))
		for i := range catalogue {
			m[catalogue[i].Name] = &catalogue[i]
		}
		return m
	}()
	kindNames []string
	byKind    = func() map[string]Kind {
		m := map[string]Kind{}
		for _, e := range catalogue {
			for _, k := range e.Kinds {
				if _, ok := m[k.Name]; !ok {
					kindNames = append(kindNames, k.Name)
				}
				m[k.Name] = k
			}
		}
		return m
	}()
)

// Lookup returns the entry of method name.
func Lookup(name string) (Method, bool) {
	m, ok := byName[name]
	if !ok {
		return Method{}, false
	}
	return *m, true
}

// Methods returns the names of the methods Validate accepts, sorted.
func Methods() []string {
	return slices.Sorted(maps.Keys(byName))
}

// Known reports whether name is a method of the catalogue.
func Known(name string) bool {
	_, ok := byName[name]
	return ok
}

// kindOf returns the kind a request of m with params is.
func (m *Method) kindOf(params map[string]string) Kind {
	for _, k := range m.Kinds[1:] {
		if k.If.holds(params) {
			return k
		}
	}
	return m.Kinds[0]
}

// KindOf returns the kind of a request: what groups requests whose solve
// times are alike. Unknown methods are their own kind.
func KindOf(methodName string, params map[string]string) string {
	m, ok := byName[methodName]
	if !ok {
		return methodName
	}
	return m.kindOf(params).Name
}

// LookupKind returns what the catalogue says of kind.
func LookupKind(kind string) (Kind, bool) {
	k, ok := byKind[kind]
	return k, ok
}

// Kinds lists every kind KindOf returns for a method Validate accepts.
func Kinds() []string { return slices.Clone(kindNames) }

// LaneOf returns the lane a request travels in: its kind's, LaneFast for a
// method the catalogue does not know.
func LaneOf(methodName string, params map[string]string) Lane {
	m, ok := byName[methodName]
	if !ok {
		return LaneFast
	}
	return m.kindOf(params).Lane
}

// FirstPoll returns the delay from submission to the first poll of kind:
// UnknownFirstPoll for a kind the catalogue does not know.
func FirstPoll(kind string) time.Duration {
	if k, ok := byKind[kind]; ok {
		return k.FirstPoll
	}
	return UnknownFirstPoll
}

// MaxWait returns how long after submission a captcha of kind is given up:
// UnknownMaxWait for a kind the catalogue does not know.
func MaxWait(kind string) time.Duration {
	if k, ok := byKind[kind]; ok {
		return k.MaxWait
	}
	return UnknownMaxWait
}

// BatchOf returns what a batch poll does for kind: BatchAnswer for a kind
// the catalogue does not know.
func BatchOf(kind string) Batch { return byKind[kind].Batch }

// TokenLifetimes returns every method's token lifetime, by method: a new
// map each call.
func TokenLifetimes() map[string]time.Duration {
	out := make(map[string]time.Duration, len(catalogue))
	for _, m := range catalogue {
		out[m.Name] = m.TokenLifetime
	}
	return out
}

// UserAgentField returns the reply field naming the user agent an answer of
// method is bound to, or "".
func UserAgentField(methodName string) string {
	if m, ok := byName[methodName]; ok {
		return m.UserAgentField
	}
	return ""
}
