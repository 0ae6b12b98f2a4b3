package solver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"
)

// DefaultOutageWarnAfter is Config.OutageWarnAfter's default.
const DefaultOutageWarnAfter = time.Minute

// DefaultStallAfter is Config.StallAfter's default. The service answers
// in.php and res.php within a second or two; a call with no reply after
// this long, while no other call got one since it was sent, means a
// service that accepts connections and answers nothing.
const DefaultStallAfter = 10 * time.Second

// Probe schedule during an outage: the first probe a second after the
// outage began, then each twice as late as the one before, at most
// DefaultOutageProbeMax apart (Config.OutageProbeMax). Each process probes
// at this pace on its own: a pool of n workers on one key sends at most n
// calls per 15 s once the outage has lasted half a minute.
const (
	probeFirst = time.Second
	// DefaultOutageProbeMax is Config.OutageProbeMax's default.
	DefaultOutageProbeMax = 15 * time.Second
)

// serverErrorsInARow is how many HTTP 5xx replies in a row, with no other
// reply between them, make an outage: one is a passing fault of one call,
// a run of them a service that is down behind its front.
const serverErrorsInARow = 3

// UnreachableCause describes err, a failed HTTP exchange with the service
// at base, when it means the service could not be reached at all, before
// any HTTP exchange: the connection (to it, or to the proxy in front of
// it) was refused or timed out, the host does not resolve, or TLS failed.
// Every call fails alike then, so it is an outage or a wrong base URL,
// never a fault of the task. It returns "" for other errors (a reset in
// mid-reply, a read timeout), which may have reached the service and stay
// NETWORK. The clients of both dialects classify with it (this package's,
// and package provider's TasksClient).
func UnreachableCause(err error, base string) string {
	host := base
	if u, perr := url.Parse(base); perr == nil && u.Host != "" {
		host = u.Host
	}
	var dnsErr *net.DNSError
	var opErr *net.OpError
	var recErr tls.RecordHeaderError
	var certErr *tls.CertificateVerificationError
	var unknownAuth x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var alert tls.AlertError
	switch {
	case errors.As(err, &dnsErr):
		return fmt.Sprintf("host %s not found (%s)", dnsErr.Name, dnsErr.Err)
	case errors.As(err, &recErr), errors.As(err, &certErr), errors.As(err, &unknownAuth),
		errors.As(err, &hostErr), errors.As(err, &alert),
		strings.Contains(err.Error(), "tls: "), strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return fmt.Sprintf("TLS with %s failed (%s)", host, tlsReason(err))
	case errors.As(err, &opErr) && opErr.Op == "proxyconnect":
		// The proxy in front of the service cannot be reached: nothing
		// was sent, as when the service itself refuses.
		return fmt.Sprintf("cannot reach the proxy to %s (%v)", host, opErr.Err)
	case errors.As(err, &opErr) && opErr.Op == "dial":
		switch {
		case isRefused(opErr):
			return "connection refused to " + host
		case opErr.Timeout():
			return "connection to " + host + " timed out"
		}
		return fmt.Sprintf("cannot connect to %s (%v)", host, opErr.Err)
	}
	return ""
}

func isRefused(e *net.OpError) bool {
	return strings.Contains(e.Err.Error(), "connection refused")
}

// tlsReason is the last part of a TLS error, without the URL the HTTP
// client puts in front.
func tlsReason(err error) string {
	msg := err.Error()
	if strings.Contains(msg, "server gave HTTP response to HTTPS client") {
		return "the server speaks plain HTTP: use http://"
	}
	if i := strings.LastIndex(msg, ": "); i >= 0 && strings.Contains(msg[:i], "tls") {
		return strings.TrimSpace(msg[strings.Index(msg, "tls"):])
	}
	return msg
}

// outage tracks whether the service answers. It begins at the first call
// that fails as an outage does (the service could not be reached, or gave
// no reply within StallAfter, or a run of HTTP 5xx) and ends at the first
// reply that is not a 5xx. While it lasts, no captcha is submitted: Submit
// answers CodeUnreachable at once (a capacity wait, no attempt spent),
// except for one call at a time on the probe schedule, which probes with
// getbalance and submits only if the service answered.
type outage struct {
	host string

	mu       sync.Mutex
	since    time.Time // zero: the service answers (or no call yet)
	last     string    // what failed last
	warned   time.Time // last WARN
	warnFrom time.Duration
	stall    time.Duration
	probeAt  time.Time     // the next probe may go then
	planned  time.Time     // when probeAt was planned: a clock read before it went back
	probeGap time.Duration // the wait before the next probe after this one
	probeMax time.Duration // the longest probeGap (Config.OutageProbeMax)
	probing  bool
	replied  time.Time // the last reply of any kind
	fives    int       // HTTP 5xx replies in a row
	inFives  int       // HTTP 5xx replies of in.php in a row, whatever res.php answered between
	inFrom   time.Time // when the run of inFives began
	answered time.Time // the last reply to a call other than in.php that was not a 5xx
	failedAt time.Time // the last call other than in.php that failed as an outage does, or any the service could not be reached for
	held     func() int
}

