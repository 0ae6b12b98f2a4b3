// Failure on demand: a task file says which of its tasks fail, and how,
// through the site key it gives the emulator. The codes are the service's
// own (solver/testdata/service/replies.json cites where each is documented):
// ERROR_WRONG_GOOGLEKEY from in.php (CaptchaAI-Examples
// articles/how-to-solve-*-using-api/python/solve.py), and
// ERROR_CAPTCHA_UNSOLVABLE from res.php (the same examples).

package fakeapi

import (
	"strconv"
	"strings"

	"github.com/captchaq/captchaq/internal/dialect/classic"
)

// Demo site keys. Put one as a task's site key (sitekey, googlekey, gt or
// captcha_id, whichever its method takes) and the emulator answers:
//
//   - DemoPermFail ("perm-fail"): ERROR_WRONG_GOOGLEKEY at in.php, every
//     time: a permanent error, dead-lettered on the first attempt.
//   - DemoUnsolvable ("unsolvable"): ERROR_CAPTCHA_UNSOLVABLE from res.php,
//     every time: retried until the attempts run out.
//   - "flaky-N" (N = 1…99): ERROR_CAPTCHA_UNSOLVABLE the first N times a
//     captcha with that site key and page URL is submitted, then an answer.
const (
	DemoPermFail   = "perm-fail"
	DemoUnsolvable = "unsolvable"
	demoFlaky      = "flaky-"
)

// siteKeyParams are the parameters that hold a captcha's site key, by method.
var siteKeyParams = []string{"sitekey", "googlekey", "gt", "captcha_id"}

// demoFault returns the code in.php answers at once (inCode) or res.php
// answers when the captcha is ready (pollCode) for a demo site key; both
// empty for any other task. The caller holds s.mu.
func (s *Server) demoFault(params map[string]string) (inCode, pollCode string) {
	for _, p := range siteKeyParams {
		v := params[p]
		switch {
		case v == DemoPermFail:
			return classic.CodeWrongGoogleKey, ""
		case v == DemoUnsolvable:
			return "", classic.CodeCaptchaUnsolvable
		case strings.HasPrefix(v, demoFlaky):
			n, err := strconv.Atoi(strings.TrimPrefix(v, demoFlaky))
			if err != nil || n < 1 || n > 99 {
				continue
			}
			if s.flaky == nil {
				s.flaky = map[string]int{}
			}
			k := v + " " + params["pageurl"]
			s.flaky[k]++
			if s.flaky[k] <= n {
				return "", classic.CodeCaptchaUnsolvable
			}
			return "", ""
		}
	}
	return "", ""
}
