// Serving the JSON dialect (package createtask): createTask,
// getTaskResult, getBalance and the report calls, through the same
// admission, keys, limits, submission and outcomes as in.php and res.php.

package gateway

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"strconv"
	"time"

	"github.com/captchaq/captchaq/captcha"
	"github.com/captchaq/captchaq/internal/dialect/createtask"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream"
)

// serveJSON serves one of the JSON dialect's calls (op), a POST of a JSON
// object whose clientKey is a gateway key. Every reply is status 200 with
// errorId, as the services answer.
func (g *Gateway) serveJSON(w http.ResponseWriter, r *http.Request, op, addr string, now time.Time) {
	fail := func(code, text string) { createtask.Write(w, createtask.Err(code, text)) }
	if g.admit.banned(addr, now) {
		unread(w)
		fail(createtask.CodeIPBlocked, "too many requests with keys the gateway does not know from this address: wait")
		return
	}
	known, release, refusal := g.admitRequest(w, r, addr, now, "")
	defer release()
	if refusal != refusedNone {
		unread(w)
		fail(createtask.CodeTooMuchRequests, "too many requests from this address at once: wait")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxRequest)
	body, err := io.ReadAll(r.Body)
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig) && op == createtask.PathCreateTask:
		known("")
		// Only an image makes a body this large (as on in.php).
		fail(createtask.CodeTooBigCaptchaFilesize, fmt.Sprintf("the request is over %d bytes: an image is at most %d", tooBig.Limit, captcha.MaxImageSize))
		return
	case errors.Is(err, errTooSlow):
		tooSlow(w)
		return
	case err != nil:
		known("")
		fail(createtask.CodeInvalidTaskData, "the body could not be read: "+err.Error())
		return
	}
	var env createtask.Envelope
	if err := createtask.Decode(body, &env); err != nil {
		// No key could be read, so none was guessed: the address's count
		// of unknown keys (its ban) is left alone, so that a client's
		// malformed body does not lock out its address's valid keys. The
		// code is the services' for a key they cannot find.
		fail(createtask.CodeKeyDoesNotExist, err.Error())
		return
	}
	if !known(env.ClientKey) {
		// The services' answer to a key they do not know
		// (anti-captcha.com/apidoc/errors, id 1).
		fail(createtask.CodeKeyDoesNotExist, "clientKey: no such gateway key")
		return
	}
	c := g.callers[sha256.Sum256([]byte(env.ClientKey))]
	// From here on, in the shape the key's clients read.
	fail = func(code, text string) { createtask.Write(w, c.Client.Err(code, text)) }
	ctx := r.Context()
	if op == createtask.PathCreateTask {
		g.createTask(ctx, c, body, remoteHost(r), w)
		return
	}
	if !c.polls.Allow(g.cfg.Now()) {
		fail(createtask.CodeTooMuchRequests, "more than the allowed requests within the window: poll less often")
		return
	}
	switch op {
	case createtask.PathGetTaskResult:
		var req createtask.TaskRequest
		if err := createtask.Decode(body, &req); err != nil {
			fail(createtask.CodeNoSuchCaptchaID, err.Error())
			return
		}
		if req.TaskID <= 0 {
			fail(createtask.CodeNoSuchCaptchaID, "taskId: required")
			return
		}
		createtask.Write(w, taskResult(c.Client, req.TaskID, g.state(ctx, c, req.TaskID.String())))
	case createtask.PathGetBalance:
		// What in.php's getbalance answers (balance): the gateway holds no
		// money figure, only the key's room.
		createtask.Write(w, createtask.BalanceResponse{Balance: createtask.Number(g.balance(c))})
	default:
		g.reportJSON(ctx, c, op, body, w)
	}
}

// createTask submits the task of a createTask body for c and answers its
// taskId.
func (g *Gateway) createTask(ctx context.Context, c *caller, body []byte, from string, w http.ResponseWriter) {
	fail := func(code, text string) { createtask.Write(w, c.Client.Err(code, text)) }
	if !c.submits.Allow(g.cfg.Now()) {
		fail(createtask.CodeTooMuchRequests, "more than the allowed createTask requests within the window: wait")
		return
	}
	req, method, params, terr := createtask.ReadCreateTask(body)
	if terr != nil {
		fail(terr.Code, terr.Description)
		return
	}
	t := stream.Task{Method: method, Params: params, Priority: c.Priority}
	num, code, text := g.enqueue(ctx, c, submission{task: t, callback: callback{url: req.CallbackURL, field: "callbackUrl", json: true},
		from: from, draw: newTaskID, narrow: true})
	if code != "" {
		fail(createtask.FromClassic(code), createtask.Describe(text))
		return
	}
	id, _ := strconv.ParseInt(num, 10, 64)
	createtask.Write(w, createReply{TaskID: c.Client.ID(createtask.TaskID(id))})
}

