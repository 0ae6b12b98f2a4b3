package solver

import (
	"strconv"
	"strings"

	"github.com/captchaq/captchaq/internal/dialect/classic"
	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/stream/wire"
)

// Pseudo-codes for failures that have no API code of their own, and the API
// codes the client itself branches on. They appear in Error.Code next to the
// API's codes and are classified by Classify like them.
const (
	// CodeBadReply means the body was neither a JSON nor a plain-text API reply
	// (an HTML error page, a truncated or garbage body).
	CodeBadReply = "BAD_REPLY"
	// CodeNetwork means the request did not get an HTTP response (DNS, connect,
	// reset, client timeout).
	CodeNetwork = "NETWORK"
	// CodeUnreachable means the request never reached the service: the
	// connection was refused or timed out, the host does not resolve, or
	// TLS failed. That is an outage or a wrong base URL, the same for every
	// task, so it is a capacity wait: tasks wait without spending attempts.
	CodeUnreachable = "UNREACHABLE"
	// CodeInvalidParams means Validate rejected the request before it was sent; the
	// *ValidationError is in the chain.
	CodeInvalidParams = "INVALID_PARAMS"
	// CodeTimeout means the local deadline of the method (Timing.MaxWait) passed
	// while the captcha was not ready. The service may still be solving it, but
	// nobody waits for that answer: a new submission may do better.
	CodeTimeout = "LOCAL_TIMEOUT"
	// CodePollLimit means Timing.MaxCalls res.php calls were spent on one captcha
	// without an answer (in the JSON dialect, provider.MaxTaskCalls
	// getTaskResult calls on one task).
	CodePollLimit = "POLL_LIMIT"
	// CodeNotReady is the API's "not solved yet" answer, spelled as the API
	// spells it.
	CodeNotReady = classic.CodeNotReady
	// CodeReportRecorded is the API's answer to reportgood and reportbad.
	CodeReportRecorded = classic.CodeReportRecorded
	// CodeCanceled is Call.Code of a call its caller's context ended before
	// the reply (Config.OnCall): the outcome code a task canceled while its
	// call is under way ends with (stream/wire links only the standard
	// library and the catalogue).
	CodeCanceled = wire.CodeCanceled
)

// HTTPCode returns the pseudo-code of an HTTP status that is not 200:
// "HTTP_502" for 502.
func HTTPCode(status int) string { return "HTTP_" + strconv.Itoa(status) }

// OutageCode reports whether code is one an outage of the service gives
// (the service unreachable, a 5xx, a reply that is no word of the API), not
// a refusal of the plan: its snoozes wait for the outage's probes, not for
// a timer that grows with each.
func OutageCode(code string) bool {
	return code == CodeUnreachable || code == CodeBadReply || strings.HasPrefix(code, "HTTP_5")
}

