package createtask

import "github.com/captchaq/captchaq/internal/dialect/classic"

// The dialect's error codes (errorCode), spelled as the providers spell
// them (ERROR_NO_SUCH_CAPCHA_ID and ERROR_SERVICE_UNAVALIABLE are their own
// typos). The words both dialects share are package classic's constants,
// spelled there once. Anti-Captcha (anti-captcha.com/apidoc/errors) and 2captcha
// (2captcha.com/api-docs/error-codes) number them (errorId, IDs below);
// CapMonster Cloud (zennolab.atlassian.net/wiki/spaces/APIS/pages/295396/Error+Types)
// and CapSolver (docs.capsolver.com/guide/api-error) answer errorId 1 for
// every error, which is what a code without a number here gets.
const (
	CodeKeyDoesNotExist       = classic.CodeKeyDoesNotExist       // 1: no such key (all four)
	CodeNoSlotAvailable       = classic.CodeNoSlotAvailable       // 2: no capacity for the task now (Anti-Captcha, 2captcha, CapMonster)
	CodeZeroCaptchaFilesize   = classic.CodeZeroCaptchaFilesize   // 3: the image is under 100 bytes
	CodeTooBigCaptchaFilesize = classic.CodeTooBigCaptchaFilesize // 4: the image is too large
	CodeZeroBalance           = classic.CodeZeroBalance           // 10: no funds
	CodeIPNotAllowed          = classic.CodeIPNotAllowed          // 11: not a trusted address of the key
	CodeCaptchaUnsolvable     = classic.CodeCaptchaUnsolvable     // 12: the captcha has no answer
	CodeBadDuplicates         = classic.CodeBadDuplicates         // 13: 100 % recognition found no match
	CodeNoSuchMethod          = "ERROR_NO_SUCH_METHOD"            // 14: no such API method
	CodeImageTypeNotSupported = classic.CodeImageTypeNotSupported // 15: the image cannot be read
	CodeNoSuchCaptchaID       = classic.CodeNoSuchCaptchaID       // 16: no task of the key has this id
	CodeIPBlocked             = classic.CodeIPBlocked             // 21: the address is banned for misuse
	CodeTaskAbsent            = "ERROR_TASK_ABSENT"               // 22: createTask without task
	CodeTaskNotSupported      = "ERROR_TASK_NOT_SUPPORTED"        // 23: task.type is none the service serves

	// CapMonster Cloud's, errorId 1.
	CodeTooMuchRequests  = classic.CodeTooMuchRequests  // over the request rate: slow down
	CodeDomainNotAllowed = classic.CodeDomainNotAllowed // the site's captchas are not solved
	CodeTokenExpired     = classic.CodeTokenExpired     // the task's extra token (GeeTest's challenge) has expired

	// CapSolver's, errorId 1.
	CodeInvalidTaskData    = "ERROR_INVALID_TASK_DATA"   // "invalid task data: …": a field is missing or wrong
	CodeServiceUnavailable = "ERROR_SERVICE_UNAVALIABLE" // "Service is temporarily unavailable": retry later

	// 2captcha API v2's answers to a report it does not take
	// (2captcha.com/h/how-to-submit-reports), errorId 1.
	CodeReportNotRecorded = classic.CodeReportNotRecorded
)

// ids are the numbers Anti-Captcha's and 2captcha's tables give their codes.
var ids = map[string]int{
	CodeKeyDoesNotExist: 1, CodeNoSlotAvailable: 2, CodeZeroCaptchaFilesize: 3, CodeTooBigCaptchaFilesize: 4,
	CodeZeroBalance: 10, CodeIPNotAllowed: 11, CodeCaptchaUnsolvable: 12, CodeBadDuplicates: 13,
	CodeNoSuchMethod: 14, CodeImageTypeNotSupported: 15, CodeNoSuchCaptchaID: 16, CodeIPBlocked: 21,
	CodeTaskAbsent: 22, CodeTaskNotSupported: 23,
}

// ErrorID is the errorId a reply carrying code has: the number of the
// code's row in Anti-Captcha's and 2captcha's tables, or 1 (CapMonster's
// and CapSolver's number for any error).
func ErrorID(code string) int {
	if id, ok := ids[code]; ok {
		return id
	}
	return 1
}