// active reports whether an outage is on.
func (o *outage) active() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return !o.since.IsZero()
}

// fail records a call that failed as an outage does (what says how) and
// logs at WARN when it begins the outage, then every warnFrom while it
// lasts.
func (o *outage) fail(ctx context.Context, log *slog.Logger, what string, now time.Time) {
	o.mu.Lock()
	o.failedAt = now
	o.mu.Unlock()
	o.down(ctx, log, what, now)
}

// down begins the outage, or keeps it on, and warns as fail says; unlike
// fail it does not say the service's other calls fail (a run of 5xx from
// in.php alone).
func (o *outage) down(ctx context.Context, log *slog.Logger, what string, now time.Time) {
	o.mu.Lock()
	start := o.since.IsZero()
	if start {
		o.since, o.warned = now, now
		first := min(probeFirst, o.probeMax)
		o.probeAt, o.probeGap, o.planned = now.Add(first), min(2*first, o.probeMax), now
	}
	o.last = what
	lasted := now.Sub(o.since)
	warn := !start && now.Sub(o.warned) >= o.warnFrom
	if warn {
		o.warned = now
	}
	o.mu.Unlock()
	switch {
	case start:
		log.LogAttrs(ctx, slog.LevelWarn, "the solving service does not answer: no captcha is submitted until it does; tasks wait without spending attempts",
			slog.String("host", o.host), slog.String("error", what), slog.Int("held", o.held()))
	case warn:
		log.LogAttrs(ctx, slog.LevelWarn, "the solving service is still unreachable; tasks wait without spending attempts",
			slog.String("host", o.host), slog.String("error", what), slog.Duration("for", lasted.Round(time.Second)),
			slog.Int("held", o.held()))
	}
}

// reply records an HTTP reply of op with status. A 5xx is no answer from
// the service itself: a run of serverErrorsInARow of them begins an
// outage, and so does such a run from in.php alone, whatever res.php
// answered between (the polls of captchas the service holds get replies
// while it takes none: an outage of submissions, which spends no task's
// attempt); any other reply ends the outage, if any, and the next in.php
// 5xx begins it again.
func (o *outage) reply(ctx context.Context, log *slog.Logger, op string, status int, now time.Time) {
	if status >= 500 {
		o.noWord(ctx, log, op, fmt.Sprintf("HTTP %d", status), now)
		return
	}
	o.mu.Lock()
	o.replied = now
	o.fives = 0
	if op == "in.php" {
		o.inFives = 0
	} else {
		o.answered = now
	}
	was, lasted := !o.since.IsZero(), now.Sub(o.since)
	o.since, o.last, o.warned = time.Time{}, "", time.Time{}
	o.mu.Unlock()
	if was {
		log.LogAttrs(ctx, slog.LevelWarn, "the solving service answers again: submissions resume at the service's rate",
			slog.String("host", o.host), slog.Duration("after", lasted.Round(time.Second)), slog.Int("held", o.held()))
	}
}

// noWord records a reply of op that is no word of the service: an HTTP
// 5xx, or a 200 whose body is no reply of the API (a front's page: a
// maintenance page, a CDN's). what says which. A run of
// serverErrorsInARow of them begins an outage, and so does such a run
// from in.php alone, whatever res.php answered between.
func (o *outage) noWord(ctx context.Context, log *slog.Logger, op, what string, now time.Time) {
	o.mu.Lock()
	o.replied = now
	o.fives++
	if op == "in.php" {
		if o.inFives == 0 {
			o.inFrom = now
		}
		o.inFives++
	} else {
		o.failedAt = now
	}
	n, in := o.fives, o.inFives
	o.mu.Unlock()
	switch {
	case n >= serverErrorsInARow:
		o.down(ctx, log, fmt.Sprintf("%s from %s, %d replies in a row that are no word of the service", what, o.host, n), now)
	case op == "in.php" && in >= serverErrorsInARow:
		o.down(ctx, log, fmt.Sprintf("%s from %s, %d in.php replies in a row that are no word of the service", what, o.host, in), now)
	}
}

