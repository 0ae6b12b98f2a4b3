package gateway

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/captchaq/captchaq/captcha"
	"github.com/captchaq/captchaq/internal/dialect/classic"
	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/wire"
)

// answer is what res.php says of one task: an error code (code set, or
// CAPCHA_NOT_READY), or the answer.
type answer struct {
	code, text string          // the code and its error_text
	value      json.RawMessage // the answer, under json=1
	plain      string          // the answer, in plain text
	ua         string          // the user agent the token is bound to
	uaField    string          // useragent or user_agent
	captchaID  string          // the service's id of the answer
	gen        uint64          // the generation answered, when the gateway knows it
	method     string          // the task's method, when the answer is the outcome's
	attempts   int             // the attempts the task took
	created    time.Time       // when the gateway submitted it, when it knows
	from       string          // the address it was submitted from, when the gateway knows
	ended      time.Time       // when it was solved, when it was
}

const notReady = classic.CodeNotReady // spelled as the service spells it

// result serves res.php: action=get (id, or ids for several),
// getbalance, threadsinfo, reportgood and reportbad.
func (g *Gateway) result(ctx context.Context, c *caller, f form, rep replier) {
	if !c.polls.Allow(g.cfg.Now()) {
		rep.code(classic.CodeTooManyPolls, "more than the allowed res.php requests within the window: poll less often")
		return
	}
	switch f["action"] {
	case "":
		rep.code(classic.CodeEmptyAction, "action: required")
	case classic.ActionGet:
		if ids := f["ids"]; ids != "" && f["id"] == "" {
			g.several(ctx, c, strings.Split(ids, ","), rep)
			return
		}
		a := g.state(ctx, c, f["id"])
		if a.code != "" {
			rep.code(a.code, a.text)
			return
		}
		rep.ok(a.value, a.ua, a.uaField)
	case classic.ActionGetBalance:
		rep.bare(strconv.Itoa(g.balance(c)))
	case classic.ActionThreadsInfo:
		classic.WriteThreadsInfo(rep.w, rep.json, g.threadsInfo(c))
	case classic.ActionReportGood, classic.ActionReportBad:
		// The gateway holds no key of the service's: a worker reports
		// (ServeReports).
		g.forwardReport(ctx, c, f["id"], f["action"] == classic.ActionReportGood, rep)
	default:
		rep.code(classic.CodeBadParameters, "action: want get, getbalance, threadsinfo, reportgood or reportbad")
	}
}

// several answers action=get&ids=…: each task's state in the order asked,
// (a CAPCHA_NOT_READY, an error code, or the answer's text), as
// 2captcha-compatible services answer a batch poll (classic.WriteStates).
// At most classic.MaxBatchIDs ids.
func (g *Gateway) several(ctx context.Context, c *caller, ids []string, rep replier) {
	if len(ids) > classic.MaxBatchIDs {
		rep.code(classic.CodeBadParameters, "ids: at most "+strconv.Itoa(classic.MaxBatchIDs))
		return
	}
	states := make([]string, len(ids))
	for i, id := range ids {
		a := g.state(ctx, c, strings.TrimSpace(id))
		states[i] = a.code
		if a.code == "" {
			states[i] = a.plain
		}
	}
	classic.WriteStates(rep.w, rep.json, states)
}

// state says where task num of caller c stands. An id that is not c's
// finds nothing: ERROR_WRONG_CAPTCHA_ID, as the service answers an id that
// is not the account's.
func (g *Gateway) state(ctx context.Context, c *caller, num string) answer {
	if num == "" {
		return answer{code: classic.CodeWrongCaptchaID, text: "id: required"}
	}
	if len(num) > 19 || strings.Trim(num, "0123456789") != "" {
		return answer{code: classic.CodeWrongIDFormat, text: "id: digits only"}
	}
	id := taskID(c.Producer, num)
	now := g.cfg.Now()
	g.mu.Lock()
	e := g.tasks[id]
	var (
		known, done bool
		out         stream.Outcome
		method      string
	)
	var gen uint64
	var created time.Time
	var from string
	if e != nil {
		known, done, out, method, gen, created, from = true, e.done, e.out, e.method, e.gen, e.sent, e.from
	}
	past, forgot := g.past[id]
	g.mu.Unlock()
	switch {
	case known && !done:
		return answer{code: notReady}
	case known:
		a := g.answerOf(out, method, now)
		a.gen, a.created, a.from = gen, created, from
		return a
	}
	// Not in memory (forgotten, or submitted before a restart): the
	// stream knows. Only the generation the caller submitted answers it:
	// a forgotten task's is known; of a task submitted before a restart,
	// the stream's records say which (callerGen), and the gateway keeps it
	// as a forgotten task's.
	ti, err := c.client.TaskOf(ctx, id)
	if err == nil && !forgot {
		past.gen, err = callerGen(ctx, c.client, id)
		if err == nil {
			past.at, forgot = now, true
			g.mu.Lock()
			g.past[id] = past
			g.mu.Unlock()
		}
	}
	switch {
	case errors.Is(err, stream.ErrNotFound):
		return answer{code: classic.CodeWrongCaptchaID, text: "no task of this key has this id"}
	case err != nil:
		g.log.Warn("res.php: read task", slog.String("producer", c.Producer), slog.Any("error", err))
		return answer{code: classic.CodeServerError, text: "the queue could not be read: retry"}
	case ti.Status != stream.TaskDone && ti.Gen == past.gen:
		return answer{code: notReady}
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err = c.client.WaitReceipt(wctx, stream.Receipt{ID: id, Seq: past.gen})
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return answer{code: notReady}
	}
	if err != nil && !errors.Is(err, stream.ErrNotSolved) && !errors.Is(err, stream.ErrTokenExpired) {
		g.log.Warn("res.php: read outcome", slog.String("producer", c.Producer), slog.Any("error", err))
		return answer{code: classic.CodeServerError, text: "the queue could not be read: retry"}
	}
	a := g.answerOf(out, "", now) // the outcome's own method
	a.gen = past.gen
	return a
}

