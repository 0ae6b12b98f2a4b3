package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/captchaq/captchaq/internal/dialect/classic"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream"
)

// ReportSubject is where a gateway asks the workers to report a captcha's
// answer to the service (res.php reportgood/reportbad): only workers hold
// the service's key, so the gateway sends the task's id and the verdict,
// and a worker (ServeReports) looks the captcha up and reports it. Core
// NATS request and reply, outside the stream's subjects: a report is a
// call, not a record. The shipped nats.conf lets producers publish here
// and workers subscribe and answer.
const ReportSubject = "captchaq.reports"

// ReportQueue is the queue group of ServeReports: one worker answers each
// request.
const ReportQueue = "captchaq-reporters"

// reportRequest is a gateway's request on ReportSubject.
type reportRequest struct {
	Task      string `json:"task"`       // the captchaq task id
	CaptchaID string `json:"captcha_id"` // the service's id of its answer
	Good      bool   `json:"good"`
	// Gen is the generation (stream sequence) the caller's submission
	// got, when the gateway knows it: the captcha id is that
	// generation's answer, whatever was submitted under the id since. 0:
	// the latest submission under the id.
	Gen uint64 `json:"gen,omitempty"`
}

// reportReply is a worker's answer: the service's code (OK_REPORT_RECORDED
// when it took the report) and what went wrong otherwise.
type reportReply struct {
	Code string `json:"code"`
	Text string `json:"text,omitempty"`
}

// Reporter reports a captcha's answer to the service: *solver.Client.
type Reporter interface {
	Report(ctx context.Context, captchaID string, good bool) error
}

// ProviderReporter is a Reporter of several providers (a provider.Set):
// a report goes to the provider the task's outcome names.
type ProviderReporter interface {
	ReportOn(ctx context.Context, provider, method, captchaID string, good bool) error
}

// reportTimeout bounds one report: the lookup in the stream and the
// service's answer.
const reportTimeout = 15 * time.Second

