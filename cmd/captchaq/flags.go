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
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// newFlagSet returns a flag set whose usage lists each flag's environment
// variable.
func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: captchaq %s %s\n\nFlags (each also from its environment variable):\n", name, synopsis)
		fs.VisitAll(func(f *flag.Flag) {
			def := ""
			if f.DefValue != "" && f.DefValue != "false" {
				def = fmt.Sprintf(" (default %s)", f.DefValue)
			}
			fmt.Fprintf(stderr, "  --%s  [%s]\n      %s%s\n", f.Name, envName(f.Name), f.Usage, def)
		})
	}
	return fs
}

// envName is the environment variable of a flag: CAPTCHAQ_ and the flag's
// name in upper snake case.
func envName(flagName string) string {
	return "CAPTCHAQ_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parseFlags sets every flag from its environment variable, then from args:
// the command line wins.
func parseFlags(fs *flag.FlagSet, args []string) error {
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if v, ok := os.LookupEnv(envName(f.Name)); ok {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", envName(f.Name), v, err))
			}
		}
	})
	if len(errs) > 0 {
		return &exitError{code: 2, err: errors.Join(errs...)}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &exitError{code: 2, err: err}
	}
	return nil
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
}

func (n *natsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&n.url, "nats", nats.DefaultURL, "NATS server URL; several, comma-separated, for a cluster")
	fs.StringVar(&n.user, "user", "", "NATS user name")
	fs.StringVar(&n.password, "password", "", "NATS password (prefer the environment variable: a flag value shows in ps)")
	fs.StringVar(&n.creds, "creds", "", "NATS credentials file (JWT and NKey seed)")
	fs.StringVar(&n.tlsCA, "tls-ca", "", "CA certificate (PEM) to verify the NATS server's TLS certificate")
}

// asyncErrors keeps the last asynchronous error of a connection (permission
// violations and authorization errors arrive that way, not as the failing
// call's error) so that a call's timeout can be explained.
type asyncErrors struct {
	mu   sync.Mutex
	last error
}

func (a *asyncErrors) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	a.mu.Lock()
	a.last = err
	a.mu.Unlock()
}

func (a *asyncErrors) get() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.last
}

// connect dials NATS with the flags' credentials; name identifies the client.
func (n *natsFlags) connect(ctx context.Context, name string) (*nats.Conn, *asyncErrors, error) {
	ae := &asyncErrors{}
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.Timeout(5 * time.Second),
		nats.ErrorHandler(ae.handler),
	}
	if n.user != "" {
		opts = append(opts, nats.UserInfo(n.user, n.password))
	}
	if n.creds != "" {
		opts = append(opts, nats.UserCredentials(n.creds))
	}
	if n.tlsCA != "" {
		pem, err := os.ReadFile(n.tlsCA)
		if err != nil {
			return nil, nil, fmt.Errorf("--tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, nil, fmt.Errorf("--tls-ca %s: no PEM certificate in it", n.tlsCA)
		}
		opts = append(opts, nats.Secure(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}))
	}
	nc, err := nats.Connect(n.url, opts...)
	if err != nil {
		who := "without credentials"
		if n.user != "" {
			who = "as user " + n.user
		}
		return nil, nil, fmt.Errorf("connect to %s %s: %w", n.url, who, err)
	}
	return nc, ae, nil
}

// explain adds the connection's last asynchronous error (a permission
// violation, say) to an error that would otherwise read as a bare timeout.
func explain(err error, ae *asyncErrors) error {
	if err == nil || ae == nil {
		return err
	}
	if last := ae.get(); last != nil && !strings.Contains(err.Error(), last.Error()) {
		return fmt.Errorf("%w (server said: %v)", err, last)
	}
	return err
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
