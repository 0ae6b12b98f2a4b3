package gateway

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/captchaq/captchaq/captcha"
	"github.com/captchaq/captchaq/internal/dialect/classic"
	"github.com/captchaq/captchaq/stream"
)

// requestFields are in.php's fields that are not the task's parameters:
// the call's own (key, method, json, id), the caller's to the service that
// captchaq does not pass on (soft_id, the developer id the SDKs send:
// 2captcha/2captcha-go Client.Solve, @2captcha/captcha-solver
// defaultPayload; header_acao), the gateway's (pingback, priority,
// deadline). action is not one: on in.php it is reCAPTCHA v3's and
// Turnstile's page action, a parameter of the task (CaptchaAI-Examples,
// articles/how-to-solve-recaptcha-v3-automatically-using-api/python/solve.py).
var requestFields = map[string]bool{"key": true, "method": true, "json": true, "id": true,
	"soft_id": true, "header_acao": true, "pingback": true, "priority": true, "deadline": true}

// submit serves in.php: it submits a task for the caller and answers its
// id, OK|<id> or {"status":1,"request":"<id>"}.
func (g *Gateway) submit(ctx context.Context, c *caller, f form, from string, rep replier) {
	now := g.cfg.Now()
	if !c.submits.Allow(now) {
		rep.code(classic.CodeMaxUserTurn, "more than the allowed in.php requests within the window: wait")
		return
	}
	t := stream.Task{Method: f["method"], Params: stream.Params{}, Priority: c.Priority}
	for k, v := range f {
		if !requestFields[k] {
			t.Params[k] = v
		}
	}
	if t.Method == "" {
		rep.code(classic.CodeBadParameters, "method: required")
		return
	}
	if t.Method == "geetest_v4" {
		// 2captcha's name for GeeTest v4, as its SDKs send it
		// (2captcha/2captcha-go GeeTestV4.ToRequest: method geetest_v4,
		// captcha_id; @2captcha/captcha-solver geetestV4 likewise) is
		// CaptchaAI's geetest with version=4 and the captcha_id as gt
		// (CaptchaAI-Examples, articles/how-to-solve-geetest-v4-using-api/).
		t.Method, t.Params["version"], t.Params["gt"] = captcha.MethodGeeTest, "4", t.Params["captcha_id"]
		delete(t.Params, "captcha_id")
	}
	if v, ok := t.Params["datas"]; ok && t.Method == captcha.MethodReCaptcha && t.Params["data-s"] == "" {
		// The official JavaScript SDK's name for reCAPTCHA's data-s: its
		// recaptcha() sends its caller's fields as they are, and documents
		// "params.datas Value of data-s parameter you found on page"
		// (@2captcha/captcha-solver 1.3.9, dist/structs/2captcha.js).
		t.Params["data-s"] = v
		delete(t.Params, "datas")
	}
	if p := f["priority"]; p != "" {
		if p != string(stream.PriorityHigh) && p != string(stream.PriorityNormal) {
			rep.code(classic.CodeBadParameters, "priority: want high or normal")
			return
		}
		t.Priority = stream.Priority(p)
	}
	if d := f["deadline"]; d != "" {
		secs, err := strconv.Atoi(d)
		if err != nil || secs < 1 {
			rep.code(classic.CodeBadParameters, "deadline: want whole seconds from now, 1 or more")
			return
		}
		t.Deadline = now.Add(time.Duration(secs) * time.Second)
	}
	num, code, text := g.enqueue(ctx, c, submission{task: t, callback: callback{url: f["pingback"], field: "pingback"}, from: from, draw: newNumber})
	if code != "" {
		rep.code(code, text)
		return
	}
	rep.ok(jsonString(num), "", "")
}

// callback is where a caller asked to be called back when its task is
// done, and in which dialect: the classic pingback (a GET with id and code)
// or the JSON dialect's callbackUrl (a POST of getTaskResult's reply).
type callback struct {
	url   string
	field string // the request field that named it: pingback or callbackUrl
	json  bool
}

// submission is a task a caller asks for, in either dialect: the task, its
// callback, the address it came from (the JSON dialect's ip) and how its
// caller-facing id is drawn.
type submission struct {
	task     stream.Task
	callback callback
	from     string
	draw     func() string
	// narrow: draw's ids are few enough to meet one the stream still
	// keeps a task of the caller's under, so each is checked against the
	// stream before it is given.
	narrow bool
}

