package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/stream"
)

// newFlagSet returns a flag set whose usage lists each flag's environment
// variable. The usage goes to stdout (help asked for is output: `captchaq
// worker --help | less`); errors are one line on stderr (parseFlags).
func newFlagSet(name, synopsis string, stdout io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stdout)
	fs.Usage = func() {
		fmt.Fprintf(stdout, "Usage: captchaq %s %s\n\nFlags (each also from its environment variable):\n", name, synopsis)
		fs.VisitAll(func(f *flag.Flag) {
			def := ""
			if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" && !strings.Contains(f.Usage, "(default") {
				def = fmt.Sprintf(" (default %s)", f.DefValue)
			}
			env := envName(f.Name)
			if typedOnly(name, f.Name) {
				env = "no environment variable: type it"
			}
			fmt.Fprintf(stdout, "  --%s  [%s]\n      %s%s\n", f.Name, env, f.Usage, def)
		})
	}
	return fs
}

// envName is the environment variable of a flag: CAPTCHAQ_ and the flag's
// name in upper snake case.
// storeKeyEnv holds the key that encrypts the JetStream store at rest
// (`captchaq server` and `run`; the shipped nats.conf reads it too). Only the
// environment sets it: a flag value shows in ps.
const storeKeyEnv = "CAPTCHAQ_STORE_KEY"

func envName(flagName string) string {
	return "CAPTCHAQ_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// flagSetParsed, when set (by tests), sees every flag set parseFlags parsed.
var flagSetParsed func(*flag.FlagSet)

// noEnv are flags no environment variable may set: confirmations must be
// typed, and so must what a destructive verb selects ("dead purge
// --method"): a variable left exported for a listing must not widen, narrow
// or refuse what a purge or a replay acts on. A key is a flag's name (every
// command) or a command and a flag ("dead purge --since").
var noEnv = map[string]bool{"yes": true, "all": true,
	"dead purge --method": true, "dead purge --reason": true, "dead purge --since": true,
	"dead replay --method": true, "dead replay --reason": true, "dead replay --since": true}

// typedOnly says whether flag flagName of command (a flag set's name) is
// taken from the command line only.
func typedOnly(command, flagName string) bool {
	return noEnv[flagName] || noEnv[command+" --"+flagName]
}

// parseFlags sets every flag from its environment variable, then from args:
// the command line wins.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if flagSetParsed != nil {
		defer flagSetParsed(fs)
	}
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if typedOnly(fs.Name(), f.Name) {
			return
		}
		if v, ok := os.LookupEnv(envName(f.Name)); ok {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", envName(f.Name), v, err))
			}
		}
	})
	if len(errs) > 0 {
		return &exitError{code: 2, err: errors.Join(errs...)}
	}
	// Flags may come before, between or after the arguments (`dead show ID
	// --json`): parse, set the first leftover argument aside, go on. A "--"
	// ends the flags as usual.
	// The flag package prints its error and the whole usage on a bad flag;
	// the caller prints one line instead (flagError), and the usage only
	// when asked for.
	usage, out := fs.Usage, fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	defer func() { fs.Usage = usage; fs.SetOutput(out) }()
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				usage()
				return err
			}
			return flagError(fs.Name(), err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			positional = append(positional, rest...)
			break
		}
		positional, args = append(positional, rest[0]), rest[1:]
	}
	// Leave the arguments where fs.Arg and fs.NArg find them.
	return fs.Parse(append([]string{"--"}, positional...))
}

// dashFlag finds the flag package's spelling of a flag name, "-name".
var dashFlag = regexp.MustCompile(`(^|[\s:])-([A-Za-z0-9][A-Za-z0-9_-]*)`)

// flagError is a bad flag or flag value as one line: the flag spelled
// --name as the usage spells it, and where to read more.
func flagError(command string, err error) error {
	msg := dashFlag.ReplaceAllString(err.Error(), "$1--$2")
	return &exitError{code: 2, err: fmt.Errorf("%s (see captchaq %s --help)", msg, command)}
}

// parseArgs parses args into fs (parseFlags) and refuses more than n
// arguments after the flags (wantArgs), the way every command starts.
func parseArgs(fs *flag.FlagSet, args []string, n int) error {
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	return wantArgs(fs, n)
}

// wantArgs refuses a command line with more arguments than the command
// takes (n; 0 for none), naming the ones it does not take, before the
// command does anything.
func wantArgs(fs *flag.FlagSet, n int) error {
	if fs.NArg() <= n {
		return nil
	}
	extra := fs.Args()[n:]
	quoted := make([]string, len(extra))
	for i, a := range extra {
		quoted[i] = strconv.Quote(a)
	}
	what := "no arguments"
	if n > 0 {
		what = fmt.Sprintf("%d argument(s)", n)
	}
	s := ""
	if len(extra) > 1 {
		s = "s"
	}
	return usageError("%s: unexpected argument%s %s: it takes %s (see captchaq %s --help)", fs.Name(), s, strings.Join(quoted, " "), what, fs.Name())
}

