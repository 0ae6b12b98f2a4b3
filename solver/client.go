package solver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/captchaq/captchaq/captcha"
	"github.com/captchaq/captchaq/internal/dialect/classic"
	"github.com/captchaq/captchaq/internal/text"
	"github.com/captchaq/captchaq/retry"
)

// maxBody bounds the reply body read: replies are small, answers to grid and
// GeeTest captchas a few hundred bytes.
const maxBody = 1 << 20

// Client talks to a 2captcha-compatible service. It is safe for concurrent
// use; share one per API key.
type Client struct {
	base    string
	key     string
	http    *http.Client
	log     *slog.Logger
	timing  Timing
	limiter *submitLimiter
	poller  poller
	batch   *batcher // nil with Timing.NoBatch
	service Service
	outage  outage
	hangs   hangs // in.php calls on their way (hold.go)
	onCall  func(Call)
	now     func() time.Time
	occ     *occupancy
	win     *window // nil without Config.LearnPlan
	// askPlan reads the plan from the service (Config.PlanFromService).
	askPlan  bool
	told     toldPlan
	pingback *Pingback
	held     atomic.Int64 // captchas accepted by the service that Solve waits for
}

// pingsBack reports whether the service calls back (Config.Pingback).
func (c *Client) pingsBack() bool { return c.pingback != nil }

// pingbackGrace is how long after the usual first poll a captcha waiting for
// a callback is polled anyway.
func (c *Client) pingbackGrace() time.Duration {
	g := c.pingback.Grace
	if g <= 0 {
		g = DefaultPingbackGrace
		if s := c.timing.Scale; s > 0 {
			g = time.Duration(float64(g) * s)
		}
	}
	return g
}

var _ Solver = (*Client)(nil)

