package solver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/captchaq/captchaq/retry"
)

// Request is one captcha to solve: an API method and its parameters, as the
// service names them (googlekey, pageurl, sitekey, body, …).
type Request struct {
	// Method is the API's method name (userrecaptcha, turnstile, base64, …);
	// Methods lists those Validate accepts.
	Method string
	// Params are the method's parameters by their API names, without method
	// and key. Solve does not modify the map.
	Params map[string]string
	// CaptchaID, when set, is a captcha the service accepted earlier for
	// this request, by this process or another (WithAccepted told it):
	// Client.Solve polls it instead of submitting, and submits anew only
	// when the service says it does not know the id (CaptchaUnknown). A
	// Solver that cannot resume may ignore it.
	CaptchaID string
	// Submitted is when the service accepted CaptchaID: its polls and its
	// local deadline (Timing.MaxWait) count from then. Zero: now.
	Submitted time.Time
	// Provider names the provider that accepted CaptchaID, as Accepted
	// named it, for a Solver of several providers (package provider),
	// which polls the captcha there. A Client ignores it.
	Provider string
	// Producer names the producer that submitted the task (its client's
	// name), for a Solver that keeps a budget per producer (package
	// provider). A Client ignores it.
	Producer string
	// Unsolvable names the provider that called this task's captcha
	// unsolvable on the attempt before (ERROR_CAPTCHA_UNSOLVABLE), for a
	// Solver of several providers (package provider), which asks another
	// provider of the method first. A Client ignores it.
	Unsolvable string
}

// Answer is a solved captcha.
type Answer struct {
	// Solution is the answer as JSON: a JSON string for tokens and text, an
	// object for GeeTest as the service sends it (v3: geetest_challenge,
	// geetest_validate, geetest_seccode; see GeeTest and GeeTestV4).
	Solution json.RawMessage
	// UserAgent is the user agent the token is bound to, when the service says
	// (Turnstile's useragent, cloudflare_challenge's user_agent).
	UserAgent string
	// CaptchaID is the service's id of the captcha, for reportgood/reportbad.
	CaptchaID string
	// Provider names the provider that solved it, and Cost is what the
	// solve cost there, on CostBasis: set by a Solver of several providers
	// (package provider); a Client leaves them empty.
	Provider  string
	Cost      float64
	CostBasis string
}

// Solver solves one captcha. Implementations must honour ctx: when it is
// done, Solve returns promptly with ctx's error.
type Solver interface {
	// Solve returns the answer to req, or an error whose retry class
	// (ClassOf) tells the caller whether and how to try again.
	Solve(ctx context.Context, req Request) (Answer, error)
}

// Func adapts a function to Solver (in-process solvers, benchmarks).
type Func func(ctx context.Context, req Request) (Answer, error)

// Solve calls f.
func (f Func) Solve(ctx context.Context, req Request) (Answer, error) { return f(ctx, req) }

// Error is a failure reported by, or on the way to, the solving service. It
// never holds the API key.
type Error struct {
	// Code is the API's code (ERROR_PAGEURL, CAPCHA_NOT_READY, …) or, for
	// failures that have none, one of the pseudo-codes HTTP_<status>,
	// BAD_REPLY and NETWORK.
	Code string
	// Class is what the retry logic does about it.
	Class retry.Class
	// Op is the endpoint: "in.php" or "res.php".
	Op string
	// CaptchaID is the service's id of the captcha, once it has one.
	CaptchaID string
	// Text is the service's own description of Code (the error_text of a
	// json=1 reply), when it gave one.
	Text string
	// Err is the underlying error, if any (network errors, parse errors).
	Err error
	// lost is set when the request reached the service and its reply was
	// lost or not understood (cut, timed out, garbled): see MayBePaid.
	lost bool
}

// MayBePaid reports whether err is the failure of an in.php call whose
// request reached the service and whose reply was lost or could not be
// read (a connection cut mid-reply, no reply before the timeout, a body
// that is no reply, an HTTP 5xx without the service's error code, which a
// front in its way answered, perhaps after passing the call on): the
// service may have accepted the captcha, and been paid for it, with no one
// told its id. A refused connection, a front's 403, an error code of the
// service, or a call never sent, is no such failure.
//
// An error of another client (a provider of another dialect) says so by
// a method MayBePaid() bool.
func MayBePaid(err error) bool {
	var e *Error
	var other interface{ MayBePaid() bool }
	return errors.As(err, &e) && e.Op == "in.php" && e.lost || errors.As(err, &other) && other.MayBePaid()
}

// ProviderOf is the name of the provider err happened on, when a Solver
// of several providers said (by a method Provider() string on the error);
// "" otherwise.
func ProviderOf(err error) string {
	var p interface{ Provider() string }
	if errors.As(err, &p) {
		return p.Provider()
	}
	return ""
}

// replyLost marks e as the failure of a request whose reply was lost.
func (e *Error) replyLost() *Error {
	e.lost = true
	return e
}

// newError is the error of an operation (in.php, res.php, validate) that
// ended with code, classified by the one table (Classify); err is what
// failed underneath, if anything.
func newError(op, code string, err error) *Error {
	return &Error{Code: code, Class: Classify(code), Op: op, Err: err}
}

// about names the service's captcha the error is about.
func (e *Error) about(captchaID string) *Error {
	e.CaptchaID = captchaID
	return e
}

// saying adds the service's description of the code (its error_text).
func (e *Error) saying(text string) *Error {
	e.Text = text
	return e
}

// Error returns "<op>: <code> (<class>)", then the service's description
// and the underlying error when there are any. It never contains the API key.
func (e *Error) Error() string {
	msg := fmt.Sprintf("%s: %s (%s)", e.Op, e.Code, e.Class)
	if e.Text != "" {
		msg += ": " + e.Text
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the underlying error (Err), so errors.Is finds, say,
// context.DeadlineExceeded behind a network failure.
func (e *Error) Unwrap() error { return e.Err }

// ClassOf returns the retry class of err: the Class of a *Error in its chain,
// retry.Unknown for nil, and retry.Transient for any other error (a network
// failure that was not wrapped, say).
func ClassOf(err error) retry.Class {
	if err == nil {
		return retry.Unknown
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Class
	}
	return retry.Transient
}

// CodeOf returns the API code of a *Error in err's chain, or "" when there is none.
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}
