// What the solver asks of the method catalogue (package captcha), under
// the names it has always exported.

package solver

import "github.com/captchaq/captchaq/captcha"

// MaxImageSize is the largest image the service accepts, decoded
// (captcha.MaxImageSize).
const MaxImageSize = captcha.MaxImageSize

// ValidationError says which field of a request is wrong and why
// (captcha.ValidationError).
type ValidationError = captcha.ValidationError

// UnknownParam is a parameter its method does not know (captcha.UnknownParam).
type UnknownParam = captcha.UnknownParam

// Kinds of captcha that poll on their own timing (see Kind).
const (
	KindRecaptcha   = captcha.KindRecaptcha   // userrecaptcha v2, invisible, enterprise
	KindRecaptchaV3 = captcha.KindRecaptchaV3 // userrecaptcha version=v3
	KindTurnstile   = captcha.KindTurnstile   // turnstile
	KindGeeTest     = captcha.KindGeeTest     // geetest (v3)
	KindGeeTestV4   = captcha.KindGeeTestV4   // geetest version=4
	KindHCaptcha    = captcha.KindHCaptcha    // hcaptcha
	KindCloudflare  = captcha.KindCloudflare  // cloudflare_challenge
	KindImage       = captcha.KindImage       // post and base64
	KindGrid        = captcha.KindGrid        // post and base64 with recaptcha=1
	KindBLS         = captcha.KindBLS         // bls
	KindFriendly    = captcha.KindFriendly    // friendly_captcha
)

// Methods returns the names of the methods Validate accepts, sorted
// (captcha.Methods).
func Methods() []string { return captcha.Methods() }

// Validate checks a request's method and parameters the way the service
// would, before anything is sent (captcha.Validate). A failure is a
// *ValidationError naming the field.
func Validate(methodName string, params map[string]string) error {
	return captcha.Validate(methodName, params)
}

// UnknownParams returns the parameters of params that methodName does not
// know, sorted by name (captcha.UnknownParams).
func UnknownParams(methodName string, params map[string]string) []UnknownParam {
	return captcha.UnknownParams(methodName, params)
}

// NearMethod returns the method n is a near miss of, or ""
// (captcha.NearMethod).
func NearMethod(n string) string { return captcha.NearMethod(n) }

// Kinds lists every kind Kind returns for a method Validate accepts
// (captcha.Kinds).
func Kinds() []string { return captcha.Kinds() }

// Kind groups requests whose solve times are alike: it keys Timing's maps and
// the adaptive poller's learning (captcha.KindOf). Unknown methods are their
// own kind.
func Kind(methodName string, params map[string]string) string {
	return captcha.KindOf(methodName, params)
}