// NewClient returns a Client for cfg, or an error if cfg is unusable (no API
// key, a BaseURL that is not an absolute http(s) URL).
func NewClient(cfg Config) (*Client, error) {
	if cfg.APIKey == "" {
		return nil, errors.New("solver: no API key (set CAPTCHAAI_API_KEY or use a key file)")
	}
	if strings.ContainsAny(cfg.APIKey, " \t\r\n") {
		return nil, errors.New("solver: the API key contains white space")
	}
	if err := CheckPollPace(cfg.Timing.PollPace); err != nil {
		return nil, fmt.Errorf("solver: Timing.PollPace %v: %w", cfg.Timing.PollPace, err)
	}
	base := cfg.BaseURL
	if base == "" {
		base = DefaultBaseURL
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("solver: base URL %q is not an absolute http(s) URL", redact(base, cfg.APIKey))
	}
	if u.User != nil || u.RawQuery != "" {
		return nil, errors.New("solver: base URL must not carry credentials or a query")
	}
	c := &Client{
		base:     strings.TrimRight(base, "/"),
		key:      cfg.APIKey,
		http:     cfg.HTTPClient,
		log:      cfg.Logger,
		timing:   cfg.Timing,
		onCall:   cfg.OnCall,
		now:      cfg.Now,
		pingback: cfg.Pingback,
	}
	if c.now == nil {
		c.now = time.Now
	}
	if cfg.LearnPlan {
		c.win = newWindow()
		c.askPlan = cfg.PlanFromService
	}
	c.told.first = make(chan struct{})
	if c.http == nil {
		c.http = newHTTPClient()
	}
	c.outage.warnFrom = cfg.OutageWarnAfter
	if c.outage.warnFrom <= 0 {
		c.outage.warnFrom = DefaultOutageWarnAfter
	}
	c.outage.probeMax = cfg.OutageProbeMax
	if c.outage.probeMax <= 0 {
		c.outage.probeMax = DefaultOutageProbeMax
	}
	c.outage.stall = cfg.StallAfter
	if c.outage.stall <= 0 {
		c.outage.stall = DefaultStallAfter
	}
	c.outage.host = u.Host
	c.outage.held = c.Held
	c.service = cfg.Service
	if c.service == "" {
		c.service = ServiceOf(c.base)
	} else if _, err := ParseService(string(c.service)); err != nil {
		return nil, err
	}
	c.occ = newOccupancy(c, cfg.Timing.batchGap()/20, cfg.Timing.batchGap(), cfg.Timing.forKind("").interval)
	if p := cfg.Timing.PollPace; p > 0 {
		c.occ.askPace = p
	}
	if !cfg.Timing.NoBatch {
		c.batch = newBatcher(c, cfg.Timing.batchGap())
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	interval := cfg.MinSubmitInterval
	if interval == 0 {
		interval = DefaultMinSubmitInterval
	}
	burst, window := cfg.SubmitBurst, cfg.SubmitWindow
	if burst == 0 {
		burst = DefaultSubmitBurst
	}
	if window <= 0 {
		window = DefaultSubmitWindow
	}
	c.limiter = sharedLimiter(c.base, c.key, max(interval, 0), window, max(burst, 0))
	return c, nil
}

// newHTTPClient is the default client: its own transport with connection
// reuse and timeouts on every phase.
func newHTTPClient() *http.Client {
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 20 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	return &http.Client{Transport: tr, Timeout: DefaultHTTPTimeout, CheckRedirect: refuseRedirect}
}

// refuseRedirect makes the default client return a redirect as it is instead
// of following it. The API never redirects, so one means a wrong base URL
// (http:// for https://, a moved host, a login page in the way), and
// following a 307 or 308 would send the POST body, API key included, to
// wherever it points; even a same-host redirect changes nothing about that
// URL being wrong. The reply then fails as HTTP_<status>, a Fatal code.
func refuseRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// Solve validates req, submits it and polls until the answer is ready, an
// error ends it, or ctx is done. Errors from the service are *Error with the
// API's code and class, and the captcha id once there is one; a request that
// Validate rejects is a Permanent *Error with CodeInvalidParams. When ctx is
// done, Solve returns at once with an error wrapping ctx.Err().
//
// With Config.LearnPlan, Solve first waits for a thread of the plan window
// (window.go), which it holds until the answer comes or the captcha is
// probably solved (ready.go). With LearnPlan or WithProbablyReady, a
// capacity refusal of the plan (ERROR_NO_SLOT_AVAILABLE, CaptchaAI's
// ERROR_ZERO_BALANCE) is returned once another captcha of the Client is
// answered or BatchGap (1 s) passed, so the caller's thread does not carry
// the next captcha into the same full plan at once.
func (c *Client) Solve(ctx context.Context, req Request) (Answer, error) {
	var round int
	held := false
	if c.win != nil {
		c.tellPlan(ctx)
		r, err := c.win.acquire(ctx)
		if err != nil {
			return Answer{}, fmt.Errorf("solver: wait for a thread of the plan window: %w", err)
		}
		round, held = r, true
	}
	free := func() {
		if held {
			held = false
			c.win.release()
		}
	}
	defer free()
	hook := probablyReadyHook(ctx)
	handsBack := hook != nil || c.win != nil
	id, submitted := req.CaptchaID, req.Submitted
	var replaces, replacedCode string
	for {
		resumed := id != ""
		if !resumed {
			var err error
			if id, err = c.Submit(ctx, req); err != nil {
				if planFull(c.service, err) {
					if c.win != nil {
						c.win.refused(round)
					}
					if handsBack {
						c.occ.refused(ctx)
						if !c.service.pausesAfterRefusal() {
							err = threadWaited{err}
						}
					}
				}
				return Answer{}, err
			}
			submitted = c.now()
		} else if submitted.IsZero() || submitted.After(c.now()) {
			submitted = c.now()
		}
		accepted(ctx, Accepted{ID: id, At: submitted, Resumed: resumed, Replaces: replaces, ReplacedCode: replacedCode})
		c.occ.accepted()
		if c.win != nil {
			c.win.accepted()
		}
		var h *holder
		if handsBack {
			kind := Kind(req.Method, req.Params)
			h = c.occ.add(kind, c.timing.forKind(kind), submitted, func() {
				if !c.PlanTold() {
					// A told plan's thread is held to the answer:
					// never more captchas at the service than it.
					free()
				}
				if hook != nil {
					hook()
				}
			})
		}
		c.held.Add(1)
		a, err := c.wait(ctx, req, id, submitted, h)
		c.held.Add(-1)
		if h != nil {
			c.occ.done(h, err == nil)
		}
		if !resumed || !CaptchaUnknown(err) || ctx.Err() != nil {
			return a, err
		}
		// A captcha accepted before (by a worker that died, say) that the
		// service no longer knows: past its lifetime there, so no answer
		// will come of it. Only a new submission gets one.
		c.log.LogAttrs(ctx, slog.LevelInfo, "the service no longer knows a resumed captcha; submitting it anew",
			slog.String("captcha_id", id), slog.String("code", CodeOf(err)))
		replaces, replacedCode, id = id, CodeOf(err), ""
	}
}

// planFull reports whether err is in.php's answer that every thread of the
// plan is busy: ERROR_NO_SLOT_AVAILABLE, or CaptchaAI's ERROR_ZERO_BALANCE.
func planFull(s Service, err error) bool {
	code := CodeOf(err)
	return code == classic.CodeNoSlotAvailable || code == classic.CodeZeroBalance && s.Classify(code) == retry.Capacity
}

// threadWaited is a refusal of the full plan that Solve returned only after
// it waited for a thread (WaitedForThread).
type threadWaited struct{ error }

func (e threadWaited) Unwrap() error { return e.error }

// WaitedForThread reports whether err is a refusal of the full plan
// (ERROR_NO_SLOT_AVAILABLE, CaptchaAI's ERROR_ZERO_BALANCE) that Solve
// returned only once another captcha of the Client was answered or BatchGap
// passed, on a Client whose next Solve waits for a thread before it submits
// (the plan window of Config.LearnPlan, or the caller's plan thread that
// WithProbablyReady hands back). Such a refusal may be tried again at once:
// the thread wait, not a clock, decides when it is submitted. Never on
// 2captcha, which asks for a pause after a refusal.
func WaitedForThread(err error) bool {
	var w threadWaited
	return errors.As(err, &w)
}

// PlanWindow returns the plan window learned so far (Config.LearnPlan):
// how many captchas this Client keeps on the service's threads at most; 0
// without LearnPlan.
func (c *Client) PlanWindow() int {
	if c.win == nil {
		return 0
	}
	return c.win.size()
}

// ClaimPlanRoom reserves up to n threads of the plan window that no
// captcha holds or waits for and no other claim reserved (Config.LearnPlan),
// for captchas whose Solve starts in a moment, and returns the claims: a
// caller that takes no more tasks than that leaves the rest to workers with
// room, instead of queueing them behind this Client's window. Each claim
// goes with the Solve whose context carries it (WithPlanClaim), or back
// with its Release; until one or the other it counts against the window.
// Without LearnPlan it returns n nil claims: nothing to reserve.
func (c *Client) ClaimPlanRoom(n int) []*PlanClaim {
	if c.win == nil {
		return make([]*PlanClaim, n)
	}
	return c.win.claim(n)
}

// PlanRoomChanged is closed when the plan window may have room again: a
// thread freed, the window grew or a claim was given back; nil (never)
// without LearnPlan.
func (c *Client) PlanRoomChanged() <-chan struct{} {
	if c.win == nil {
		return nil
	}
	return c.win.changed()
}

// PlanReached reports whether the service has refused a submission of this
// Client for want of plan threads: until then PlanWindow is a guess that
// only grows, not a plan size learned.
func (c *Client) PlanReached() bool {
	if c.win == nil {
		return false
	}
	c.win.mu.Lock()
	defer c.win.mu.Unlock()
	return !c.win.slow
}

// Submit validates req and sends it to in.php, returning the captcha id. It
// waits for the key's submission rate limit first. While the service does
// not answer (Unreachable) it sends nothing and returns a CodeUnreachable
// *Error at once, a capacity wait: except when a probe of the service is
// due, which it makes first, submitting if the service answered.
func (c *Client) Submit(ctx context.Context, req Request) (string, error) {
	if err := Validate(req.Method, req.Params); err != nil {
		return "", newError("validate", CodeInvalidParams, err)
	}
	if err := c.service.Offers(req.Method, req.Params); err != nil {
		return "", newError("validate", CodeInvalidParams, err)
	}
	if err := c.gate(ctx); err != nil {
		return "", err
	}
	if err := c.holdWhileHung(ctx); err != nil {
		return "", err
	}
	if err := c.limiter.wait(ctx, c.now); err != nil {
		return "", fmt.Errorf("solver: wait for submission slot: %w", err)
	}
	if c.outage.active() {
		// It began while this call waited for its slot.
		return "", c.unanswered()
	}
	if c.pingsBack() {
		params := make(map[string]string, len(req.Params)+1)
		for k, v := range req.Params {
			params[k] = v
		}
		params["pingback"] = c.pingback.url
		req.Params = params
	}
	body, ctype, err := c.submitBody(req)
	if err != nil {
		return "", newError("in.php", CodeInvalidParams, err)
	}
	ended := c.hangs.begin(c.now())
	r, err := c.call(ctx, "in.php", body, ctype)
	ended()
	if err != nil {
		return "", err
	}
	id := r.text
	if id == "" || strings.ContainsAny(id, " \t\r\n{}\"") || len(id) > 64 {
		return "", c.scrub(newError("in.php", CodeBadReply, fmt.Errorf("%w: captcha id %q", errBadReply, truncate(redact(id, c.key), 64))).replyLost())
	}
	c.log.LogAttrs(ctx, slog.LevelDebug, "captcha submitted",
		slog.String("method", req.Method), slog.String("captcha_id", id),
		slog.String("page_host", PageHost(req.Params["pageurl"])))
	return id, nil
}

// Fetch asks res.php once for the answer of captcha id. A captcha that is not
// solved yet gives a *Error of class retry.Poll (CAPCHA_NOT_READY).
func (c *Client) Fetch(ctx context.Context, id string) (Answer, error) {
	r, err := c.call(ctx, "res.php", c.form(url.Values{"action": {"get"}, "id": {id}}), formType)
	c.occ.polled(err)
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			e.CaptchaID = id
		}
		return Answer{}, err
	}
	return answerOf(r, id), nil
}

// PageHost returns the host of a page URL, which is all that logs and the
// audit trail carry of it (captcha.PageHost).
func PageHost(pageURL string) string { return captcha.PageHost(pageURL) }

// truncate cuts s to n bytes (text.Cut). A text that may hold the API key
// must be redacted first (redact), never after: a cut key escapes redaction.
func truncate(s string, n int) string { return text.Cut(s, n) }

// latest returns the later of two times.
func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