// classes is the one table from API code to retry class; each code's source
// is its fixture in testdata/service/replies.json. Codes not listed here are
// classified by Classify's rules for prefixes and unknowns.
var classes = map[string]retry.Class{
	// poll
	CodeNotReady:        retry.Poll,
	"CAPTCHA_NOT_READY": retry.Poll, // the correct spelling, in case a compatible service uses it

	// capacity: no attempt spent. The rate limits are all here: waiting is
	// what helps, and no task is at fault.
	classic.CodeNoSlotAvailable: retry.Capacity,
	classic.CodeZeroBalance:     retry.Capacity, // CaptchaAI: all plan threads busy (2captcha: Profile)
	classic.CodeMaxUserTurn:     retry.Capacity,
	classic.CodeTooMuchRequests: retry.Capacity,
	classic.CodeTooManyNoSlot:   retry.Capacity, // too many ERROR_NO_SLOT_AVAILABLE: blocked for minutes
	classic.CodeTooManyZero:     retry.Capacity, // too many ERROR_ZERO_BALANCE (2captcha: Profile)
	classic.CodeTooManyQueued:   retry.Capacity, // too many ERROR_NO_SLOT_AVAILABLE on a long queue
	classic.CodeTooManyPolls:    retry.Capacity, // too many res.php calls
	CodeUnreachable:             retry.Capacity,

	// transient
	CodeBadReply:                    retry.Transient,
	CodeNetwork:                     retry.Transient,
	classic.CodeServerError:         retry.Transient,
	classic.CodeInternalServerError: retry.Transient,

	// resubmit
	classic.CodeCaptchaUnsolvable: retry.Resubmit,
	classic.CodeBadDuplicates:     retry.Resubmit,
	// The service does not know the captcha id (classic.CaptchaUnknown):
	// the only answer that gives up a captcha the service accepted
	// (wait.go).
	classic.CodeWrongCaptchaID:        retry.Resubmit,
	classic.CodeNoSuchCaptchaID:       retry.Resubmit,
	classic.CodeProxyConnectionFailed: retry.Resubmit,
	CodeTimeout:                       retry.Resubmit,
	CodePollLimit:                     retry.Resubmit,

	// permanent: the task itself is wrong
	// ERROR_TOKEN_EXPIRED: the GeeTest challenge inside the task is stale, so
	// no submission of the same task can succeed; the producer must fetch a
	// fresh one.
	classic.CodeTokenExpired:          retry.Permanent,
	classic.CodeDomainNotAllowed:      retry.Permanent,
	classic.CodePageURL:               retry.Permanent,
	classic.CodeGoogleKey:             retry.Permanent,
	classic.CodeWrongGoogleKey:        retry.Permanent,
	classic.CodeBadTokenOrPageURL:     retry.Permanent,
	classic.CodeBadParameters:         retry.Permanent,
	classic.CodeProxyFormat:           retry.Permanent,
	classic.CodeBadProxy:              retry.Permanent,
	classic.CodeZeroCaptchaFilesize:   retry.Permanent,
	classic.CodeTooBigCaptchaFilesize: retry.Permanent,
	classic.CodeWrongFileExtension:    retry.Permanent,
	classic.CodeImageTypeNotSupported: retry.Permanent,
	classic.CodeUpload:                retry.Permanent,
	classic.CodeCaptchaImageBlocked:   retry.Permanent,
	classic.CodeWrongIDFormat:         retry.Permanent,
	classic.CodeEmptyAction:           retry.Permanent,
	classic.CodeDuplicateReport:       retry.Permanent,
	classic.CodeReportNotRecorded:     retry.Permanent,
	CodeInvalidParams:                 retry.Permanent,

	// HTTP statuses that are not Transient (see Classify for the others).
	// Fatal: the API answers every call 200, even for errors, so these come
	// from a wrong base URL or a proxy or gateway in the way. Every call of
	// every task gets the same answer; retrying would only dead-letter the
	// whole queue, so the worker stops and leaves the tasks where they are.
	"HTTP_301": retry.Fatal, // redirects: the API never redirects, the base URL is wrong
	"HTTP_302": retry.Fatal, // (http:// for https://, a moved host); the client
	"HTTP_303": retry.Fatal, // the package builds does not follow them, so the
	"HTTP_307": retry.Fatal, // key is never re-sent to where they point
	"HTTP_308": retry.Fatal,
	"HTTP_401": retry.Fatal, // a proxy or gateway wants credentials
	"HTTP_404": retry.Fatal, // no in.php/res.php there: wrong base URL or path
	"HTTP_405": retry.Fatal, // something that is not the API refuses POST
	"HTTP_407": retry.Fatal, // the HTTP proxy wants credentials
	"HTTP_410": retry.Fatal, // the endpoint is gone
	// A 403 is never a code here: the service's own refusal carries its
	// code in the body, and a front's page is an outage (frontRefusal).
	// Capacity: the service or a gateway asks us to slow down; no attempt spent.
	"HTTP_429": retry.Capacity,

	// fatal: the whole worker cannot work
	classic.CodeWrongUserKey:    retry.Fatal,
	classic.CodeKeyDoesNotExist: retry.Fatal,
	classic.CodeIPBanned:        retry.Fatal,
	classic.CodeIPNotAllowed:    retry.Fatal,
	classic.CodeIPBlocked:       retry.Fatal,
	// The IP is blocked after requests with a wrong key: the cause of
	// IP_BANNED, and only a corrected key helps.
	classic.CodeIPBlockedBadKey: retry.Fatal,
}

// Classify returns the retry class of an API code or pseudo-code. It is the
// only place that maps codes to classes.
//
// Beyond the table: every other HTTP_<status> is Transient: 408 and 5xx are
// the server or a gateway failing for now, and the other 4xx (400, 413, 414,
// 431, …) may be about one request (an oversized image, a long page URL) or
// a gateway's passing mood, so they must not stop every worker the way a
// Fatal code does, while a Transient error still ends in the dead letter once
// the task's attempt budget is spent. "ERROR: 1001"…"ERROR: 1005" with any
// suffix are Capacity, except 1004 (fatal, in the table). Every other code — an ERROR_… the table does
// not know, or anything else — is Transient: an unknown code is more likely a
// new or rare condition on the service's side than a fault of the task, and a
// Transient error still ends in the dead letter once the attempt budget is
// spent, whereas calling it Permanent would throw away solvable tasks and
// calling it Fatal would stop every worker on one unfamiliar string.
func Classify(code string) retry.Class {
	if c, ok := classes[code]; ok {
		return c
	}
	switch {
	case strings.HasPrefix(code, "HTTP_"):
		return retry.Transient
	case strings.HasPrefix(code, classic.CodeIPBlockedBadKey):
		return retry.Fatal
	case len(code) >= len(classic.CodeTooManyNoSlot) && code[:len("ERROR: 100")] == "ERROR: 100" &&
		code[len("ERROR: 100")] >= '1' && code[len("ERROR: 100")] <= '5':
		return retry.Capacity
	}
	return retry.Transient
}

// CaptchaUnknown reports whether err is the service saying it does not know the
// captcha id it was asked about (ERROR_WRONG_CAPTCHA_ID,
// ERROR_NO_SUCH_CAPCHA_ID): a captcha it accepted is gone there, and only a
// new submission gets an answer.
func CaptchaUnknown(err error) bool {
	return classic.CaptchaUnknown(CodeOf(err))
}

// knownCodes returns every code Classify knows by name, in no particular order.
func knownCodes() []string {
	out := make([]string, 0, len(classes))
	for c := range classes {
		out = append(out, c)
	}
	return out
}
