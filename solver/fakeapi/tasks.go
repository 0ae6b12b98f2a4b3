// The JSON task dialect (package createtask): createTask, getTaskResult,
// getBalance and the report calls, served from the same captchas, bill
// and faults as in.php and res.php.

package fakeapi

import (
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"

	"github.com/captchaq/captchaq/internal/dialect/classic"
	"github.com/captchaq/captchaq/internal/dialect/createtask"
)

// serveTasks serves one of the JSON dialect's calls (op), a POST of a JSON
// object whose clientKey is one of Config.Keys. Every reply is status 200
// with errorId, as the services answer (createtask.Write); the codes are
// in.php's and res.php's, in this dialect's words (createtask.FromClassic).
func (s *Server) serveTasks(w http.ResponseWriter, r *http.Request, op string) {
	fail := func(code, text string) {
		s.count(code)
		createtask.Write(w, createtask.Err(createtask.FromClassic(code), text))
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequest))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		fail(classic.CodeTooBigCaptchaFilesize, errorText(classic.CodeTooBigCaptchaFilesize))
		return
	case err != nil:
		fail(createtask.CodeInvalidTaskData, "the body could not be read")
		return
	}
	var env createtask.Envelope
	if err := createtask.Decode(body, &env); err != nil {
		fail(classic.CodeKeyDoesNotExist, err.Error())
		return
	}
	if code := s.checkKey(env.ClientKey); code != "" {
		fail(code, errorText(code))
		return
	}
	switch op {
	case createtask.PathCreateTask:
		req, method, params, terr := createtask.ReadCreateTask(body)
		if terr != nil {
			fail(terr.Code, terr.Description)
			return
		}
		c, code := s.accept(submission{key: env.ClientKey, method: method, params: params,
			callback: req.CallbackURL, tasks: true, from: remoteHost(r)})
		if code != "" {
			fail(code, errorText(code))
			return
		}
		id, _ := strconv.ParseInt(c.id, 10, 64)
		createtask.Write(w, createtask.CreateTaskResponse{TaskID: createtask.TaskID(id)})
	case createtask.PathGetTaskResult:
		var req createtask.TaskRequest
		if err := createtask.Decode(body, &req); err != nil || req.TaskID <= 0 {
			fail(classic.CodeWrongCaptchaID, "taskId: want the id createTask gave")
			return
		}
		c, state := s.poll(req.TaskID.String())
		switch state {
		case "":
			s.mu.Lock()
			res := s.taskResult(c)
			s.mu.Unlock()
			if res.Failed() {
				s.count(c.code)
			}
			createtask.Write(w, res)
		case classic.CodeNotReady:
			createtask.Write(w, createtask.TaskResult{Status: createtask.StatusProcessing})
		default:
			fail(state, errorText(state))
		}
	case createtask.PathGetBalance:
		s.mu.Lock()
		left := s.cfg.Balance - s.stats.Spent
		s.mu.Unlock()
		createtask.Write(w, createtask.BalanceResponse{Balance: createtask.Number(left)})
	default:
		s.reportTask(w, op, body, fail)
	}
}

// reportTask serves the report calls: the verdict from the path, or from
// feedbackTask's result.invalid (docs.capsolver.com/guide/api-feedback),
// recorded as res.php's reportgood and reportbad are.
func (s *Server) reportTask(w http.ResponseWriter, op string, body []byte, fail func(code, text string)) {
	id, good, rerr := createtask.ReadReport(op, body)
	if rerr != nil {
		fail(rerr.Code, rerr.Description)
		return
	}
	if code := s.report(id.String(), good); code != classic.CodeReportRecorded {
		fail(code, errorText(code))
		return
	}
	createtask.Write(w, createtask.ReportTaken(op))
}

// taskResult is getTaskResult's reply for c, ready: its solution in its
// type's shape, with what it cost, where it came from, its creation and
// end as UNIX times and one worker that tried it (anti-captcha.com/apidoc/
// methods/getTaskResult); or its code. Callers hold s.mu.
func (s *Server) taskResult(c *captcha) createtask.TaskResult {
	if c.code != "" {
		code := createtask.FromClassic(c.code)
		return createtask.TaskResult{ErrorReply: createtask.Err(code, errorText(c.code))}
	}
	sol, err := createtask.Solution(c.method, c.answer, c.userAgent)
	if err != nil {
		return createtask.TaskResult{ErrorReply: createtask.Err(createtask.CodeCaptchaUnsolvable, err.Error())}
	}
	return createtask.TaskResult{Status: createtask.StatusReady, Solution: sol, Cost: createtask.Number(c.price),
		IP: c.from, CreateTime: c.submitted.Unix(), EndTime: c.readyAt.Unix(), SolveCount: 1}
}

// remoteHost is the address a request came from, without its port.
func remoteHost(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
