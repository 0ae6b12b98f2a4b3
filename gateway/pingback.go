package gateway

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"time"
)

// Pingback configures the callbacks the gateway makes when a caller gave
// in.php a pingback URL. The zero value is usable.
//
// The gateway calls the URL with GET and the query fields id (the id in.php
// answered) and code (the answer as res.php's plain text gives it after
// OK|, or the error code), as CaptchaAI calls back
// (blog.captchaai.com/captchaai-pingback-task-notification-patterns:
// "CaptchaAI sends GET request to your callback: URL?id=TASK_ID&code=TOKEN";
// 2captcha sends the same two fields as a POST form). It calls once the
// outcome is stored in the stream, never before, so res.php answers the
// same at that moment; any 2xx reply ends it, anything else is retried.
//
// Callbacks go to public unicast addresses only, unless Allow names the
// host or network: in.php refuses a URL whose host is, or resolves to, a
// loopback, private, link-local, multicast, unspecified or this host's own
// address (ERROR_BAD_PARAMETERS, naming the pingback), and each call
// connects only to an address that passes the same check at connect time.
// Redirects are not followed.
type Pingback struct {
	// Attempts is how many calls are made at most; default 5.
	Attempts int
	// Backoff is the pause after the first failed call, doubled after each
	// further one up to a minute; default 1 s.
	Backoff time.Duration
	// Timeout bounds each call; default 10 s.
	Timeout time.Duration
	// Allow names the internal hosts (by name, as the URL spells them),
	// addresses and CIDR networks callbacks may reach on purpose, such as
	// "hooks.internal", "10.1.2.3" or "10.0.0.0/8".
	Allow []string
	// Resolve looks up a host's addresses; default the system resolver.
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
}

func (p Pingback) withDefaults() Pingback {
	if p.Attempts <= 0 {
		p.Attempts = 5
	}
	if p.Backoff <= 0 {
		p.Backoff = time.Second
	}
	if p.Timeout <= 0 {
		p.Timeout = 10 * time.Second
	}
	return p
}

// sendPingback calls back cb for task num with its answer a, retrying
// with backoff until a 2xx reply, the attempts run out or the gateway
// closes. Logs name the URL's host only.
//
// A JSON dialect's callbackUrl gets a POST whose body is what
// getTaskResult answers for the task then (body), its taskId included:
// CapMonster Cloud's createTask page says its callback's "Contents are
// sent by POST request and are same to the contents of getTaskResult
// method" (zennolab.atlassian.net/wiki/pages/viewpage.action?pageId=2127396885);
// Anti-Captcha's names callbackUrl without the call's shape.
func (g *Gateway) sendPingback(num string, cb callback, a answer, body []byte) {
	defer g.pingwait.Done()
	u, err := url.Parse(cb.url)
	if err != nil {
		return
	}
	if !cb.json {
		code := a.code
		if code == "" {
			code = a.plain
		}
		q := u.Query()
		q.Set("id", num)
		q.Set("code", code)
		u.RawQuery = q.Encode()
	}
	p := g.cfg.Pingback
	pause := p.Backoff
	log := g.log.With(slog.String("host", u.Hostname()), slog.String("id", num))
	for attempt := 1; ; attempt++ {
		status, err := g.call(u.String(), body)
		if err == nil && status/100 == 2 {
			return
		}
		if attempt >= p.Attempts {
			log.Warn("pingback: giving up", slog.Int("attempts", attempt), slog.Int("status", status), slog.Any("error", redactErr(err)))
			return
		}
		select {
		case <-g.ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, time.Minute)
	}
}

// call makes one callback: a GET of target, or a POST of body as JSON
// when there is one.
func (g *Gateway) call(target string, body []byte) (int, error) {
	ctx, cancel := context.WithTimeout(g.ctx, g.cfg.Pingback.Timeout)
	defer cancel()
	method, rd := http.MethodGet, io.Reader(nil)
	if body != nil {
		method, rd = http.MethodPost, bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := g.pingClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// redactErr drops the URL (whose query holds the token) from an HTTP
// client's error.
func redactErr(err error) error {
	if ue, ok := err.(*url.Error); ok {
		return ue.Err
	}
	return err
}
