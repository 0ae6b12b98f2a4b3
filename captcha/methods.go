// The entries of the catalogue, one per method, with the sources of their
// figures.

package captcha

import "time"

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
	KindFriendly    = "friendly_captcha"     // friendly_captcha
)

// The methods' names, as the service's in.php takes them (each entry's
// Name): code that names a method uses these, so that a method's name is
// written here only (TestMethodNamesLiveHere).
const (
	MethodReCaptcha  = "userrecaptcha"
	MethodTurnstile  = "turnstile"
	MethodGeeTest    = "geetest"
	MethodHCaptcha   = "hcaptcha"
	MethodCloudflare = "cloudflare_challenge"
	MethodPost       = "post"
	MethodBase64     = "base64"
	MethodBLS        = "bls"
	MethodFriendly   = "friendly_captcha"
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
		Name: MethodReCaptcha,
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
		Name: MethodTurnstile,
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
		Name: MethodGeeTest,
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
		Name: MethodHCaptcha,
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
			// Where the page loads hCaptcha from: 2captcha's JavaScript SDK
			// documents it, "hcaptcha.com or js.hcaptcha.com"
			// (@2captcha/captcha-solver 1.3.9, dist/structs/2captcha.js,
			// hcaptcha).
			"domain": {check: oneOf("hcaptcha.com", "js.hcaptcha.com")},
		},
	},
	// The service opens the page through the task's proxy, so proxy and
	// proxytype are required: CaptchaAI-Examples,
	// articles/how-to-solve-cloudflare-challenge-using-api/.
	{
		Name: MethodCloudflare,
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
		Name:          MethodPost,
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
		Name:          MethodBase64,
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
		Name: MethodBLS,
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
	// Friendly Captcha: CaptchaAI's official MCP server lists it among the
	// service's token-mode methods, with no argument beyond the site key and
	// the page (pypi.org/project/captchaai-mcp, "Supported captcha_type
	// Values": friendly_captcha); the in.php form is method=friendly_captcha
	// with sitekey and pageurl, the answer a token (2captcha/2captcha-python,
	// twocaptcha/solver.py, friendly_captcha; anti-captcha.com/apidoc/
	// task-types/FriendlyCaptchaTaskProxyless: solution.token).
	{
		Name: MethodFriendly,
		Kinds: []Kind{
			// 5 s: 2captcha's "at least 5 seconds", captchaq's choice for a
			// proof-of-work puzzle solved in seconds. 120 s: the examples'
			// MAX_TIMEOUT.
			{Name: KindFriendly, Lane: LaneFast, FirstPoll: 5 * time.Second, MaxWait: 120 * time.Second},
		},
		TokenLifetime: 120 * time.Second, // captchaq's choice: as reCAPTCHA
		Answer:        AnswerToken,
		params: map[string]param{
			"sitekey": {required: true, check: checkKey},
			"pageurl": {required: true, check: checkPageURL},
		},
	},
}
