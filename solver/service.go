package solver

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/captchaq/captchaq/captcha"
	"github.com/captchaq/captchaq/internal/dialect/classic"
	"github.com/captchaq/captchaq/retry"
)

// Service is a profile of one 2captcha-compatible service: where its API
// means something else than another's, or lacks a method. The zero value is
// not a profile; ServiceOf picks one from a base URL.
type Service string

// The services captchaq knows.
const (
	// CaptchaAI (ocr.captchaai.com) bills concurrent threads: its
	// ERROR_ZERO_BALANCE means "no free threads" (docs.captchaai.com,
	// api/api-error-handling), a capacity wait. Its methods are the ones
	// Methods lists. It documents no multi-id poll.
	CaptchaAI Service = "captchaai"
	// TwoCaptcha (2captcha.com) bills per captcha: its ERROR_ZERO_BALANCE
	// means the account has no money (2captcha.com/api-docs/error-codes:
	// "You don't have funds on your account"), and ERROR: 1002 follows it;
	// waiting does not help, so both are fatal: the worker stops and
	// leaves the queue untouched. It has no cloudflare_challenge and no
	// bls, and names GeeTest v4 geetest_v4 (2captcha/2captcha-python,
	// twocaptcha/solver.py), which captchaq does not send: geetest with
	// version=4 is refused before it is sent.
	TwoCaptcha Service = "2captcha"
)

// Services lists the profiles, for flag help.
func Services() []Service { return []Service{CaptchaAI, TwoCaptcha} }

// ParseService returns the profile named s ("captchaai" or "2captcha").
func ParseService(s string) (Service, error) {
	switch Service(strings.ToLower(strings.TrimSpace(s))) {
	case CaptchaAI:
		return CaptchaAI, nil
	case TwoCaptcha:
		return TwoCaptcha, nil
	}
	return "", fmt.Errorf("solver: unknown service %q (want captchaai or 2captcha)", s)
}

// ServiceOf returns the profile of the service at baseURL: TwoCaptcha for
// 2captcha.com and its subdomains, CaptchaAI for every other host (its own,
// the emulator, a proxy in front of it).
func ServiceOf(baseURL string) Service {
	u, err := url.Parse(baseURL)
	if err == nil {
		h := strings.ToLower(u.Hostname())
		if h == "2captcha.com" || strings.HasSuffix(h, ".2captcha.com") {
			return TwoCaptcha
		}
	}
	return CaptchaAI
}

// Classify returns the retry class of code on this service: Classify's,
// but for the codes whose meaning depends on the service.
func (s Service) Classify(code string) retry.Class {
	if s == TwoCaptcha {
		switch code {
		case classic.CodeZeroBalance, classic.CodeTooManyZero:
			return retry.Fatal
		}
	}
	return Classify(code)
}

// askPace is how many times its recommended pace, a poll every
// PollInterval (5 s) per captcha in flight, a Client's res.php calls may
// come to with the hand-back's confirms (ready.go, callCredit), unless
// Timing.PollPace says.
//
// 2captcha asks for 5 s between polls of a captcha not ready and blocks
// keys whose timeouts are wrong ("If captcha is not solved yet - retry in
// 5 seconds. If your timeouts are configured incorrectly your account or
// IP address will be temporary blocked": 2captcha.com/api-docs/limits):
// the pace itself. CaptchaAI recommends the same pace but enforces no
// per-second limit on res.php ("CaptchaAI does not enforce strict
// per-second rate limits … Poll frequency: Recommended: every 5 seconds per
// task": blog.captchaai.com/rate-limits-and-throttling), and answers a
// rate it does not take with HTTP 429 or ERROR_TOO_MUCH_REQUESTS
// (blog.captchaai.com/captchaai-api-rate-limiting-429-responses), which
// stops the confirms for a minute.
func (s Service) askPace() float64 {
	if s == TwoCaptcha {
		return 1
	}
	return 3
}

// pausesAfterRefusal reports whether the service asks for a pause after
// a refusal of the full plan, so that a refused task keeps its capacity
// delay (WaitedForThread). 2captcha does: "If server returns
// ERROR_NO_SLOT_AVAILABLE make a 5 seconds timeout before sending next
// request" (2captcha.com/api-docs/limits). CaptchaAI enforces no such limit
// ("CaptchaAI does not enforce strict per-second rate limits":
// blog.captchaai.com/rate-limits-and-throttling).
func (s Service) pausesAfterRefusal() bool { return s == TwoCaptcha }

// Offers returns nil when the service has the method of a request Validate
// accepted, else an error naming the service.
func (s Service) Offers(methodName string, params map[string]string) error {
	if s != TwoCaptcha {
		return nil
	}
	m, ok := captcha.Lookup(methodName)
	if !ok {
		return nil
	}
	k, _ := captcha.LookupKind(captcha.KindOf(methodName, params))
	if k.NotOn2Captcha == "" {
		return nil
	}
	field := "method"
	if k.Name != m.Kinds[0].Name {
		field = "params." + k.If.Param
	}
	return &ValidationError{Field: field, Msg: fmt.Sprintf("%s is not for service profile %s: %s", methodName, s, k.NotOn2Captcha)}
}

// Explain says what a code means on this service, for the codes whose
// meaning an operator must know to act: "" for the others.
func (s Service) Explain(code string) string {
	switch {
	case code == classic.CodeZeroBalance && s == TwoCaptcha:
		return "the 2captcha account has no money: top it up"
	case code == classic.CodeTooManyZero && s == TwoCaptcha:
		return "2captcha blocks the key after repeated ERROR_ZERO_BALANCE: top the account up"
	case code == classic.CodeZeroBalance:
		return "all the CaptchaAI plan's threads are busy"
	}
	return ""
}
