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
const DefaultOutageWarnAfter = 3 * time.Minute

// outageWarnEvery is how often a lasting outage is logged at WARN.
const outageWarnEvery = time.Minute

// unreachable describes err when it means the service could not be reached
// at all, before any HTTP exchange: the connection was refused or timed out,
// the host does not resolve, or TLS failed. Every call fails alike then, so
// it is an outage or a wrong base URL, never a fault of the task. It
// returns "" for other errors (a reset in mid-reply, a read timeout), which
// stay NETWORK.
func unreachable(err error, base string) string {
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

// outage tracks whether the service has been unreachable since some time.
type outage struct {
	mu       sync.Mutex
	since    time.Time // zero: reachable (or never tried)
	last     string    // what failed last
	warned   time.Time // last WARN
	warnFrom time.Duration
}

// fail records an unreachable call and logs: once at INFO when the outage
// starts, then at WARN every minute once it has lasted warnFrom.
func (o *outage) fail(ctx context.Context, log *slog.Logger, what string, now time.Time) {
	o.mu.Lock()
	start := o.since.IsZero()
	if start {
		o.since = now
	}
	o.last = what
	lasted := now.Sub(o.since)
	warn := lasted >= o.warnFrom && now.Sub(o.warned) >= outageWarnEvery
	if warn {
		o.warned = now
	}
	o.mu.Unlock()
	switch {
	case warn:
		log.LogAttrs(ctx, slog.LevelWarn, "the solving service is still unreachable; tasks wait without spending attempts",
			slog.String("error", what), slog.Duration("for", lasted.Round(time.Second)))
	case start:
		log.LogAttrs(ctx, slog.LevelInfo, "the solving service is unreachable; tasks wait without spending attempts",
			slog.String("error", what))
	}
}

// ok records a call that got an HTTP reply: the outage, if any, is over.
func (o *outage) ok(ctx context.Context, log *slog.Logger, now time.Time) {
	o.mu.Lock()
	was, lasted := !o.since.IsZero(), now.Sub(o.since)
	o.since, o.last, o.warned = time.Time{}, "", time.Time{}
	o.mu.Unlock()
	if was {
		log.LogAttrs(ctx, slog.LevelInfo, "the solving service is reachable again", slog.Duration("after", lasted.Round(time.Second)))
	}
}

// Unreachable reports an outage: since when every call to the service has
// failed without reaching it (connection refused, DNS or TLS failure), and
// what failed last, e.g. "connection refused to 127.0.0.1:8099: is the
// service's URL right?". It returns the zero time and nil while the
// service answers (or before the first call).
func (c *Client) Unreachable() (time.Time, error) {
	c.outage.mu.Lock()
	defer c.outage.mu.Unlock()
	if c.outage.since.IsZero() {
		return time.Time{}, nil
	}
	return c.outage.since, errors.New(c.outage.last)
}