// enqueue submits s's task for caller c, whose rate limit the caller
// checked, under an id s.draw makes, and returns that id; or, when the task
// is not taken, the in.php code (and its text) saying why. Both dialects
// submit through it, so the key's share, the callback's address rules, the
// catalogue's checks and the queue's refusals are one.
func (g *Gateway) enqueue(ctx context.Context, c *caller, s submission) (num, code, text string) {
	now, t, cb := g.cfg.Now(), s.task, s.callback
	if cb.url != "" {
		u, err := url.Parse(cb.url)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return "", classic.CodeBadParameters, cb.field + ": want an http or https URL"
		}
		// Refused here, not at callback time: the caller learns it with
		// the id it would otherwise wait on. The services publish no code
		// of their own for a pingback address they refuse (2captcha takes
		// only addresses registered beforehand:
		// 2captcha.com/h/how-to-configure-automatic-response-retrieval-via-pingback),
		// so the gateway answers the code of any refused parameter.
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = g.guard.check(cctx, u)
		cancel()
		if err != nil {
			return "", classic.CodeBadParameters, cb.field + ": " + err.Error()
		}
	}
	if err := captcha.Validate(t.Method, t.Params); err != nil {
		code, text := validationCode(err)
		return "", code, text
	}

	if g.cfg.Conn.Status() != nats.CONNECTED {
		// Published now, the task would wait in the client's reconnect
		// buffer and be enqueued when the connection comes back, after
		// the caller was told it was not: refuse it at once instead.
		return "", classic.CodeServerError, "the queue is out of reach: retry"
	}
	e, code, text := g.reserve(ctx, c, s)
	if e == nil {
		return "", code, text
	}
	t.ID = taskID(c.Producer, e.num)

	// The submission runs to its end whether or not the caller hangs up
	// (its entry must agree with the stream), and within submitTimeout,
	// so a caller always gets an answer.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), submitTimeout)
	r, err := c.client.Submit(sctx, t)
	cancel()
	if err == nil && r.Duplicate {
		err = errors.New("the id is taken by another task in the duplicate window")
	}
	if err != nil {
		g.unreserve(e, t.ID)
		var ve *captcha.ValidationError
		switch {
		case errors.Is(err, stream.ErrStreamFull):
			// The service's answer when it takes no captcha now, which
			// its callers retry after a pause ("transient: all workers
			// busy, retry after 5 seconds",
			// blog.captchaai.com/captchaai-api-error-handling-decision-tree;
			// solver/testdata/service/replies.json classes it capacity).
			return "", classic.CodeNoSlotAvailable, "the queue is full: retry later"
		case errors.As(err, &ve):
			code, text := validationCode(ve)
			return "", code, text
		case errors.Is(err, stream.ErrInvalidTask):
			return "", classic.CodeBadParameters, err.Error()
		case errors.Is(err, stream.ErrNotConfirmed):
			// The broker did not answer in time (stalled, or gone). The
			// task carries its submit-by instant: stored later, it ends
			// unsolved and unpaid, so the caller's retry is its only
			// payment. Stored in time with its answer lost (which no one
			// can tell yet), it is solved: a poll of the id says which.
			g.log.Warn("submit: the queue did not confirm the task in time", slog.String("producer", c.Producer),
				slog.String("id", e.num), slog.Any("error", err))
			return "", classic.CodeServerError, "the queue did not confirm the task in time: if it stores it later, it is not solved and not paid; " +
				"a poll of id " + e.num + " says what became of it (an unknown id: never stored); retry"
		default:
			g.log.Warn("submit failed", slog.String("producer", c.Producer), slog.Any("error", err))
			return "", classic.CodeServerError, "the queue did not take the task: retry"
		}
	}
	deadline := t.Deadline
	if deadline.IsZero() {
		deadline = now.Add(cmp.Or(time.Duration(c.Deadline), stream.DefaultDeadline))
	}
	g.gotGen(e, t.ID, r.Seq, deadline)
	return e.num, "", ""
}

