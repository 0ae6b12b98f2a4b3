package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/captchaq/captchaq/stream"
)

// natsFlags are the connection flags every command that talks to NATS takes.
type natsFlags struct {
	url, user, password, creds, tlsCA string
	tlsCert, tlsKey                   string
	// jsDomain is the JetStream domain of the queue (the hub's, from a
	// leaf site); empty for the JetStream the connection reaches.
	jsDomain string
}

func (n *natsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&n.url, "nats", nats.DefaultURL, "NATS server URL; several, comma-separated, for a cluster")
	fs.StringVar(&n.user, "user", "", "NATS user name")
	fs.StringVar(&n.password, "password", "", "NATS password (prefer the environment variable: a flag value shows in ps)")
	fs.StringVar(&n.creds, "creds", "", "NATS credentials file (JWT and NKey seed)")
	fs.StringVar(&n.tlsCA, "tls-ca", "", "CA certificate (PEM) to verify the NATS server's TLS certificate")
	fs.StringVar(&n.tlsCert, "tls-cert", "", "client certificate (PEM), for a server that requires one (mutual TLS); with --tls-key")
	fs.StringVar(&n.tlsKey, "tls-key", "", "private key (PEM) of --tls-cert")
	fs.StringVar(&n.jsDomain, "js-domain", "", "JetStream domain of the queue: the hub's, from a site linked to it as a leaf node (docs/across-sites.md)")
}

// topology is top in the queue's domain.
func (n *natsFlags) topology(top stream.Topology) stream.Topology {
	top.Domain = n.jsDomain
	return top
}

// who names the identity the flags connect as, for error messages.
func (n *natsFlags) who() string {
	switch {
	case n.user != "":
		return "user " + strconv.Quote(n.user)
	case n.creds != "":
		return "the user of " + n.creds
	}
	return "the anonymous user"
}

// connect dials NATS with the flags' credentials; name identifies the client.
// With several URLs it connects to any and fails over to the others.
func (n *natsFlags) connect(ctx context.Context, name string) (*nats.Conn, *asyncErrors, error) {
	if err := n.checkURLs(); err != nil {
		return nil, nil, err
	}
	ae := &asyncErrors{who: n.who()}
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.Timeout(5 * time.Second),
		nats.ErrorHandler(ae.handler),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if log := ae.logger(); log != nil && err != nil {
				log.Warn("disconnected from NATS; reconnecting", slog.Any("error", err))
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			if log := ae.logger(); log != nil {
				log.Info("reconnected to NATS", slog.String("server", nc.ConnectedUrlRedacted()))
			}
		}),
	}
	if n.user != "" {
		opts = append(opts, nats.UserInfo(n.user, n.password))
	}
	if n.creds != "" {
		opts = append(opts, nats.UserCredentials(n.creds))
	}
	tc, err := n.tlsConfig()
	if err != nil {
		return nil, nil, err
	}
	if tc != nil {
		opts = append(opts, nats.Secure(tc))
	}
	nc, err := nats.Connect(n.url, opts...)
	if err != nil {
		return nil, nil, n.connectError(err)
	}
	return nc, ae, nil
}

// checkURLs refuses a --nats list with an entry that names no host:
// nats.go dials 127.0.0.1:4222 for "", "nats://" or "nats://:4222", and the
// command would talk to whatever server holds that port as if it were the
// one meant (a variable left empty, or built from the address file of a
// server that failed to start).
func (n *natsFlags) checkURLs() error {
	for _, u := range strings.Split(n.url, ",") {
		s := strings.TrimSpace(u)
		if !strings.Contains(s, "://") {
			s = "nats://" + s // nats.go takes host:port alone
		}
		if p, err := url.Parse(s); err != nil || p.Hostname() == "" {
			return usageError("--nats %q names no host: want a server URL such as %s (%s)", redactURLs(n.url), nats.DefaultURL, envName("nats"))
		}
	}
	return nil
}

// Backoff of connectPatiently between attempts.
const (
	natsWaitFirst = 250 * time.Millisecond
	natsWaitMax   = 15 * time.Second
)

// connectPatiently is connect for long-running commands (worker): while no
// server answers at the URLs it waits, with backoff, and says so in log,
// as a worker does for the solving service. A server that answers and
// refuses (credentials, TLS) is an error at once: waiting would not help.
func (n *natsFlags) connectPatiently(ctx context.Context, name string, log *slog.Logger) (*nats.Conn, *asyncErrors, error) {
	b := newBackoff()
	for {
		nc, ae, err := n.connect(ctx, name)
		if err == nil || !errors.Is(err, nats.ErrNoServers) {
			if err == nil && time.Since(b.start) > natsWaitFirst {
				log.Info("connected to the NATS server", slog.String("nats", nc.ConnectedUrlRedacted()),
					slog.Duration("after", b.waited()))
			}
			return nc, ae, err
		}
		log.Warn("waiting for the NATS server: none answers yet", slog.String("nats", redactURLs(n.url)),
			slog.Duration("for", b.waited()), slog.Duration("retry_in", b.wait))
		if !b.sleep(ctx) {
			return nil, nil, fmt.Errorf("no NATS server answered at %s in %s: %w", redactURLs(n.url), b.waited(), err)
		}
	}
}