// usageError is a wrong command line: exit code 2.
func usageError(format string, args ...any) error {
	return &exitError{code: 2, err: fmt.Errorf(format, args...)}
}

// logFlags are the logging flags every long-running command takes.
type logFlags struct {
	format, level string
}

func (l *logFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&l.format, "log-format", "text", "log format: text or json")
	fs.StringVar(&l.level, "log-level", "info", "log level: debug, info, warn or error")
}

func (l *logFlags) logger(w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(l.level)); err != nil {
		return nil, usageError("--log-level %q: want debug, info, warn or error", l.level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch l.format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usageError("--log-format %q: want text or json", l.format)
}

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

// jetStream is the JetStream handle of nc in the queue's domain.
func (n *natsFlags) jetStream(nc *nats.Conn, opts ...jetstream.JetStreamOpt) (jetstream.JetStream, error) {
	return stream.JetStream(nc, n.jsDomain, opts...)
}

// topology is top in the queue's domain.
func (n *natsFlags) topology(top stream.Topology) stream.Topology {
	top.Domain = n.jsDomain
	return top
}

// asyncErrors keeps the last asynchronous error of a connection (permission
// violations and authorization errors arrive that way, not as the failing
// call's error) so that a call's timeout can be explained, cancels the
// contexts registered with failFast when the server refuses an operation, and
// logs connection trouble once a logger is set.
type asyncErrors struct {
	who string // "user NAME", "the user of FILE", or "no user": for messages

	mu      sync.Mutex
	last    error
	log     *slog.Logger
	next    int
	cancels map[int]context.CancelCauseFunc
	refused func(*PermissionError) // if set, sees every refusal
}

// PermissionError is a subject the server refused this connection's user.
type PermissionError struct {
	// Who names the user: "user producer", "the user of app.creds".
	Who string
	// Op is "publish" or "subscribe".
	Op string
	// Subject is the refused subject.
	Subject string
}

func (e *PermissionError) Error() string {
	msg := fmt.Sprintf("permission denied: %s may not %s to %q", e.Who, e.Op, e.Subject)
	// A client creates a stream only when it finds none: the server is not
	// captchaq's yet (or not at all), which says more than the refusal.
	if name, ok := strings.CutPrefix(e.Subject, "$JS.API.STREAM.CREATE."); ok && e.Op == "publish" {
		msg += fmt.Sprintf(": the stream %s does not exist on this server: `captchaq server` creates it as admin as it starts (or `captchaq init`, as admin)", name)
	}
	return msg
}

// Unwrap makes the error match nats.ErrPermissionViolation.
func (e *PermissionError) Unwrap() error { return nats.ErrPermissionViolation }

var permissionRe = regexp.MustCompile(`(?i)permissions violation for (publish|subscription) to "([^"]+)"`)

// permissionError turns the server's "Permissions Violation for Publish to
// "X"" into a *PermissionError naming the user; nil if err is no violation.
func permissionError(who string, err error) *PermissionError {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return nil
	}
	pe := &PermissionError{Who: who, Op: "publish", Subject: "?"}
	if m := permissionRe.FindStringSubmatch(err.Error()); m != nil {
		pe.Subject = m[2]
		if strings.EqualFold(m[1], "subscription") {
			pe.Op = "subscribe"
		}
	}
	return pe
}

func (a *asyncErrors) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	if pe := permissionError(a.who, err); pe != nil {
		err = pe
	}
	a.mu.Lock()
	a.last = err
	log := a.log
	var cancels []context.CancelCauseFunc
	refused := a.refused
	pe, isPerm := err.(*PermissionError)
	if isPerm {
		for _, c := range a.cancels {
			cancels = append(cancels, c)
		}
	}
	a.mu.Unlock()
	for _, c := range cancels {
		c(err)
	}
	if isPerm && refused != nil {
		refused(pe)
	}
	if log != nil {
		log.Error("NATS server refused an operation", slog.Any("error", err))
	}
}

func (a *asyncErrors) get() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.last
}

// setLogger makes later asynchronous errors, disconnections and
// reconnections show in log.
func (a *asyncErrors) setLogger(log *slog.Logger) {
	a.mu.Lock()
	a.log = log
	a.mu.Unlock()
}

// onRefused makes f see every operation the server refuses from now on.
func (a *asyncErrors) onRefused(f func(*PermissionError)) {
	a.mu.Lock()
	a.refused = f
	a.mu.Unlock()
}

func (a *asyncErrors) logger() *slog.Logger {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.log
}

