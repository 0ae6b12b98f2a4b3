package solver

import (
	"testing"

	"github.com/captchaq/captchaq/retry"
)

// designTable is the table of codes and classes the design chose, written
// out again so a change to the classification is a change to this test too.
var designTable = map[string]retry.Class{
	"CAPCHA_NOT_READY":  retry.Poll,
	"CAPTCHA_NOT_READY": retry.Poll,

	"ERROR_NO_SLOT_AVAILABLE": retry.Capacity,
	"ERROR_ZERO_BALANCE":      retry.Capacity,
	"MAX_USER_TURN":           retry.Capacity,
	"ERROR: 1001":             retry.Capacity,
	"ERROR: 1002":             retry.Capacity,
	"ERROR: 1003":             retry.Capacity,
	"ERROR: 1004":             retry.Fatal,
	"ERROR: 1005":             retry.Capacity,

	"HTTP_429": retry.Capacity,

	"HTTP_500":                    retry.Transient,
	"HTTP_502":                    retry.Transient,
	"HTTP_503":                    retry.Transient,
	"HTTP_504":                    retry.Transient,
	"HTTP_408":                    retry.Transient,
	"HTTP_400":                    retry.Transient,
	"HTTP_413":                    retry.Transient,
	"HTTP_418":                    retry.Transient,
	"BAD_REPLY":                   retry.Transient,
	"NETWORK":                     retry.Transient,
	"UNREACHABLE":                 retry.Capacity,
	"ERROR_SERVER_ERROR":          retry.Transient,
	"ERROR_INTERNAL_SERVER_ERROR": retry.Transient,
	"ERROR_TOO_MUCH_REQUESTS":     retry.Capacity,

	"ERROR_CAPTCHA_UNSOLVABLE":      retry.Resubmit,
	"ERROR_BAD_DUPLICATES":          retry.Resubmit,
	"ERROR_WRONG_CAPTCHA_ID":        retry.Resubmit,
	"ERROR_TOKEN_EXPIRED":           retry.Permanent,
	"ERROR_PROXY_CONNECTION_FAILED": retry.Resubmit,
	"LOCAL_TIMEOUT":                 retry.Resubmit,
	"POLL_LIMIT":                    retry.Resubmit,

	"ERROR_PAGEURL":                  retry.Permanent,
	"ERROR_GOOGLEKEY":                retry.Permanent,
	"ERROR_WRONG_GOOGLEKEY":          retry.Permanent,
	"ERROR_BAD_TOKEN_OR_PAGEURL":     retry.Permanent,
	"ERROR_BAD_PARAMETERS":           retry.Permanent,
	"ERROR_PROXY_FORMAT":             retry.Permanent,
	"ERROR_BAD_PROXY":                retry.Permanent,
	"ERROR_ZERO_CAPTCHA_FILESIZE":    retry.Permanent,
	"ERROR_TOO_BIG_CAPTCHA_FILESIZE": retry.Permanent,
	"ERROR_WRONG_FILE_EXTENSION":     retry.Permanent,
	"ERROR_IMAGE_TYPE_NOT_SUPPORTED": retry.Permanent,
	"ERROR_UPLOAD":                   retry.Permanent,
	"ERROR_CAPTCHAIMAGE_BLOCKED":     retry.Permanent,
	"ERROR_WRONG_ID_FORMAT":          retry.Permanent,
	"ERROR_EMPTY_ACTION":             retry.Permanent,
	"ERROR_DUPLICATE_REPORT":         retry.Permanent,
	"ERROR_REPORT_NOT_RECORDED":      retry.Permanent,
	"INVALID_PARAMS":                 retry.Permanent,

	// A wrong base URL or a proxy in the way: every call fails alike.
	"HTTP_301": retry.Fatal,
	"HTTP_302": retry.Fatal,
	"HTTP_303": retry.Fatal,
	"HTTP_307": retry.Fatal,
	"HTTP_308": retry.Fatal,
	"HTTP_401": retry.Fatal,
	"HTTP_404": retry.Fatal,
	"HTTP_405": retry.Fatal,
	"HTTP_407": retry.Fatal,
	"HTTP_410": retry.Fatal,

	"ERROR_WRONG_USER_KEY":     retry.Fatal,
	"ERROR_KEY_DOES_NOT_EXIST": retry.Fatal,
	"IP_BANNED":                retry.Fatal,
	"ERROR_IP_NOT_ALLOWED":     retry.Fatal,
	"ERROR_IP_BLOCKED":         retry.Fatal,
	"ERROR_NO_SUCH_CAPCHA_ID":  retry.Resubmit,
	"ERROR_DOMAIN_NOT_ALLOWED": retry.Permanent,

	// Not in the table: unknown codes are transient (see Classify).
	"ERROR_SOMETHING_NEW": retry.Transient,
	"":                    retry.Transient,
	"ERROR: 1006":         retry.Transient,
	"ERROR: 10011":        retry.Capacity, // "ERROR: 1001" with a suffix
}

func TestClassifyEveryCode(t *testing.T) {
	t.Parallel()
	for code, want := range designTable {
		if got := Classify(code); got != want {
			t.Errorf("Classify(%q) = %s, want %s", code, got, want)
		}
	}
}

// TestEveryKnownCodeIsTested fails when a code is added to the classification
// without a line in designTable.
func TestEveryKnownCodeIsTested(t *testing.T) {
	t.Parallel()
	for _, code := range knownCodes() {
		if _, ok := designTable[code]; !ok {
			t.Errorf("code %s is classified but not in designTable", code)
		}
	}
}