// ServeReports answers the gateway's report requests (ReportSubject) on
// nc, a worker's connection, with r until stop: for each, it checks that
// the task has ended, reports the service's captcha id the request names
// (the gateway read it from the task's outcome, as a producer may), and
// replies the service's code. The service's key stays in r. An unknown
// task is answered ERROR_WRONG_CAPTCHA_ID and one not ended
// ERROR_REPORT_NOT_RECORDED, with nothing sent to the service.
//
// Workers may not read outcomes (they create no consumers), so the
// captcha id is the requester's word: anyone who may publish on
// ReportSubject (the shipped nats.conf: producers) can have any captcha of
// the account reported, as anyone with the service's key could; the
// gateway asks only for its callers' own solved tasks.
func ServeReports(ctx context.Context, nc *nats.Conn, top stream.Topology, r Reporter, log *slog.Logger) (stop func(), err error) {
	if log == nil {
		log = slog.Default()
	}
	c, err := stream.NewClient(ctx, nc, stream.ClientConfig{Topology: top, Name: "reporter"})
	if err != nil {
		return nil, fmt.Errorf("reports: %w", err)
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	bg, cancel := context.WithCancel(context.Background())
	sub, err := nc.QueueSubscribe(ReportSubject, ReportQueue, func(m *nats.Msg) {
		if m.Reply == "" {
			return
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			rctx, done := context.WithTimeout(bg, reportTimeout)
			defer done()
			b, _ := json.Marshal(report(rctx, c, r, m.Data, log))
			_ = m.Respond(b)
		}()
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("reports: subscribe %s: %w", ReportSubject, err)
	}
	return func() { _ = sub.Unsubscribe(); cancel(); wg.Wait() }, nil
}

// report serves one request. Logs name the task, never the key.
func report(ctx context.Context, c *stream.Client, r Reporter, data []byte, log *slog.Logger) reportReply {
	var req reportRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return reportReply{Code: classic.CodeBadParameters, Text: "report request: " + err.Error()}
	}
	if err := stream.ValidateID(req.Task); err != nil {
		return reportReply{Code: classic.CodeWrongCaptchaID, Text: err.Error()}
	}
	if !captchaIDShape(req.CaptchaID) {
		return reportReply{Code: classic.CodeWrongCaptchaID, Text: "report request: captcha_id: want the service's id, 1-128 letters, digits, '-', '_' or '.'"}
	}
	ti, err := c.TaskOf(ctx, req.Task)
	switch {
	case errors.Is(err, stream.ErrNotFound):
		return reportReply{Code: classic.CodeWrongCaptchaID, Text: "no such task"}
	case err != nil:
		log.Warn("report: read task", slog.String("task_id", req.Task), slog.Any("error", err))
		return reportReply{Code: classic.CodeReportNotRecorded, Text: "the task could not be read: retry"}
	case req.Gen == 0 && ti.Status != stream.TaskDone:
		return reportReply{Code: classic.CodeReportNotRecorded, Text: "the task has no answer yet"}
	}
	// The captcha reported is the one the task's own outcome names, never
	// only the request's word: any producer may send a request, and the
	// account's other answers are not its to report. With a generation,
	// that generation's outcome: a later submission under the id (any
	// producer may make one once the duplicate window has passed) is not
	// the caller's.
	var out stream.Outcome
	if req.Gen != 0 {
		out, err = c.WaitReceipt(ctx, stream.Receipt{ID: req.Task, Seq: req.Gen})
	} else {
		out, err = c.Wait(ctx, req.Task)
	}
	switch {
	case out.CaptchaID == "" && err != nil && !errors.Is(err, stream.ErrTokenExpired):
		log.Warn("report: read outcome", slog.String("task_id", req.Task), slog.Any("error", err))
		return reportReply{Code: classic.CodeReportNotRecorded, Text: "the task's outcome could not be read: retry"}
	case out.CaptchaID != req.CaptchaID:
		return reportReply{Code: classic.CodeWrongCaptchaID, Text: "the captcha id is not the task's answer"}
	}
	if pr, ok := r.(ProviderReporter); ok {
		err = pr.ReportOn(ctx, out.Provider, out.Method, req.CaptchaID, req.Good)
	} else {
		err = r.Report(ctx, req.CaptchaID, req.Good)
	}
	if err != nil {
		code := solver.CodeOf(err)
		if !strings.HasPrefix(code, "ERROR_") {
			code = classic.CodeReportNotRecorded
		}
		log.Warn("report: the service did not take it", slog.String("task_id", req.Task), slog.String("code", code))
		return reportReply{Code: code, Text: err.Error()}
	}
	return reportReply{Code: solver.CodeReportRecorded}
}

// captchaIDShape reports whether id has the shape of a service's captcha
// id: a classic service's digits, or a JSON provider's taskId, which
// CapSolver's are strings ("37223a89-06ed-442c-a0b8-22067b79c5b4",
// docs.capsolver.com/guide/api-createtask).
func captchaIDShape(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	return strings.Trim(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") == ""
}

// forwardReport serves res.php reportgood/reportbad: the caller's task, if
// solved, is reported by a worker (ServeReports) and its answer is the
// service's: OK_REPORT_RECORDED, or its code.
func (g *Gateway) forwardReport(ctx context.Context, c *caller, num string, good bool, rep replier) {
	code, text := g.report(ctx, c, num, good)
	if code == solver.CodeReportRecorded {
		rep.bare(code)
		return
	}
	rep.code(code, text)
}

// report has caller c's task num reported as good or bad by a worker
// (ServeReports), for both dialects, and returns the service's answer:
// OK_REPORT_RECORDED, or the code (and text) of why not.
func (g *Gateway) report(ctx context.Context, c *caller, num string, good bool) (code, text string) {
	a := g.state(ctx, c, num)
	switch a.code {
	case "":
	case classic.CodeWrongCaptchaID, classic.CodeWrongIDFormat, classic.CodeServerError:
		return a.code, a.text // not the caller's, or not readable now
	default:
		return classic.CodeReportNotRecorded, "the task has no answer to report: " + a.code
	}
	if a.captchaID == "" {
		return classic.CodeReportNotRecorded, "the task's outcome names no captcha of the service's"
	}
	b, _ := json.Marshal(reportRequest{Task: taskID(c.Producer, num), CaptchaID: a.captchaID, Good: good, Gen: a.gen})
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reportTimeout+5*time.Second)
	defer cancel()
	m, err := g.cfg.Conn.RequestWithContext(rctx, ReportSubject, b)
	if err != nil {
		if !errors.Is(err, nats.ErrNoResponders) {
			g.log.Warn("report", slog.String("producer", c.Producer), slog.Any("error", err))
		}
		return classic.CodeReportNotRecorded, "no worker took the report: retry, or the operator reports with `captchaq report good|bad TASK_ID`"
	}
	var rr reportReply
	if err := json.Unmarshal(m.Data, &rr); err != nil || rr.Code == "" {
		return classic.CodeReportNotRecorded, "a worker's answer could not be read"
	}
	return rr.Code, rr.Text
}