// failFast returns a context that ends as soon as the server refuses an
// operation of this connection, with the *PermissionError as its cause, so
// that a refused request fails at once rather than after its timeout.
func (a *asyncErrors) failFast(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	a.mu.Lock()
	if a.cancels == nil {
		a.cancels = map[int]context.CancelCauseFunc{}
	}
	id := a.next
	a.next++
	a.cancels[id] = cancel
	a.mu.Unlock()
	return ctx, func() {
		a.mu.Lock()
		delete(a.cancels, id)
		a.mu.Unlock()
		cancel(context.Canceled)
	}
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
	wait := natsWaitFirst
	start := time.Now()
	for {
		nc, ae, err := n.connect(ctx, name)
		if err == nil || !errors.Is(err, nats.ErrNoServers) {
			if err == nil && time.Since(start) > natsWaitFirst {
				log.Info("connected to the NATS server", slog.String("nats", nc.ConnectedUrlRedacted()),
					slog.Duration("after", time.Since(start).Round(time.Second)))
			}
			return nc, ae, err
		}
		log.Warn("waiting for the NATS server: none answers yet", slog.String("nats", redactURLs(n.url)),
			slog.Duration("for", time.Since(start).Round(time.Second)), slog.Duration("retry_in", wait))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil, fmt.Errorf("no NATS server answered at %s in %s: %w", redactURLs(n.url), time.Since(start).Round(time.Second), err)
		case <-t.C:
		}
		wait = min(2*wait, natsWaitMax)
	}
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

// explain turns an error that would otherwise read as a bare timeout or
// cancellation into one line that says what the server refused: the
// connection's last asynchronous error (a permission violation names the
// subject and the user), or ctx's cause when failFast ended it.
func explain(err error, ae *asyncErrors) error {
	if err == nil || ae == nil {
		return err
	}
	last := ae.get()
	if last == nil || strings.Contains(err.Error(), last.Error()) || errors.Is(err, stream.ErrNoTopology) {
		// A missing topology says all there is to say: the refusal that
		// came with it is the optional question of which domain was
		// reached, which a producer or worker may not ask.
		return err
	}
	if pe, ok := last.(*PermissionError); ok {
		// The call failed because the refusal cancelled it: its own
		// "context canceled" says nothing more.
		return fmt.Errorf("%w (%s)", pe, strings.TrimSuffix(err.Error(), ": "+context.Canceled.Error()))
	}
	return fmt.Errorf("%w (server said: %v)", err, last)
}

// apiKey reads the solving service's key: from CAPTCHAAI_API_KEY, or from
// the file named by --key-file. Never from a flag value, which ps shows.
func apiKey(keyFile string) (string, error) {
	if keyFile != "" {
		b, err := os.ReadFile(keyFile)
		if err != nil {
			return "", fmt.Errorf("--key-file: %w", err)
		}
		k := strings.TrimSpace(string(b))
		if k == "" {
			return "", fmt.Errorf("--key-file %s: empty", keyFile)
		}
		return k, nil
	}
	return strings.TrimSpace(os.Getenv("CAPTCHAAI_API_KEY")), nil
}

// session is a producer's connection: the client, a context that ends as
// soon as the server refuses one of its operations, and what explains errors.
type session struct {
	ctx    context.Context
	client *stream.Client
	ae     *asyncErrors
	close  func()
}

// session connects as name and binds a producer client. The caller defers
// close.
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
	return &session{ctx: fctx, client: c, ae: ae, close: func() { cancel(); nc.Close() }}, nil
}

// subcommand is one verb of a command that has several (dead, task, lane,
// workers): its synopsis and what it does.
type subcommand struct {
	name, synopsis, summary string
}

// pickSubcommand takes the verb off args. With none, an unknown one, or a
// request for help (`dead --help`, `dead help`, `help dead`) it prints the
// command's verbs and returns flag.ErrHelp (help) or a usage error.
func pickSubcommand(command string, subs []subcommand, args []string, stdout io.Writer) (string, []string, error) {
	list := func(w io.Writer) {
		fmt.Fprintf(w, "Usage:\n")
		for _, s := range subs {
			fmt.Fprintf(w, "  captchaq %s %s %s\n      %s\n", command, s.name, s.synopsis, s.summary)
		}
		fmt.Fprintf(w, "\nRun `captchaq %s VERB --help` for a verb's flags.\n", command)
	}
	if len(args) == 0 {
		var b strings.Builder
		list(&b)
		return "", nil, usageError("%s: want a verb\n%s", command, strings.TrimRight(b.String(), "\n"))
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		if len(args) > 1 && args[0] == "help" {
			return args[1], []string{"--help"}, nil
		}
		list(stdout)
		return "", nil, flag.ErrHelp
	}
	for _, s := range subs {
		if s.name == args[0] {
			return args[0], args[1:], nil
		}
	}
	names := make([]string, len(subs))
	for i, s := range subs {
		names[i] = s.name
	}
	return "", nil, usageError("%s: unknown verb %q: want one of %s (see captchaq %s --help)", command, args[0], strings.Join(names, ", "), command)
}
