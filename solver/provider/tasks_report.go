// The JSON dialect's reports: each provider documents its own calls, and
// most have one for a bad answer only, by kind of captcha.

package provider

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/captchaq/captchaq/captcha"
	"github.com/captchaq/captchaq/internal/dialect/createtask"
	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
)

// Report tells the provider that the answer to task id, a captcha of
// method, was good or bad, with the call the provider documents for it:
//
//   - 2captcha API v2 (api.2captcha.com, api.rucaptcha.com): reportCorrect
//     and reportIncorrect, any method (2captcha.com/api-docs/report-correct,
//     /api-docs/report-incorrect);
//   - CapSolver (api.capsolver.com): feedbackTask, the verdict in
//     result.invalid (docs.capsolver.com/guide/api-feedback);
//   - CapMonster Cloud (api.capmonster.cloud): bad answers only,
//     reportIncorrectImageCaptcha, reportIncorrectRecaptcha, and
//     reportIncorrectTokenCaptcha for the other tokens
//     (docs.capmonster.cloud/docs/api/bad-tokens);
//   - Anti-Captcha, and any other host (the dialect is Anti-Captcha's, and
//     captchaq's gateway and emulator serve its calls):
//     reportIncorrectImageCaptcha, reportIncorrectRecaptcha,
//     reportCorrectRecaptcha, reportIncorrectHcaptcha
//     (anti-captcha.com/apidoc/methods/reportIncorrectImageCaptcha, …).
//
// A verdict the provider has no call for is ERROR_REPORT_NOT_RECORDED,
// with nothing sent.
func (c *TasksClient) Report(ctx context.Context, method, id string, good bool) error {
	if !validTaskID(id) {
		return notRecorded(fmt.Errorf("report: %q is not a task id", id))
	}
	path := reportPath(c.cfg.BaseURL, method, good)
	if path == "" {
		verdict := "bad"
		if good {
			verdict = "good"
		}
		return notRecorded(fmt.Errorf("report: the provider has no call for a %s %s answer", verdict, method))
	}
	tid := wireTaskID(id)
	var body any = taskRequest{ClientKey: c.cfg.APIKey, TaskID: tid}
	if path == createtask.PathFeedbackTask {
		body = struct {
			taskRequest
			Result *createtask.FeedbackResult `json:"result"`
		}{taskRequest{ClientKey: c.cfg.APIKey, TaskID: tid}, &createtask.FeedbackResult{Invalid: !good}}
	}
	var reply createtask.ReportResponse
	if err := c.call(ctx, path, body, &reply); err != nil {
		return err
	}
	if reply.ErrorID != 0 {
		return c.codeError(path, reply.ErrorReply, id)
	}
	if path != createtask.PathFeedbackTask && reply.Status != createtask.ReportAccepted {
		return &solver.Error{Code: solver.CodeBadReply, Class: retry.Transient, Op: path,
			Err: fmt.Errorf("report: status %q, want %q", c.scrub(reply.Status), createtask.ReportAccepted)}
	}
	return nil
}

// reportPath is the call of the provider at base for a good or bad answer
// of method; "" when it has none.
func reportPath(base, method string, good bool) string {
	on := func(domain string) bool { return onHost(base, domain) }
	image := method == captcha.MethodBase64 || method == captcha.MethodPost
	switch {
	case on("2captcha.com") || on("rucaptcha.com"):
		if good {
			return createtask.PathReportCorrect
		}
		return createtask.PathReportIncorrect
	case on("capsolver.com"):
		return createtask.PathFeedbackTask
	case good:
		if on("capmonster.cloud") || method != captcha.MethodReCaptcha {
			return ""
		}
		return createtask.PathReportCorrectRecaptcha
	case image:
		return createtask.PathReportIncorrectImage
	case method == captcha.MethodReCaptcha:
		return createtask.PathReportIncorrectRecaptcha
	case on("capmonster.cloud"):
		return createtask.PathReportIncorrectToken
	case method == "hcaptcha":
		return createtask.PathReportIncorrectHcaptcha
	}
	return ""
}

// onHost reports whether base's host is one of domains or under one.
func onHost(base string, domains ...string) bool {
	host := base
	if u, err := url.Parse(base); err == nil {
		host = u.Hostname()
	}
	for _, d := range domains {
		if host == d || strings.HasSuffix(host, "."+d) {
			return true
		}
	}
	return false
}
