package createtask_test

import (
	"net/http"
	"testing"

	"github.com/captchaq/captchaq/internal/dialect/classic"
	"github.com/captchaq/captchaq/internal/dialect/createtask"
)

// TestRoute checks which calls a server of both dialects serves, and by
// which HTTP methods: in.php and res.php by GET and POST, this dialect's
// calls by POST only, anything else not at all.
func TestRoute(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		path, method string
		ok, json     bool
		allow        string
	}{
		{classic.SubmitPath, http.MethodGet, true, false, ""},
		{classic.ResultPath, http.MethodPost, true, false, ""},
		{classic.SubmitPath, http.MethodPut, true, false, "GET, POST"},
		{classic.ResultPath, http.MethodOptions, true, false, "GET, POST"},
		{createtask.PathCreateTask, http.MethodPost, true, true, ""},
		{createtask.PathFeedbackTask, http.MethodPost, true, true, ""},
		{createtask.PathGetTaskResult, http.MethodGet, true, true, "POST"},
		{createtask.PathReportCorrect, http.MethodOptions, true, true, "POST"},
		{"index.php", http.MethodGet, false, false, ""},
		{"", http.MethodPost, false, false, ""},
	} {
		ok, json, allow := createtask.Route(c.path, c.method)
		if ok != c.ok || json != c.json || allow != c.allow {
			t.Errorf("Route(%q, %s) = %v, %v, %q; want %v, %v, %q", c.path, c.method, ok, json, allow, c.ok, c.json, c.allow)
		}
	}
}

// TestReadReport checks how a report call is read: the verdict from the
// path, or from feedbackTask's result.invalid, and the error a server of
// the dialect answers to a body that names no task.
func TestReadReport(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		path, body string
		id         createtask.TaskID
		good       bool
		code       string
	}{
		{createtask.PathReportCorrect, `{"clientKey":"k","taskId":7}`, 7, true, ""},
		{createtask.PathReportIncorrectImage, `{"clientKey":"k","taskId":"8"}`, 8, false, ""},
		{createtask.PathFeedbackTask, `{"clientKey":"k","taskId":9,"result":{"invalid":true}}`, 9, false, ""},
		{createtask.PathFeedbackTask, `{"clientKey":"k","taskId":9,"result":{"invalid":false}}`, 9, true, ""},
		{createtask.PathReportCorrect, `{"taskId":[]}`, 0, false, createtask.CodeNoSuchCaptchaID},
		{createtask.PathReportIncorrect, `{"clientKey":"k"}`, 0, false, createtask.CodeNoSuchCaptchaID},
		{createtask.PathFeedbackTask, `{"clientKey":"k","taskId":9}`, 0, false, createtask.CodeInvalidTaskData},
		{createtask.PathFeedbackTask, `{"taskId":9,"result":1}`, 0, false, createtask.CodeInvalidTaskData},
		{createtask.PathFeedbackTask, `{"clientKey":"k","result":{"invalid":true}}`, 0, false, createtask.CodeNoSuchCaptchaID},
	} {
		id, good, err := createtask.ReadReport(c.path, []byte(c.body))
		code := ""
		if err != nil {
			code = err.Code
			if err.Description == "" {
				t.Errorf("ReadReport(%s, %s): error %s without a description", c.path, c.body, code)
			}
		}
		if code != c.code || (code == "" && (id != c.id || good != c.good)) {
			t.Errorf("ReadReport(%s, %s) = %v, %v, %v; want %v, %v, %q", c.path, c.body, id, good, err, c.id, c.good, c.code)
		}
	}
}

// TestReportTaken checks the reply to a report taken: the report calls
// answer status success, feedbackTask the in.php/res.php word of it.
func TestReportTaken(t *testing.T) {
	t.Parallel()
	if got := createtask.ReportTaken(createtask.PathReportIncorrectRecaptcha); got != (createtask.ReportResponse{Status: createtask.ReportAccepted}) {
		t.Errorf("ReportTaken(report path) = %+v", got)
	}
	if got := createtask.ReportTaken(createtask.PathFeedbackTask); got != (createtask.ReportResponse{Message: classic.CodeReportRecorded}) {
		t.Errorf("ReportTaken(feedbackTask) = %+v", got)
	}
}