// backoff paces a patient loop (connectPatiently, untilQueue,
// ensureTopologyPatiently): natsWaitFirst after the first failed try, twice
// as long after each next one, at most natsWaitMax.
type backoff struct {
	start time.Time     // of the first try
	wait  time.Duration // before the next try
}

func newBackoff() *backoff { return &backoff{start: time.Now(), wait: natsWaitFirst} }

// waited is how long the loop has been trying, to the second, for logs.
func (b *backoff) waited() time.Duration { return time.Since(b.start).Round(time.Second) }

// sleep waits b.wait and doubles it; false if ctx ended first.
func (b *backoff) sleep(ctx context.Context) bool {
	t := time.NewTimer(b.wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	}
	b.wait = min(2*b.wait, natsWaitMax)
	return true
}

// tlsConfig is the TLS the flags ask for: the CA that signed the server's
// certificate and a client certificate for mutual TLS, or nil for neither
// (a tls:// URL then verifies the server against the system's roots).
func (n *natsFlags) tlsConfig() (*tls.Config, error) {
	if n.tlsCA == "" && n.tlsCert == "" && n.tlsKey == "" {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if n.tlsCA != "" {
		pem, err := os.ReadFile(n.tlsCA)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca %s: no PEM certificate in it", n.tlsCA)
		}
	}
	switch {
	case n.tlsCert == "" && n.tlsKey == "":
	case n.tlsCert == "" || n.tlsKey == "":
		return nil, usageError("--tls-cert and --tls-key go together (%s, %s): give both or neither", envName("tls-cert"), envName("tls-key"))
	default:
		// LoadX509KeyPair's errors name neither file, and never show the
		// key's bytes.
		cert, err := tls.LoadX509KeyPair(n.tlsCert, n.tlsKey)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert %s / --tls-key %s: %w", n.tlsCert, n.tlsKey, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// connectError says in one line why the server would not take us.
func (n *natsFlags) connectError(err error) error {
	where := redactURLs(n.url)
	switch {
	case errors.Is(err, nats.ErrAuthorization) && n.user == "" && n.creds == "":
		return fmt.Errorf("connect to %s: the server requires credentials: set --user and --password (%s, %s) or --creds (%s): %w",
			where, envName("user"), envName("password"), envName("creds"), err)
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked):
		return fmt.Errorf("connect to %s: authentication failed for %s (wrong user name or password?): %w", where, n.who(), err)
	case closedAtTLSHandshake(err) && n.tlsCert == "":
		return fmt.Errorf("connect to %s: the server closed the connection at the TLS handshake, likely for want of a client certificate (mutual TLS): set --tls-cert and --tls-key (%s, %s): %w",
			where, envName("tls-cert"), envName("tls-key"), err)
	case closedAtTLSHandshake(err):
		return fmt.Errorf("connect to %s: the server refused the client certificate --tls-cert %s (signed by a CA it does not trust, expired, or not for client use?): %w",
			where, n.tlsCert, err)
	}
	return fmt.Errorf("connect to %s as %s: %w", where, n.who(), err)
}

// closedAtTLSHandshake reports whether the server ended the connection at
// the TLS handshake as one that checks client certificates does when it
// refuses one or gets none. Under TLS 1.3 the client's side of the
// handshake is complete before the server has checked its certificate, so
// the refusal arrives either as the server's alert about a certificate
// ("remote error: tls: certificate required", "… bad certificate", "…
// unknown certificate authority"; text only: crypto/tls keeps the alert
// type unexported) or, depending on timing, as the connection closing
// under nats.go, which then says so. OpenSSL-based proxies answer a missing
// certificate with "handshake failure", which a cipher mismatch also gets:
// the hint is worded as a likelihood. Other alerts (a protocol version) get
// no hint.
func closedAtTLSHandshake(err error) bool {
	msg := err.Error()
	if _, alert, ok := strings.Cut(msg, "remote error: tls:"); ok {
		return strings.Contains(alert, "certificate") || strings.Contains(alert, "handshake failure")
	}
	return errors.Is(err, nats.ErrTLS) && strings.Contains(msg, "closed by remote after TLS handshake")
}

// redactURLs hides passwords in a comma-separated list of URLs, with or
// without a scheme (nats.go takes "user:pw@host:port" as well).
func redactURLs(list string) string {
	parts := strings.Split(list, ",")
	for i, p := range parts {
		parts[i] = redactNATSURL(strings.TrimSpace(p))
	}
	return strings.Join(parts, ",")
}

func redactNATSURL(p string) string {
	at := strings.LastIndexByte(p, '@')
	if at < 0 {
		return p
	}
	raw, schemeless := p, !strings.Contains(p, "://")
	if schemeless {
		raw = "nats://" + p
	}
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		// Whatever stands before the '@' may be a password.
		return "REDACTED@" + p[at+1:]
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "REDACTED")
	}
	out := u.String()
	if schemeless {
		out = strings.TrimPrefix(out, "nats://")
	}
	return out
}