// answersButInPHP reports whether the service answers its other calls
// while in.php answers 5xx, for an in.php 5xx to a call sent at sent: a
// call other than in.php got a reply that was no 5xx since then or since
// the run of in.php 5xx began, and none failed since. The in.php 5xx is
// then no outage of the service but a reply lost on its way back (a front
// that gave up waiting for it, say).
func (o *outage) answersButInPHP(sent time.Time) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	from := o.inFrom
	if sent.Before(from) {
		from = sent
	}
	return o.inFives > 0 && !o.answered.Before(from) && o.answered.After(o.failedAt)
}

// silent reports whether the service gives no word to its calls other
// than in.php: an outage is on, or the last of them failed.
func (o *outage) silent() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return !o.since.IsZero() || o.failedAt.After(o.answered)
}

// stalled is run StallAfter after a call was sent that has no reply yet:
// when no call got a reply since then either, the service accepts
// connections and answers nothing, an outage.
func (o *outage) stalled(ctx context.Context, log *slog.Logger, sent time.Time, now func() time.Time) {
	if !o.repliedSince(sent) {
		o.fail(ctx, log, fmt.Sprintf("no reply from %s for %v: it accepts connections and answers nothing", o.host, o.stall), now())
	}
}

// repliedSince reports whether any call got a reply after sent.
func (o *outage) repliedSince(sent time.Time) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.replied.After(sent)
}

// probe reports whether the caller is to probe the service now: an outage
// is on, its next probe is due and no other caller probes. The caller
// calls probed when done.
func (o *outage) probe(now time.Time) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.planned.Sub(now) > clockBack {
		// The clock went back since the probe was planned: the time to
		// the probe can no longer be told from it, and waiting for the
		// clock to reach probeAt again could take as long as the jump.
		// The probe is due now; the next is planned from the new reading.
		o.probeAt, o.planned = now, now
	}
	if o.since.IsZero() || o.probing || now.Before(o.probeAt) {
		return false
	}
	o.probing = true
	return true
}

// probed ends a probe and plans the next one.
func (o *outage) probed(now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.probing = false
	o.probeAt, o.planned = now.Add(o.probeGap), now
	o.probeGap = min(2*o.probeGap, o.probeMax)
}

// gate lets a submission through while the service answers. During an
// outage it probes the service when a probe is due (getbalance: free,
// and answered as fast as anything) and lets the submission through if
// the service answered; otherwise it returns a CodeUnreachable *Error at
// once, a capacity wait that spends no attempt and holds nothing.
func (c *Client) gate(ctx context.Context) error {
	if !c.outage.active() {
		return nil
	}
	if c.Probe(ctx) {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("solver: probe the service: %w", err)
	}
	return c.unanswered()
}

// Probe, during an outage (Unreachable), asks the service for the balance
// when the probe schedule says a probe is due (a second after the outage
// began, then at doubling gaps up to 15 s) and no other call of this
// Client probes now. It reports whether the service answers: true when
// no outage is on, or the probe got a reply. A worker calls it now and
// then, so that an outage ends when the service is back even while no
// captcha comes to be submitted.
func (c *Client) Probe(ctx context.Context) bool {
	if !c.outage.active() {
		return true
	}
	if c.outage.probe(c.now()) {
		_, _ = c.Balance(ctx) // the outage records what failed
		c.outage.probed(c.now())
	}
	return !c.outage.active()
}

// unanswered is Submit's error during an outage: a capacity wait.
func (c *Client) unanswered() error {
	since, why := c.Unreachable()
	if since.IsZero() {
		since, why = c.now(), errors.New("it answers again")
	}
	return newError("in.php", CodeUnreachable, fmt.Errorf("not submitted: the service at %s does not answer since %s (%v)",
		c.outage.host, since.UTC().Format(time.RFC3339), why))
}

// Unreachable reports an outage: since when the service has not answered
// (every call failed to reach it, got no reply within Config.StallAfter,
// or a run of HTTP 5xx), and what failed last, e.g. "connection refused
// to 127.0.0.1:8099: is the service's URL right?". It returns the zero
// time and nil while the service answers (or before the first call).
func (c *Client) Unreachable() (time.Time, error) {
	c.outage.mu.Lock()
	defer c.outage.mu.Unlock()
	if c.outage.since.IsZero() {
		return time.Time{}, nil
	}
	return c.outage.since, errors.New(c.outage.last)
}

// Held returns how many captchas of this Client the service has accepted
// and Solve still waits for: what the service holds of it.
func (c *Client) Held() int { return int(c.held.Load()) }