// reserve takes one of c's slots for submission s under an id no task of
// c's has: none the gateway holds or remembers, and, for s.narrow, none
// the stream keeps records of, which is every id a poll would answer for.
// An id is so given again only once no poll can find its earlier task.
// The entry goes in before the task does: its outcome may come before
// Submit returns. No entry: the code and text of the refusal.
func (g *Gateway) reserve(ctx context.Context, c *caller, s submission) (e *entry, code, text string) {
	for range maxDraws {
		num := s.draw()
		id := taskID(c.Producer, num)
		g.mu.Lock()
		if slots := g.slots(c); slots > 0 && c.inFlight >= slots {
			g.mu.Unlock()
			return nil, classic.CodeNoSlotAvailable, "this key's share of the plan is in use: retry later"
		}
		if g.heldLocked(id) {
			g.mu.Unlock()
			continue
		}
		e = &entry{caller: c, num: num, method: s.task.Method, callback: s.callback, from: s.from, sent: time.Now()}
		g.tasks[id] = e
		c.inFlight++
		g.mu.Unlock()
		if !s.narrow {
			return e, "", ""
		}
		cctx, cancel := context.WithTimeout(ctx, submitTimeout)
		_, err := c.client.TaskOf(cctx, id)
		cancel()
		if errors.Is(err, stream.ErrNotFound) {
			return e, "", ""
		}
		g.unreserve(e, id)
		if err != nil {
			if ctx.Err() == nil { // not the caller hanging up
				g.log.Warn("submit: read the stream for a new id", slog.String("producer", c.Producer), slog.Any("error", err))
			}
			return nil, classic.CodeServerError, "the queue could not be read: retry"
		}
	}
	return nil, classic.CodeServerError, "no free id was found: retry"
}

// maxDraws bounds the ids reserve draws for one submission: a narrow id
// that is taken is met about once in 2000 draws at a million tasks of the
// key kept, so running out means far more are.
const maxDraws = 8

// heldLocked reports whether the gateway holds or remembers task id.
// Callers hold g.mu.
func (g *Gateway) heldLocked(id string) bool {
	_, forgot := g.past[id]
	return g.tasks[id] != nil || forgot
}

// unreserve drops entry e (task id), which was not submitted, and frees its
// slot.
func (g *Gateway) unreserve(e *entry, id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.tasks, id)
	if !e.done { // not counted down by an outcome that came anyway
		e.caller.inFlight--
	}
}

// submitTimeout bounds a submission: the broker's answer normally comes
// in milliseconds, and a caller waits for in.php's.
const submitTimeout = 10 * time.Second

// slots is how many unfinished tasks c may have: its share of the plan's
// threads, at least 1; 0 for no limit. Callers hold g.mu.
func (g *Gateway) slots(c *caller) int {
	if c.Share <= 0 || g.threads <= 0 {
		return 0
	}
	return max(1, int(c.Share*float64(g.threads)))
}

// validationCode is the service's code for a parameter captchaq refuses,
// as the service answers the same mistake (the emulator's checkParams
// mirrors CaptchaAI's per-method answers: ERROR_PAGEURL, ERROR_GOOGLEKEY,
// the image codes, ERROR_BAD_PROXY/ERROR_PROXY_FORMAT, else
// ERROR_BAD_PARAMETERS), and what captchaq found wrong.
func validationCode(err error) (string, string) {
	var ve *captcha.ValidationError
	if !errors.As(err, &ve) {
		return classic.CodeBadParameters, err.Error()
	}
	msg := ve.Error()
	switch ve.Field {
	case "params.pageurl":
		return classic.CodePageURL, msg
	case "params.googlekey":
		return classic.CodeGoogleKey, msg
	case "params.proxy":
		return classic.CodeProxyFormat, msg
	case "params.proxytype":
		return classic.CodeBadProxy, msg
	case "params.file", "params.body", "params.imginstructions":
		switch {
		case strings.Contains(ve.Msg, "required"), strings.Contains(ve.Msg, "empty"):
			return classic.CodeZeroCaptchaFilesize, msg
		case strings.Contains(ve.Msg, "larger"), strings.Contains(ve.Msg, "far over"):
			return classic.CodeTooBigCaptchaFilesize, msg
		case strings.Contains(ve.Msg, "base64"):
			return classic.CodeUpload, msg
		}
		return classic.CodeImageTypeNotSupported, msg
	}
	return classic.CodeBadParameters, msg
}
