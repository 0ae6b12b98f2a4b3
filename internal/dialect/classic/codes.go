package classic

// The codes of the dialect's replies, spelled as the services spell them
// (CAPCHA_NOT_READY and ERROR_NO_SUCH_CAPCHA_ID are the services' own
// typos). Each one's source is beside it; Text gives its published meaning.
//
// CaptchaAI: docs.captchaai.com/pages/err_handling (its in.php and res.php
// error tables) and blog.captchaai.com/captchaai-api-error-handling-decision-tree;
// 2captcha: 2captcha.com/api-docs/error-codes and the legacy list at
// 2captcha.com/2captcha-api#error_handling (the "ERROR: 100x" codes, which
// CaptchaAI's table mirrors).
const (
	// CodeNotReady: res.php, the captcha is not solved yet; poll again
	// (2captcha-python twocaptcha/solver.py get_result; CaptchaAI-Examples
	// solve.py poll on it).
	CodeNotReady = "CAPCHA_NOT_READY"
	// CodeReportRecorded: res.php's answer to reportgood and reportbad
	// (2captcha.com/api-docs/error-codes).
	CodeReportRecorded = "OK_REPORT_RECORDED"

	// Refused for the key: no request of this key succeeds until it is
	// fixed (CaptchaAI-Examples solve.py, AUTH_ERRORS; the services' tables).
	CodeWrongUserKey    = "ERROR_WRONG_USER_KEY"     // the key is not 32 characters (CaptchaAI table)
	CodeKeyDoesNotExist = "ERROR_KEY_DOES_NOT_EXIST" // no such key (CaptchaAI table)
	CodeIPBanned        = "IP_BANNED"                // the address is banned after bad keys (CaptchaAI table)
	CodeIPNotAllowed    = "ERROR_IP_NOT_ALLOWED"     // not a trusted address of the key (2captcha error codes)
	CodeIPBlocked       = "ERROR_IP_BLOCKED"         // the address is banned for misuse (2captcha error codes)
	CodeIPBlockedBadKey = "ERROR: 1004"              // the address is blocked after wrong keys (2captcha legacy list)

	// Capacity refusals: nothing is wrong with the request; later it may
	// be accepted.
	CodeZeroBalance     = "ERROR_ZERO_BALANCE"      // CaptchaAI: no free thread of the plan; 2captcha: no funds (both tables)
	CodeNoSlotAvailable = "ERROR_NO_SLOT_AVAILABLE" // the queue of the key is full (2captcha error codes; CaptchaAI blog table)
	CodeMaxUserTurn     = "MAX_USER_TURN"           // over SubmitLimit in.php calls in SubmitWindow: refused for BanTime (rule.go)
	CodeTooMuchRequests = "ERROR_TOO_MUCH_REQUESTS" // rate limit hit, retry after 3-10 s (CaptchaAI blog table)
	CodeTooManyNoSlot   = "ERROR: 1001"             // too many ERROR_NO_SLOT_AVAILABLE: blocked for minutes (2captcha legacy list)
	CodeTooManyZero     = "ERROR: 1002"             // too many ERROR_ZERO_BALANCE (2captcha legacy list)
	CodeTooManyQueued   = "ERROR: 1003"             // too many ERROR_NO_SLOT_AVAILABLE on a long queue (2captcha legacy list)
	CodeTooManyPolls    = "ERROR: 1005"             // too many res.php calls (2captcha legacy list)

	// The service failed for now.
	CodeServerError         = "ERROR_SERVER_ERROR"          // CaptchaAI-Examples solve.py, TRANSIENT_ERRORS
	CodeInternalServerError = "ERROR_INTERNAL_SERVER_ERROR" // CaptchaAI-Examples solve.py, TRANSIENT_ERRORS

	// The captcha's end at the service: this captcha has no answer.
	CodeCaptchaUnsolvable     = "ERROR_CAPTCHA_UNSOLVABLE"       // CaptchaAI-Examples solve.py, SOLVE_ERRORS
	CodeBadDuplicates         = "ERROR_BAD_DUPLICATES"           // 100 % recognition found no match (2captcha error codes)
	CodeProxyConnectionFailed = "ERROR_PROXY_CONNECTION_FAILED"  // CaptchaAI-Examples solve.py, PROXY_ERRORS
	CodeTokenExpired          = "ERROR_TOKEN_EXPIRED"            // the GeeTest challenge is stale (2captcha legacy list)
	CodeCaptchaImageBlocked   = "ERROR_CAPTCHAIMAGE_BLOCKED"     // the image is marked unrecognizable (CaptchaAI blog table)
	CodeWrongCaptchaID        = "ERROR_WRONG_CAPTCHA_ID"         // CaptchaAI: "You've provided incorrect captcha ID" (CaptchaAI table)
	CodeNoSuchCaptchaID       = "ERROR_NO_SUCH_CAPCHA_ID"        // 2captcha: error 16, "You've provided incorrect captcha ID in the request" (2captcha error codes)
	CodeWrongIDFormat         = "ERROR_WRONG_ID_FORMAT"          // the id is not digits (CaptchaAI blog table)
	CodeEmptyAction           = "ERROR_EMPTY_ACTION"             // res.php without action (2captcha legacy list)
	CodeDuplicateReport       = "ERROR_DUPLICATE_REPORT"         // the captcha is reported already (2captcha legacy list)
	CodeReportNotRecorded     = "ERROR_REPORT_NOT_RECORDED"      // the report was not taken (2captcha legacy list)
	CodePageURL               = "ERROR_PAGEURL"                  // pageurl missing (CaptchaAI table; CaptchaAI-Examples INPUT_ERRORS)
	CodeGoogleKey             = "ERROR_GOOGLEKEY"                // the sitekey is blank or malformed (CaptchaAI blog table)
	CodeWrongGoogleKey        = "ERROR_WRONG_GOOGLEKEY"          // CaptchaAI-Examples solve.py, INPUT_ERRORS
	CodeBadTokenOrPageURL     = "ERROR_BAD_TOKEN_OR_PAGEURL"     // the sitekey and pageurl do not match (CaptchaAI table)
	CodeBadParameters         = "ERROR_BAD_PARAMETERS"           // CaptchaAI-Examples solve.py, INPUT_ERRORS
	CodeBadProxy              = "ERROR_BAD_PROXY"                // CaptchaAI-Examples solve.py, PROXY_ERRORS
	CodeProxyFormat           = "ERROR_PROXY_FORMAT"             // 2captcha legacy list
	CodeDomainNotAllowed      = "ERROR_DOMAIN_NOT_ALLOWED"       // 2captcha legacy list
	CodeZeroCaptchaFilesize   = "ERROR_ZERO_CAPTCHA_FILESIZE"    // the image is under 100 bytes (CaptchaAI table)
	CodeTooBigCaptchaFilesize = "ERROR_TOO_BIG_CAPTCHA_FILESIZE" // the image is over 1024 KB (CaptchaAI table)
	CodeWrongFileExtension    = "ERROR_WRONG_FILE_EXTENSION"     // not jpg, jpeg, gif or png (CaptchaAI table)
	CodeImageTypeNotSupported = "ERROR_IMAGE_TYPE_NOT_SUPPORTED" // the image type is not recognized (CaptchaAI table)
	CodeUpload                = "ERROR_UPLOAD"                   // the file or base64 cannot be read (CaptchaAI table)
)

