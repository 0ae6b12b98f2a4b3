// The HTTP exchange with the service: request bodies, one call with its
// reply read once, and what an error may say (never the key).

package solver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/captchaq/captchaq/captcha"
	"github.com/captchaq/captchaq/retry"
)

const formType = "application/x-www-form-urlencoded"

// form adds the key and json=1 to v and encodes it.
func (c *Client) form(v url.Values) []byte {
	v.Set("key", c.key)
	v.Set("json", "1")
	return []byte(v.Encode())
}

// submitBody encodes an in.php request: a form, or for method post with a
// file a multipart form whose file part holds the decoded image.
func (c *Client) submitBody(req Request) ([]byte, string, error) {
	if _, file := req.Params["file"]; req.Method != "post" || !file {
		v := url.Values{"method": {req.Method}}
		for k, p := range req.Params {
			v.Set(k, p)
		}
		return c.form(v), formType, nil
	}
	img, err := captcha.DecodeImage(req.Params["file"])
	if err != nil {
		return nil, "", fmt.Errorf("decode file: %w", err)
	}
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fields := map[string]string{"key": c.key, "method": "post", "json": "1"}
	for k, p := range req.Params {
		if k != "file" {
			fields[k] = p
		}
	}
	for k, p := range fields {
		if err := mw.WriteField(k, p); err != nil {
			return nil, "", fmt.Errorf("multipart field %s: %w", k, err)
		}
	}
	fw, err := mw.CreateFormFile("file", "captcha."+captcha.ImageType(img))
	if err != nil {
		return nil, "", fmt.Errorf("multipart file: %w", err)
	}
	if _, err := fw.Write(img); err != nil {
		return nil, "", fmt.Errorf("multipart file: %w", err)
	}
	if err := mw.Close(); err != nil {
		return nil, "", fmt.Errorf("multipart close: %w", err)
	}
	return buf.Bytes(), mw.FormDataContentType(), nil
}

// call POSTs body to op ("in.php" or "res.php") and parses the reply.
func (c *Client) call(ctx context.Context, op string, body []byte, ctype string) (_ reply, err error) {
	start := c.now()
	ctx, endTrace := traceCall(ctx, op)
	defer func() { c.observe(op, false, start, err); endTrace(err) }()
	status, b, loc, err := c.exchange(ctx, op, body, ctype, c.apiReply)
	if err != nil {
		return reply{}, err
	}
	r, err := c.callParsed(op, status, b, loc)
	switch {
	case op == "in.php" && status >= 500:
		c.lostInPHP5xx(err, status, c.now().Sub(start))
	case op == "in.php" && status == http.StatusOK && CodeOf(err) == CodeBadReply && c.outage.silent() && !c.outage.answersButInPHP(start):
		// A body that is no reply of the API (a front's maintenance
		// page) while the service's other calls get no word either (an
		// outage is on, or the last of them failed): the outage's, a
		// capacity wait. Otherwise it is a reply lost, and spends the
		// attempt (BAD_REPLY's class), so that a service that takes the
		// captchas and garbles in.php's replies is paid at most the
		// attempt budget.
		var e *Error
		if errors.As(err, &e) {
			e.Class = retry.Capacity
		}
	}
	return r, err
}

// apiReply reports whether body is a reply of the API: a JSON or plain-text
// reply or code (parseBody), not a front's page or garbage.
func (c *Client) apiReply(body []byte) bool {
	_, _, err := parseBody(body, c.key)
	return err == nil
}

// callParsed parses one reply of op; loc is its Location header.
func (c *Client) callParsed(op string, status int, b []byte, loc string) (reply, error) {
	r, err := parseReply(op, status, b, c.key)
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			e.Class = c.service.Classify(e.Code)
			if status >= 500 && (op == "in.php" || c.outage.active()) {
				// A 5xx during an outage (a run of them is one) is the
				// outage's, a capacity wait, not the task's fault; and so
				// is one from in.php before the run is long enough to be
				// an outage, unless its reply was lost (lostInPHP5xx). As
				// a transient failure the first two of every outage of
				// in.php spent an attempt of the tasks they came to.
				e.Class = retry.Capacity
			}
			if loc != "" && status/100 == 3 && e.Err != nil {
				e.Err = fmt.Errorf("%w (a redirect to %s, not followed: the API never redirects, check the base URL)",
					e.Err, redirectTarget(loc))
			}
			return reply{}, c.scrub(e)
		}
		return reply{}, err
	}
	return r, nil
}

