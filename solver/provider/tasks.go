// A client of the JSON task dialect (createTask/getTaskResult: Anti-Captcha,
// CapMonster Cloud, CapSolver, 2captcha API v2, captchaq's own gateway),
// for a provider whose dialect is "tasks". The dialect's facts (types, task
// names, solution shapes, codes) are package createtask's; this file only
// sends them and waits.

package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/captchaq/captchaq/internal/dialect/createtask"
	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
)

// CostReported is the cost basis of a solve whose provider reported its
// cost (getTaskResult's cost).
const CostReported = "reported"

// Client is what a Set asks of a provider's client: a *solver.Client (the
// classic dialect) or a *TasksClient (the JSON one).
type Client interface {
	solver.Solver
	// Unreachable reports since when the service has not answered, and
	// what failed last; the zero time while it answers.
	Unreachable() (time.Time, error)
	// SolveTime is how long a captcha of kind takes, at quantile q, and
	// whether the client learned it.
	SolveTime(kind string, q float64) (time.Duration, bool)
}

var (
	_ Client = (*solver.Client)(nil)
	_ Client = (*TasksClient)(nil)
)

// TasksConfig configures a TasksClient; BaseURL and APIKey are required.
type TasksConfig struct {
	// BaseURL is the API's root: createTask is POSTed to BaseURL/createTask.
	BaseURL string
	// APIKey is the clientKey. It is sent only in request bodies and never
	// appears in errors.
	APIKey string
	// HTTPClient sends the requests. Default: one with
	// solver.DefaultHTTPTimeout that follows no redirect.
	HTTPClient *http.Client
	// Timing says when getTaskResult is called: the classic client's
	// Timing (first polls, interval, MaxCalls, adaptive or Fixed), its
	// zero value the production timing. Its PollPace, batching and
	// MaxWait do not apply: a task the provider accepted is polled until
	// its answer, an error code, MaxTaskCalls calls, or the caller's ctx
	// ends.
	Timing solver.Timing
	// Scale multiplies the poll times when Timing.Scale is zero
	// (solver.Timing.Scale). Zero means 1.
	Scale float64
	// MinPollGap is the least time from a getTaskResult reply to the
	// next call of the same task: the provider's published pace
	// (PollGap). Zero: none but the schedule's.
	MinPollGap time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// TasksClient solves captchas through a provider of the JSON task dialect:
// createTask, then getTaskResult on the classic client's learned poll
// schedule (solver.PollSchedule: the catalogue's first poll of the kind
// until it learned the kind from its own answers, then the schedule
// planned from their distribution), a call of a task no sooner than
// MinPollGap after its last reply, and once the plan is spent every poll
// interval, until ready, an error code, MaxTaskCalls calls of the task
// (solver.CodePollLimit), or ctx ends. What it learns is this provider's
// alone. A task the provider accepted is polled through any failure of
// the calls (it is paid for). It is safe for concurrent use.
type TasksClient struct {
	cfg   TasksConfig
	http  *http.Client
	sched *solver.PollSchedule

	mu       sync.Mutex
	since    time.Time // the first call of an outage that failed; zero: it answers
	last     string
	probing  bool          // a probe is under way
	probeAt  time.Time     // during an outage, when the next probe is due
	probeGap time.Duration // the gap after the last probe that failed
}

// The probe schedule of an outage (the classic client's, solver's
// probeFirst and probeMax): a createTask after a failed call first asks
// getBalance, which costs nothing; if that fails too, the next probe is a
// second later, then at doubling gaps up to probeMaxGap.
const (
	probeFirstGap = time.Second
	probeMaxGap   = 15 * time.Second
)

// NewTasksClient returns a client of the provider at cfg.BaseURL.
func NewTasksClient(cfg TasksConfig) (*TasksClient, error) {
	if cfg.APIKey == "" {
		return nil, errors.New("provider: no API key")
	}
	if err := checkBaseURL(cfg.BaseURL); err != nil {
		return nil, fmt.Errorf("provider: base URL: %w", err)
	}
	cfg.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Timing.Scale <= 0 {
		cfg.Timing.Scale = cfg.Scale
	}
	c := &TasksClient{cfg: cfg, http: cfg.HTTPClient, sched: solver.NewPollSchedule(cfg.Timing)}
	if c.http == nil {
		c.http = &http.Client{Timeout: solver.DefaultHTTPTimeout,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	return c, nil
}

// Solve creates the task (or resumes req.CaptchaID, a taskId) and polls
// getTaskResult until its answer.
func (c *TasksClient) Solve(ctx context.Context, req solver.Request) (solver.Answer, error) {
	task, kind, err := createtask.TaskFor(req.Method, req.Params)
	if err != nil {
		return solver.Answer{}, &solver.Error{Code: solver.CodeInvalidParams, Class: retry.Permanent, Op: "validate", Err: err}
	}
	id, at := req.CaptchaID, req.Submitted
	if id == "" {
		var done *taskResult
		if id, done, err = c.create(ctx, task); err != nil {
			return solver.Answer{}, err
		}
		at = c.cfg.Now()
		solver.TellAccepted(ctx, solver.Accepted{ID: id, At: at})
		if done != nil {
			return c.answer(kind, id, *done)
		}
	} else {
		if at.IsZero() {
			at = c.cfg.Now()
		}
		solver.TellAccepted(ctx, solver.Accepted{ID: id, At: at, Resumed: true})
	}
	return c.poll(ctx, solver.Kind(req.Method, req.Params), kind, id, at, req.CaptchaID != "")
}

// poll asks getTaskResult for task id, of kind (createtask's kind of
// it), submitted at at, on the kind's learned schedule, and learns the
// window its answer became ready in. It asks at most MaxTaskCalls times:
// a call that never reached the service (CodeUnreachable) is not one.
// A resumed task (resumed) counts as asked the calls a worker polling it
// since at would have made (callsBy), up to all but one: the calls
// before the resume are unknown, and a restart does not give the
// provider's limit anew.
func (c *TasksClient) poll(ctx context.Context, k string, kind createtask.Kind, id string, at time.Time, resumed bool) (solver.Answer, error) {
	plan := c.sched.Plan(k)
	var notReady time.Duration // the latest offset at which the task was processing
	var sent time.Time         // when the last call was sent; zero: none yet
	var replied time.Time      // when it ended
	asked := 0                 // the calls that reached the service
	before := 0                // of them, the calls reckoned made before a resume
	if resumed {
		before = min(c.callsBy(k, plan, c.cfg.Now().Sub(at)), MaxTaskCalls-1)
		asked = before
	}
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for i := 0; ; i++ {
		if asked == MaxTaskCalls {
			return solver.Answer{}, &solver.Error{Code: solver.CodePollLimit, Class: solver.Classify(solver.CodePollLimit),
				Op: "getTaskResult", CaptchaID: id, Err: fmt.Errorf("no answer after %d getTaskResult calls, the providers' limit per task%s", asked, reckoned(before))}
		}
		due := sent.Add(c.sched.Interval(k)) // past the plan: every interval
		if i < len(plan) {
			due = at.Add(plan[i])
			if i > 0 {
				// Behind the plan (a slow call), its spacing is kept
				// instead of making up the missed polls in a burst.
				due = latest(due, sent.Add(plan[i]-plan[i-1]))
			}
		}
		if !sent.IsZero() {
			// The providers' word is to wait after a reply.
			due = latest(due, replied.Add(c.cfg.MinPollGap))
		}
		t.Reset(due.Sub(c.cfg.Now()))
		select {
		case <-ctx.Done():
			return solver.Answer{}, fmt.Errorf("provider: wait for task %s: %w", id, ctx.Err())
		case <-t.C:
		}
		sent = c.cfg.Now()
		var r taskResult
		err := c.call(ctx, createtask.PathGetTaskResult, taskRequest{ClientKey: c.cfg.APIKey, TaskID: wireTaskID(id)}, &r)
		replied = c.cfg.Now()
		if solver.CodeOf(err) != solver.CodeUnreachable {
			asked++
		}
		if err != nil {
			continue // paid for: polled again, whatever failed
		}
		// The service answered somewhere between sending and receiving.
		seen := sent.Add(replied.Sub(sent) / 2).Sub(at)
		if r.Failed() {
			return solver.Answer{}, c.codeError("getTaskResult", r.ErrorReply, id)
		}
		if r.Status != createtask.StatusReady {
			notReady = max(notReady, seen)
			continue
		}
		c.sched.Observe(k, notReady, seen)
		return c.answer(kind, id, r)
	}
}

// callsBy is the most getTaskResult calls poll makes of a task of kind k
// in the elapsed time since its submission: the plan's calls due by
// then, and one every poll interval past the plan's last.
func (c *TasksClient) callsBy(k string, plan []time.Duration, elapsed time.Duration) int {
	n, last := 0, time.Duration(0)
	for _, p := range plan {
		if p > elapsed {
			return n
		}
		n, last = n+1, p
	}
	if gap := c.sched.Interval(k); gap > 0 {
		n += int((elapsed - last) / gap)
	}
	return n
}

// reckoned says how many calls of a resumed task were reckoned made
// before its resume, "" when none were.
func reckoned(before int) string {
	if before == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d of them reckoned made before the resume, from the task's age)", before)
}

// latest is the later of two times.
func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// answer is the Answer of task id, of kind, from r, a reply whose status
// is ready.
func (c *TasksClient) answer(kind createtask.Kind, id string, r taskResult) (solver.Answer, error) {
	sol, ua, err := createtask.Answer(kind, r.Solution)
	if err != nil {
		return solver.Answer{}, &solver.Error{Code: solver.CodeBadReply, Class: retry.Resubmit, Op: "getTaskResult", CaptchaID: id, Err: err}
	}
	ans := solver.Answer{Solution: sol, UserAgent: ua, CaptchaID: id}
	if cost, ok := r.cost(); ok {
		ans.Cost, ans.CostBasis = cost, CostReported
	}
	return ans, nil
}

// taskResult is a getTaskResult reply whose cost is read apart: a cost
// that is no number does not cost the task the answer it paid for.
type taskResult struct {
	createtask.TaskResult
	Cost json.RawMessage `json:"cost,omitempty"`
}

// cost is the cost the provider reported, when it reported one that is a
// finite number above 0; else the caller states the price.
func (r taskResult) cost() (float64, bool) {
	var n createtask.Number
	if len(r.Cost) == 0 || n.UnmarshalJSON(r.Cost) != nil {
		return 0, false
	}
	f := float64(n)
	return f, f > 0 && !math.IsInf(f, 0)
}

// createReply is createTask's reply: the taskId in either form (a number,
// or CapSolver's string, "taskId": "37223a89-06ed-442c-a0b8-22067b79c5b4":
// docs.capsolver.com/guide/api-createtask), and, for a task the provider
// solves at once, its status ready with the solution (the same page's
// "synchronous task response" of an image task: "status": "ready",
// "solution": {"text": "44795sds"}).
type createReply struct {
	taskResult
	TaskID json.RawMessage `json:"taskId,omitempty"`
}

// create sends createTask and returns the taskId, and the task's result
// when the reply carries it (status ready), else nil.
func (c *TasksClient) create(ctx context.Context, task createtask.Task) (string, *taskResult, error) {
	b, err := json.Marshal(task)
	if err != nil {
		return "", nil, &solver.Error{Code: solver.CodeInvalidParams, Class: retry.Permanent, Op: "createTask", Err: err}
	}
	if err := c.ready(ctx); err != nil {
		return "", nil, err
	}
	var r createReply
	if err := c.call(ctx, createtask.PathCreateTask, createtask.CreateTaskRequest{ClientKey: c.cfg.APIKey, Task: b}, &r); err != nil {
		return "", nil, err
	}
	if r.Failed() {
		return "", nil, c.codeError("createTask", r.ErrorReply, "")
	}
	id, ok := taskIDText(r.TaskID)
	if !ok {
		return "", nil, replyLost{&solver.Error{Code: solver.CodeBadReply, Class: retry.Transient, Op: "createTask",
			Err: errors.New("no taskId in the reply")}}
	}
	if r.Status == createtask.StatusReady {
		return id, &r.taskResult, nil
	}
	return id, nil, nil
}

// call POSTs body to path and decodes the reply into out. A request that
// never reached the service is a CodeUnreachable capacity wait; a reply
// lost after the request was sent is a replyLost (the task may have been
// created, and paid), and so is createTask's first HTTP 5xx or page that
// is no JSON (a front's), while later ones, every call failing, are an
// outage's capacity wait; any other 5xx is a transient HTTP_<status>, and
// any other page a transient BAD_REPLY.
func (c *TasksClient) call(ctx context.Context, path string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, c.cfg.BaseURL+"/"+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	hr.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(hr)
	if err != nil {
		c.failed(err.Error())
		// Refused, timed out connecting, no such host, TLS failed, the
		// proxy out of reach: nothing was sent, as the classic client
		// reads it (a TLS failure is no getTaskResult call of a task's
		// MaxTaskCalls, nor a createTask that may have been paid).
		if what := solver.UnreachableCause(err, c.cfg.BaseURL); what != "" {
			return &solver.Error{Code: solver.CodeUnreachable, Class: retry.Capacity, Op: path, Err: errors.New(what)}
		}
		return replyLost{&solver.Error{Code: solver.CodeNetwork, Class: retry.Transient, Op: path, Err: ctx.Err()}}
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode >= 500 {
		since, _ := c.Unreachable()
		c.failed(resp.Status)
		e := &solver.Error{Code: solver.HTTPCode(resp.StatusCode), Class: retry.Transient, Op: path}
		if path != createtask.PathCreateTask {
			return e
		}
		if !since.IsZero() {
			// Every call failed since then: an outage, whose 5xx is a
			// capacity wait the task may take elsewhere.
			e.Class = retry.Capacity
			return e
		}
		// A front's 5xx (the service answers its errors as JSON) may
		// come after the task was created, and paid: as the classic
		// client takes an in.php 5xx (solver.MayBePaid).
		return replyLost{e}
	}
	if err == nil && !json.Valid(rb) {
		// A page, not the API's words (a maintenance page, a captive
		// portal, a CDN's): no word of the service, as a 5xx.
		since, _ := c.Unreachable()
		c.failed(fmt.Sprintf("HTTP %d: a page that is no reply of the API", resp.StatusCode))
		e := &solver.Error{Code: solver.CodeBadReply, Class: retry.Transient, Op: path, Err: errors.New("the reply is no JSON: a page that is no reply of the API")}
		if path != createtask.PathCreateTask {
			return e
		}
		if !since.IsZero() {
			// Every call failed since then: an outage, which the task may
			// take elsewhere.
			return &solver.Error{Code: solver.CodeUnreachable, Class: retry.Capacity, Op: path,
				Err: fmt.Errorf("the provider gives no word since %s: %w", since.UTC().Format(time.RFC3339), e.Err)}
		}
		return replyLost{e}
	}
	c.answered()
	if err == nil {
		err = createtask.Decode(rb, out) // CapSolver's errors come as HTTP 400 with their JSON
	}
	if err != nil {
		return replyLost{&solver.Error{Code: solver.CodeBadReply, Class: retry.Transient, Op: path, Err: err}}
	}
	return nil
}

// codeError is the provider's error code as the classic code of the same
// meaning, classed as a per-solve service's (ERROR_ZERO_BALANCE: no money).
func (c *TasksClient) codeError(op string, r createtask.ErrorReply, id string) error {
	code := createtask.ToClassic(r.ErrorCode)
	if code == "" {
		code = fmt.Sprintf("ERROR_%d", r.ErrorID)
	}
	code = c.scrub(code)
	return &solver.Error{Code: code, Class: solver.TwoCaptcha.Classify(code), Op: op, CaptchaID: id, Text: c.scrub(r.ErrorDescription)}
}

// scrub is s, said by the service, with the key taken out wherever it is
// echoed: errors, and the outcomes, traces and logs they reach, never show
// it.
func (c *TasksClient) scrub(s string) string { return solver.Redact(s, c.cfg.APIKey) }

// SolveTime is how long a captcha of kind takes on this provider, at
// quantile q, as the client learned it from its own answers
// (solver.Client.SolveTime); before it learned the kind, four times the
// kind's first poll.
func (c *TasksClient) SolveTime(kind string, q float64) (time.Duration, bool) {
	return c.sched.SolveTime(kind, q)
}

// taskRequest is the body of getTaskResult and of the report calls, the
// taskId in the form the provider gave it (createtask.TaskRequest reads
// only numbers).
type taskRequest struct {
	ClientKey string          `json:"clientKey"`
	TaskID    json.RawMessage `json:"taskId"`
}

// replyLost is a failure of a call whose request reached the service and
// whose reply was lost or not understood: a task may have been created,
// and paid, with no one told its id. A Set never sends such a submission
// on to another provider.
type replyLost struct{ error }

func (e replyLost) Unwrap() error { return e.error }

// MayBePaid reports that the failed call may have been paid
// (solver.MayBePaid).
func (e replyLost) MayBePaid() bool { return true }