// fromClassic maps the in.php/res.php codes captchaq's outcomes and the
// gateway's refusals carry to this dialect's word for the same thing.
var fromClassic = map[string]string{
	classic.CodeWrongUserKey:    CodeKeyDoesNotExist,
	classic.CodeKeyDoesNotExist: CodeKeyDoesNotExist,
	classic.CodeIPBanned:        CodeIPBlocked,
	classic.CodeIPBlocked:       CodeIPBlocked,
	classic.CodeIPBlockedBadKey: CodeIPBlocked,
	classic.CodeIPNotAllowed:    CodeIPNotAllowed,

	classic.CodeNoSlotAvailable: CodeNoSlotAvailable,
	classic.CodeTooManyNoSlot:   CodeNoSlotAvailable,
	classic.CodeTooManyQueued:   CodeNoSlotAvailable,
	classic.CodeZeroBalance:     CodeZeroBalance,
	classic.CodeTooManyZero:     CodeZeroBalance,
	classic.CodeMaxUserTurn:     CodeTooMuchRequests,
	classic.CodeTooMuchRequests: CodeTooMuchRequests,
	classic.CodeTooManyPolls:    CodeTooMuchRequests,

	classic.CodeServerError:         CodeServiceUnavailable,
	classic.CodeInternalServerError: CodeServiceUnavailable,

	classic.CodeWrongCaptchaID:  CodeNoSuchCaptchaID,
	classic.CodeNoSuchCaptchaID: CodeNoSuchCaptchaID,
	classic.CodeWrongIDFormat:   CodeNoSuchCaptchaID,

	classic.CodeCaptchaUnsolvable:     CodeCaptchaUnsolvable,
	classic.CodeBadDuplicates:         CodeBadDuplicates,
	classic.CodeTokenExpired:          CodeTokenExpired,
	classic.CodeDomainNotAllowed:      CodeDomainNotAllowed,
	classic.CodeZeroCaptchaFilesize:   CodeZeroCaptchaFilesize,
	classic.CodeTooBigCaptchaFilesize: CodeTooBigCaptchaFilesize,
	classic.CodeImageTypeNotSupported: CodeImageTypeNotSupported,
	classic.CodeWrongFileExtension:    CodeImageTypeNotSupported,
	classic.CodeUpload:                CodeImageTypeNotSupported,
	classic.CodeCaptchaImageBlocked:   CodeCaptchaUnsolvable,

	classic.CodeBadParameters:     CodeInvalidTaskData,
	classic.CodePageURL:           CodeInvalidTaskData,
	classic.CodeGoogleKey:         CodeInvalidTaskData,
	classic.CodeWrongGoogleKey:    CodeInvalidTaskData,
	classic.CodeBadTokenOrPageURL: CodeInvalidTaskData,
	classic.CodeProxyFormat:       CodeInvalidTaskData,
	classic.CodeBadProxy:          CodeInvalidTaskData,
	classic.CodeEmptyAction:       CodeInvalidTaskData,

	classic.CodeReportNotRecorded: CodeReportNotRecorded,
	classic.CodeDuplicateReport:   CodeReportNotRecorded,
}

// FromClassic returns this dialect's code for an in.php/res.php code (the
// codes a dead task's outcome and the gateway's refusals carry). A code the
// dialect has no word for (ERROR_PROXY_CONNECTION_FAILED, a code captchaq
// has not met) is passed on as it is, with errorId 1: it is still the
// service's own word on the task.
func FromClassic(code string) string {
	if c, ok := fromClassic[code]; ok {
		return c
	}
	return code
}

// toClassic maps the codes of this dialect that package classic has no
// word for to the in.php/res.php code of the same thing.
var toClassic = map[string]string{
	CodeTaskAbsent:         classic.CodeBadParameters,
	CodeTaskNotSupported:   classic.CodeBadParameters,
	CodeInvalidTaskData:    classic.CodeBadParameters,
	CodeNoSuchMethod:       classic.CodeBadParameters,
	CodeServiceUnavailable: classic.CodeServerError,
}

// ToClassic returns the in.php/res.php code for a code of this dialect, for
// a client that classes a JSON provider's errors as the classic ones are
// classed: the dialect's own words (ERROR_TASK_NOT_SUPPORTED,
// ERROR_INVALID_TASK_DATA, ERROR_SERVICE_UNAVALIABLE, …) become the classic
// code of the same meaning; the words both share pass as they are.
func ToClassic(code string) string {
	if c, ok := toClassic[code]; ok {
		return c
	}
	return code
}