// lostInPHP5xx marks err, the failure of an in.php call answered with a
// 5xx status after took, as a reply lost when the 5xx does not carry the
// service's word. Such a 5xx is a front's: the service answers its errors in the body,
// with status 200 (docs.captchaai.com/guides/err_handling), and the
// official 2captcha client takes any other status as a network failure,
// like a connection lost (2captcha/2captcha-python twocaptcha/api.py,
// ApiClient.in_). A front that passed the call on (a gateway timeout, a
// bad reply of the origin) may have had the captcha taken and paid, so
// the task is told it may have been paid (MayBePaid). One that hung past
// StallAfter/5 (where submissions begin to wait behind it: hold.go) while
// the service answers its other calls is a reply that came too late, and
// spends the task's attempt as exchange's late reply does: as an outage
// (no attempt spent) it would be submitted, and paid, again after every
// probe until its deadline. Any other is the outage's: a capacity wait.
func (c *Client) lostInPHP5xx(err error, status int, took time.Duration) {
	var e *Error
	if !errors.As(err, &e) || e.Code != HTTPCode(status) {
		return
	}
	e.replyLost()
	if took >= c.outage.stall/5 && c.outage.answersButInPHP(c.now().Add(-took)) {
		e.Class = retry.Transient
	}
}

// exchange POSTs body to op and returns the reply's status, body (at most
// maxBody bytes) and Location header. Its errors are network failures and
// ctx's end. readable (nil: any body) tells a reply of the API: a 200
// whose body it refuses is no word of the service for the outage, as a
// 5xx is.
func (c *Client) exchange(ctx context.Context, op string, body []byte, ctype string, readable func([]byte) bool) (status int, b []byte, loc string, err error) {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/"+op, bytes.NewReader(body))
	if err != nil {
		return 0, nil, "", c.scrub(newError(op, CodeNetwork, err))
	}
	hreq.Header.Set("Content-Type", ctype)
	hreq.Header.Set("Accept", "application/json, text/plain;q=0.9, */*;q=0.1")
	// A call with no reply after StallAfter, while no other call got one
	// either, is a frozen service: an outage from then on, not only once
	// the HTTP client's timeout ends the call.
	sent := c.now()
	stall := time.AfterFunc(c.outage.stall, func() {
		c.outage.stalled(context.WithoutCancel(ctx), c.log, sent, c.now)
		c.hangs.wake() // an outage may have begun: held submissions are refused
	})
	resp, err := c.http.Do(hreq)
	stall.Stop()
	if err != nil {
		if ctx.Err() != nil {
			return 0, nil, "", fmt.Errorf("solver: %s: %w", op, ctx.Err())
		}
		if what := UnreachableCause(err, c.base); what != "" {
			what += ": is the service's URL right?"
			c.outage.fail(ctx, c.log, redact(what, c.key), c.now())
			return 0, nil, "", c.scrub(newError(op, CodeUnreachable, fmt.Errorf("%s (%w)", what, err)))
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() && op == "in.php" && c.outage.repliedSince(sent.Add(c.outage.stall)) {
			// The service answered other calls (a probe, a poll) after
			// this one had hung for StallAfter: it is no frozen service
			// (a reply to a call sent before a freeze began does not
			// count), and this captcha may have been taken and paid with
			// its reply late. The task
			// spends its attempt, as for any reply lost: as an outage (no
			// attempt spent) it would be submitted, and paid, again after
			// every probe until its deadline.
			return 0, nil, "", c.scrub(newError(op, CodeNetwork, fmt.Errorf("no reply from %s within %v while it answered other calls (%w)",
				c.outage.host, c.now().Sub(sent).Round(time.Second), err)).replyLost())
		}
		if errors.As(err, &ne) && ne.Timeout() {
			// No reply within the HTTP client's timeout: the service
			// accepts connections and answers nothing.
			what := fmt.Sprintf("no reply from %s within %v", c.outage.host, c.now().Sub(sent).Round(time.Second))
			c.outage.fail(ctx, c.log, what, c.now())
			return 0, nil, "", c.scrub(newError(op, CodeUnreachable, fmt.Errorf("%s (%w)", what, err)).replyLost())
		}
		if c.outage.active() {
			// A cut connection during an outage is the outage's, not the
			// task's.
			return 0, nil, "", c.scrub(newError(op, CodeUnreachable, err).replyLost())
		}
		return 0, nil, "", c.scrub(newError(op, CodeNetwork, err).replyLost())
	}
	defer resp.Body.Close()
	b, err = io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if what := c.frontRefusal(resp.StatusCode, b); err == nil && what != "" {
		c.outage.fail(ctx, c.log, what, c.now())
		return 0, nil, "", c.scrub(newError(op, CodeUnreachable, errors.New(what)))
	}
	switch {
	case err != nil && ctx.Err() == nil:
		// A reply not read (cut, or trickled past the call's timeout)
		// says no more than a 5xx: a service whose every reply trickles
		// would otherwise take a submission of each thread every timeout.
		c.outage.noWord(ctx, c.log, op, redact(fmt.Sprintf("a reply not read (%v)", err), c.key), c.now())
	case err == nil && resp.StatusCode == http.StatusOK && readable != nil && !readable(b):
		c.outage.noWord(ctx, c.log, op, "a page that is no reply of the API", c.now())
	default:
		c.outage.reply(ctx, c.log, op, resp.StatusCode, c.now())
	}
	if err != nil {
		if ctx.Err() != nil {
			return 0, nil, "", fmt.Errorf("solver: %s: %w", op, ctx.Err())
		}
		return 0, nil, "", c.scrub(newError(op, CodeNetwork, fmt.Errorf("read reply: %w", err)).replyLost())
	}
	return resp.StatusCode, b, resp.Header.Get("Location"), nil
}

// frontRefusal describes a reply of status with body when it is a front's
// refusal, a 403 that does not carry the service's word (a WAF's or a
// CDN's page): the service answers every error of its own, the key's
// among them (ERROR_WRONG_USER_KEY, ERROR_KEY_DOES_NOT_EXIST, IP_BANNED),
// as a code in the body (docs.captchaai.com/guides/err_handling), and that
// code decides. A front that refuses the calls holds them back from the
// service, which took nothing: for the pool the service is unreachable,
// an outage, and no key of the worker is at fault. It returns "" for any
// other reply.
func (c *Client) frontRefusal(status int, body []byte) string {
	if status != http.StatusForbidden {
		return ""
	}
	if _, code, _ := parseBody(body, c.key); code != "" {
		return ""
	}
	return redact(fmt.Sprintf("HTTP 403 from %s, %s: a front (a WAF, a CDN) refuses the calls before the service",
		c.outage.host, describe(body, c.key)), c.key)
}

// scrub removes every form of the API key from e's message and code. Since
// the key travels only in POST bodies it should never be there; a service
// that echoes it back, or a transport error quoting a request, must still not
// leak it. scrub is the last line of defence only: it sees whole messages, so
// it cannot find a key that something already cut short. Every text quoted
// from a reply is redacted before it is truncated (describe, and the
// truncate calls here).
func (c *Client) scrub(e *Error) *Error {
	if e.Err != nil {
		if msg := e.Err.Error(); redact(msg, c.key) != msg {
			e.Err = errors.New(redact(msg, c.key))
		}
	}
	e.Code = redact(e.Code, c.key)
	return e
}

// answerOf turns a res.php reply into an Answer. A GeeTest answer that arrives
// as a JSON-encoded string holding an object is unwrapped into the object.
func answerOf(r reply, id string) Answer {
	sol := r.value
	if len(sol) > 0 && sol[0] == '"' {
		t := strings.TrimSpace(r.text)
		if strings.HasPrefix(t, "{") && json.Valid([]byte(t)) {
			var c bytes.Buffer
			if json.Compact(&c, []byte(t)) == nil {
				sol = c.Bytes()
			}
		}
	}
	return Answer{Solution: sol, UserAgent: r.userAgent, CaptchaID: id}
}

// redirectTarget names where a Location header points by its host only,
// never the full URL.
func redirectTarget(loc string) string {
	u, err := url.Parse(loc)
	switch {
	case err != nil:
		return "an invalid location"
	case u.Host == "":
		return "the same host"
	}
	return "host " + u.Host
}
