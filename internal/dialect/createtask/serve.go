// What a server of the dialect (the gateway, the emulator) reads of a
// request, one reading for both.

package createtask

import (
	"net/http"

	"github.com/captchaq/captchaq/internal/dialect/classic"
)

// Route says what a server of both dialects makes of a request for path
// (its last element, without the slash) by HTTP method: ok, whether path is
// a call of either dialect (a server answers any other 404); json, whether
// it is this dialect's; allow, when method is not one the call takes, the
// methods it does take, for the 405's Allow header ("" when method is one).
// in.php and res.php take GET and POST (a query or a form); this dialect's
// calls take POST only, each a JSON object posted.
func Route(path, method string) (ok, json bool, allow string) {
	switch {
	case IsPath(path):
		if method != http.MethodPost {
			return true, true, "POST"
		}
		return true, true, ""
	case path == classic.SubmitPath || path == classic.ResultPath:
		if method != http.MethodGet && method != http.MethodPost {
			return true, false, "GET, POST"
		}
		return true, false, ""
	}
	return false, false, ""
}

// ReadReport reads a report call's body: the task reported and the
// verdict, from the path (reportCorrect*: good, reportIncorrect*: bad) or
// from feedbackTask's result.invalid; or the error to answer: a body that
// names no task ERROR_NO_SUCH_CAPCHA_ID, a feedbackTask body without its
// result ERROR_INVALID_TASK_DATA.
func ReadReport(path string, body []byte) (TaskID, bool, *Error) {
	good, byPath := ReportVerdict(path)
	var id TaskID
	if byPath {
		var req TaskRequest
		if err := Decode(body, &req); err != nil {
			return 0, false, &Error{Code: CodeNoSuchCaptchaID, Description: err.Error()}
		}
		id = req.TaskID
	} else {
		var req FeedbackRequest
		if err := Decode(body, &req); err != nil {
			return 0, false, invalid("%s", err.Error())
		}
		if req.Result == nil {
			return 0, false, invalid("result: required, with result.invalid")
		}
		id, good = req.TaskID, !req.Result.Invalid
	}
	if id <= 0 {
		return 0, false, &Error{Code: CodeNoSuchCaptchaID, Description: "taskId: required"}
	}
	return id, good, nil
}

// ReportTaken is the reply to a report taken: status success
// (ReportAccepted) to a report call, the in.php/res.php word of it
// (classic.CodeReportRecorded) to feedbackTask.
func ReportTaken(path string) ReportResponse {
	if _, byPath := ReportVerdict(path); byPath {
		return ReportResponse{Status: ReportAccepted}
	}
	return ReportResponse{Message: classic.CodeReportRecorded}
}