// createReply is createTask's reply (createtask.CreateTaskResponse) with
// its taskId in the shape the key's clients read (createtask.Family.ID),
// and its status null: CapSolver answers createTask with a status, "null
// or ready" (docs.capsolver.com/guide/api-createtask), and its Python SDK
// reads it before it polls (capsolver-python, src/capsolver/capsolver.py
// solve: r['status']); the other providers' clients read no status there.
type createReply struct {
	createtask.ErrorReply
	TaskID any     `json:"taskId"`
	Status *string `json:"status"`
}

// newTaskID draws a JSON task's id: a number from 1 to
// createtask.MaxTaskID32, which a client that keeps taskId in a 32-bit
// integer reads, as a JavaScript client keeps it exactly. So few ids can
// meet one the stream still keeps: enqueue draws again until the stream
// keeps no task of the key under it (submission.narrow). It is digits, so
// res.php answers for it too.
func newTaskID() string {
	n, _ := rand.Int(rand.Reader, big.NewInt(int64(createtask.MaxTaskID32)))
	return n.Add(n, big.NewInt(1)).String()
}

// namedResult is getTaskResult's reply naming its task, as CapSolver's
// reply does (docs.capsolver.com/guide/api-gettaskresult: "taskId" beside
// "status"): a callbackUrl receiver, which gets this reply as its body,
// tells its tasks apart by it. (createtask.TaskResult leaves taskId out:
// CapSolver's own are not numbers.) The id is in the shape the key's
// clients read (createtask.Family.ID).
type namedResult struct {
	createtask.TaskResult
	TaskID any `json:"taskId,omitempty"`
}

// taskResult is getTaskResult's reply for task id in state a, naming it,
// in the shape f's clients read.
func taskResult(f createtask.Family, id createtask.TaskID, a answer) namedResult {
	r := resultOf(a)
	r.ErrorReply = f.Shape(r.ErrorReply)
	return namedResult{TaskResult: r, TaskID: f.ID(id)}
}

// resultOf is the reply for a task's state a: processing while it is not
// done, the solution in its type's shape once solved, and for a dead task
// the service's code, as res.php answers it (createtask.FromClassic).
func resultOf(a answer) createtask.TaskResult {
	switch a.code {
	case notReady:
		return createtask.TaskResult{Status: createtask.StatusProcessing}
	case "":
	default:
		return createtask.TaskResult{ErrorReply: createtask.Err(createtask.FromClassic(a.code), a.text)}
	}
	sol, err := createtask.Solution(a.method, a.value, a.ua)
	switch {
	case errors.Is(err, createtask.ErrNoSolutionShape):
		// Solved and paid (through in.php): calling it unsolvable would
		// have the caller submit, and pay, again.
		return createtask.TaskResult{ErrorReply: createtask.Err(createtask.CodeTaskNotSupported,
			"solved, but "+err.Error()+": res.php?action=get with this id answers it")}
	case err != nil:
		return createtask.TaskResult{ErrorReply: createtask.Err(createtask.CodeCaptchaUnsolvable, "solved, but "+err.Error())}
	}
	r := createtask.TaskResult{Status: createtask.StatusReady, Solution: sol, SolveCount: createtask.Number(a.attempts), IP: a.from}
	if !a.created.IsZero() {
		r.CreateTime = a.created.Unix()
	}
	if !a.ended.IsZero() {
		r.EndTime = a.ended.Unix()
	}
	return r
}

// reportJSON serves the report calls: the verdict from the path, or from
// feedbackTask's result.invalid, reported as res.php's reportgood and
// reportbad are (Gateway.report).
func (g *Gateway) reportJSON(ctx context.Context, c *caller, op string, body []byte, w http.ResponseWriter) {
	id, good, rerr := createtask.ReadReport(op, body)
	if rerr != nil {
		createtask.Write(w, c.Client.Err(rerr.Code, rerr.Description))
		return
	}
	if code, text := g.report(ctx, c, id.String(), good); code != solver.CodeReportRecorded {
		createtask.Write(w, c.Client.Err(createtask.FromClassic(code), text))
		return
	}
	createtask.Write(w, createtask.ReportTaken(op))
}