// session is a producer's connection: the client, a context that ends as
// soon as the server refuses one of its operations, and what explains errors.
type session struct {
	ctx    context.Context
	client *stream.Client
	// admin makes the admin's changes (replay, purge, pause) on the same
	// connection.
	admin *stream.Admin
	ae    *asyncErrors
	close func()
}

// session connects as name and binds a producer client, and an admin on the
// same connection. The caller defers close.
func (n *natsFlags) session(ctx context.Context, name string, cfg stream.ClientConfig) (*session, error) {
	nc, ae, err := n.connect(ctx, name)
	if err != nil {
		return nil, err
	}
	fctx, cancel := ae.failFast(ctx)
	cfg.Topology = n.topology(cfg.Topology)
	c, err := stream.NewClient(fctx, nc, cfg)
	if err != nil {
		cancel()
		nc.Close()
		return nil, explain(err, ae)
	}
	adm, err := stream.NewAdmin(nc, stream.AdminConfig{Topology: cfg.Topology, DefaultDeadline: cfg.DefaultDeadline, Name: cfg.Name, Now: cfg.Now})
	if err != nil {
		cancel()
		nc.Close()
		return nil, explain(err, ae)
	}
	return &session{ctx: fctx, client: c, admin: adm, ae: ae, close: func() { cancel(); nc.Close() }}, nil
}

// withSession runs do in a session as name (session): with its context,
// which ends as soon as the server refuses one of the session's operations,
// its client, and what explains its errors. The session closes when do
// returns.
func (n *natsFlags) withSession(ctx context.Context, name string, cfg stream.ClientConfig, do func(context.Context, *stream.Client, *asyncErrors) error) error {
	return n.withAdminSession(ctx, name, cfg, func(ctx context.Context, c *stream.Client, _ *stream.Admin, ae *asyncErrors) error {
		return do(ctx, c, ae)
	})
}

// withAdminSession is withSession for a command that makes the admin's
// changes: do gets the session's admin too.
func (n *natsFlags) withAdminSession(ctx context.Context, name string, cfg stream.ClientConfig,
	do func(context.Context, *stream.Client, *stream.Admin, *asyncErrors) error) error {
	ss, err := n.session(ctx, name, cfg)
	if err != nil {
		return err
	}
	defer ss.close()
	return do(ss.ctx, ss.client, ss.admin, ss.ae)
}

// connectInProcess connects to ns in process as name: as user when a
// password is set (a nats.conf with users), else without credentials.
func connectInProcess(ns *server.Server, name, user, password string) (*nats.Conn, error) {
	// The server is this process: the only wait is its bcrypt check of the
	// password, which a loaded machine can stretch past nats.go's default
	// 2 s, and giving up then would stop a server that is fine.
	opts := []nats.Option{nats.InProcessServer(ns), nats.Name(name), nats.Timeout(20 * time.Second)}
	if password != "" {
		opts = append(opts, nats.UserInfo(user, password))
	}
	return connectPastFirstPing(func() (*nats.Conn, error) { return nats.Connect("", opts...) })
}

// connectPastFirstPing connects, again up to three more times when the
// server's first PING came before its PONG to the client's handshake:
// nats.go takes any line but PONG there for a failed connect ("nats:
// expected 'PONG', got 'PING'"), and nats-server sends a new client its
// first PING after about two seconds, which a loaded machine's bcrypt check
// of the password can outlast (nats-io/nats-server#1174). Seen at load 17
// in the across-sites walkthrough: the hub's server stopped at startup.
func connectPastFirstPing(connect func() (*nats.Conn, error)) (*nats.Conn, error) {
	nc, err := connect()
	for tries := 1; err != nil && tries < 4 && pingBeforePong(err); tries++ {
		nc, err = connect()
	}
	return nc, err
}

// pingBeforePong reports whether err is nats.go's handshake failure on a
// PING that came before the server's PONG (it has no error value of its own).
func pingBeforePong(err error) bool {
	return strings.Contains(err.Error(), "expected 'PONG', got 'PING'")
}