// CaptchaUnknown reports whether code says the service does not know the
// captcha id it was asked about (never issued, or past its lifetime there):
// CaptchaAI answers ERROR_WRONG_CAPTCHA_ID, 2captcha ERROR_NO_SUCH_CAPCHA_ID.
func CaptchaUnknown(code string) bool {
	return code == CodeWrongCaptchaID || code == CodeNoSuchCaptchaID
}

// texts are the services' descriptions of their codes, the error_text a
// json=1 reply carries beside the code, paraphrasing the tables cited on
// the constants.
var texts = map[string]string{
	CodeWrongUserKey:          "You've provided key parameter value in incorrect format, it should contain 32 symbols.",
	CodeKeyDoesNotExist:       "The key you've provided does not exist.",
	CodeZeroBalance:           "You don't have free threads.",
	CodeNoSlotAvailable:       "No slot is available for your captcha now.",
	CodePageURL:               "pageurl parameter is missing in your request.",
	CodeZeroCaptchaFilesize:   "Image size is less than 100 bytes.",
	CodeTooBigCaptchaFilesize: "Image size is more than 1024 kB.",
	CodeWrongFileExtension:    "Image file has unsupported extension. Accepted extensions: jpg, jpeg, gif, png.",
	CodeImageTypeNotSupported: "Server can't recognize image file type.",
	CodeUpload:                "Server can't get file data from your POST-request.",
	CodeIPBanned:              "Your IP address is banned due to many frequent attempts to access the server using wrong authorization keys.",
	CodeBadTokenOrPageURL:     "The googlekey and pageurl pair is invalid.",
	CodeGoogleKey:             "sitekey in your request is blank or malformed.",
	CodeWrongGoogleKey:        "googlekey parameter is missing or has an incorrect format.",
	CodeBadParameters:         "Required parameters are missing or have wrong types.",
	CodeBadProxy:              "The proxy is marked BAD.",
	CodeProxyFormat:           "Proxy format is incorrect.",
	CodeMaxUserTurn:           "You made more than 60 requests to in.php within 3 seconds.",
	CodeCaptchaUnsolvable:     "We are unable to solve your captcha.",
	CodeWrongIDFormat:         "You've provided captcha ID in wrong format. The ID can contain numbers only.",
	CodeWrongCaptchaID:        "You've provided incorrect captcha ID.",
	CodeEmptyAction:           "Action parameter is missing or no value is provided.",
	CodeDuplicateReport:       "You have already reported this captcha.",
	CodeReportNotRecorded:     "The report was not recorded.",
	CodeTokenExpired:          "The challenge value you provided is expired.",
	CodeProxyConnectionFailed: "The captcha could not be loaded through the proxy.",
}

// Text returns the service's description of code, or "" for a code the
// table does not hold.
func Text(code string) string { return texts[code] }