// callerGen is the generation of task id that its gateway caller
// submitted, read from the task's records: the earliest submission under
// the id that did not end INVALID_ENVELOPE. The gateway names a task when
// it submits it, so another producer's submission under the id (one the
// duplicate window let through, or a forged message) comes after the
// caller's; a forged message's generation ends INVALID_ENVELOPE, or leaves
// no record at all once a worker has ended it without one.
func callerGen(ctx context.Context, client *stream.Client, id string) (uint64, error) {
	steps, err := client.Trace(ctx, id)
	if err != nil {
		return 0, err
	}
	forged := map[uint64]bool{}
	for _, s := range steps {
		if s.Code == stream.CodeInvalidEnvelope {
			forged[s.Gen] = true
		}
	}
	var gen uint64
	for _, s := range steps {
		if s.Kind == "submitted" && !forged[s.Gen] && (gen == 0 || s.Gen < gen) {
			gen = s.Gen
		}
	}
	if gen == 0 {
		return 0, fmt.Errorf("task %s: no submission that is not forged: %w", id, stream.ErrNotFound)
	}
	return gen, nil
}

// answerOf is res.php's answer for an outcome.
//
// A dead task answers its last code when it is the service's word on the
// captcha (ERROR_CAPTCHA_UNSOLVABLE, ERROR_PAGEURL, ERROR_BAD_PARAMETERS, …:
// the codes callers already handle; aboutTheCaptcha); captchaq's own codes
// for what the service never answers (LOCAL_TIMEOUT, DEADLINE_PASSED,
// WORKER_LOST, canceled…) and the service's codes about the workers'
// exchange with it answer ERROR_CAPTCHA_UNSOLVABLE, and an invalid task
// ERROR_BAD_PARAMETERS; error_text names the code the task died on. A token that expired before it was read answers
// ERROR_CAPTCHA_UNSOLVABLE too: the caller needs a new one, as after an
// unsolvable captcha.
func (g *Gateway) answerOf(out stream.Outcome, method string, now time.Time) answer {
	if out.Status == stream.StatusDead {
		code := out.Error
		switch {
		case code == wire.CodeInvalidTask:
			code = classic.CodeBadParameters
		case !aboutTheCaptcha(code):
			code = classic.CodeCaptchaUnsolvable
		}
		text := out.Error
		if out.Detail != "" {
			text += ": " + out.Detail
		}
		return answer{code: code, text: text, attempts: out.Attempts}
	}
	if len(out.Solution) == 0 || !now.Before(out.ExpiresAt) {
		return answer{code: classic.CodeCaptchaUnsolvable, text: "solved, but the token expired before it was read: submit again"}
	}
	if method == "" {
		method = out.Method
	}
	// The user agent goes in the field the method's answers name it in
	// (captcha.UserAgentField), Turnstile's useragent where none is named.
	uaField := cmp.Or(captcha.UserAgentField(method), "useragent")
	return answer{value: out.Solution, plain: out.Text(), ua: out.UserAgent, uaField: uaField, captchaID: out.CaptchaID,
		method: method, attempts: out.Attempts, ended: out.SolvedAt}
}

// aboutTheCaptcha reports whether a dead task's last code is the service's
// final word on the captcha itself (ERROR_CAPTCHA_UNSOLVABLE, a bad
// parameter, a bad image, a proxy the service could not use), which a
// caller handles as the service's answer to its request. The other codes a
// task can die on are about the workers' own exchange with the service: a
// transient failure whose retries ran out (ERROR_SERVER_ERROR, which
// callers poll on through), a capacity or account condition, or a res.php
// code about the workers' poll (ERROR_WRONG_CAPTCHA_ID, which would tell the
// caller the id is not theirs); passed on, each would say something false
// about the caller's task.
func aboutTheCaptcha(code string) bool {
	switch code {
	case classic.CodeCaptchaUnsolvable, classic.CodeBadDuplicates, classic.CodeProxyConnectionFailed:
		return true
	case classic.CodeWrongIDFormat, classic.CodeEmptyAction, classic.CodeDuplicateReport, classic.CodeReportNotRecorded:
		return false
	}
	return strings.HasPrefix(code, "ERROR_") && solver.Classify(code) == retry.Permanent
}

// balance answers getbalance. The gateway holds no key of the service's,
// so it has no money figure to give: it answers how many tasks the key
// may still have in flight now — its free slots under its share, or the
// plan's thread count for a key without a share (100 when no plan is
// set) — so a script that checks its balance before submitting goes on
// while there is room and waits when it reads 0.
func (g *Gateway) balance(c *caller) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if slots := g.slots(c); slots > 0 {
		return max(0, slots-c.inFlight)
	}
	if g.threads > 0 {
		return g.threads
	}
	return 100
}

// threadsInfo answers threadsinfo for c: its share of the plan as threads
// (the plan's thread count for a key without a share, 100 when no plan is
// set, as balance counts), the threads its unfinished tasks hold, and those
// free.
func (g *Gateway) threadsInfo(c *caller) classic.ThreadsInfo {
	g.mu.Lock()
	defer g.mu.Unlock()
	threads := g.slots(c)
	if threads == 0 {
		threads = cmp.Or(g.threads, 100)
	}
	return classic.ThreadsInfo{Threads: threads, WorkingThreads: c.inFlight, FreeThreads: max(0, threads-c.inFlight)}
}

func jsonString(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}
