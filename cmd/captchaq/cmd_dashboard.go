package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/captchaq/captchaq/dashboard"
	"github.com/captchaq/captchaq/internal/httpguard"
	"github.com/captchaq/captchaq/stream"
)

func runDashboard(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("dashboard", "[--addr 127.0.0.1:8080] [flags]", stdout)
	addr := fs.String("addr", "127.0.0.1:8080", "listen on this address; beyond loopback only with --token")
	token := fs.String("token", "", "require this token of every browser (open the page with ?token=…); required beyond loopback")
	var hosts hostsFlag
	fs.Var(&hosts, "allowed-host", "also answer to this host name (or host:port) besides the listen address, e.g. the name a reverse proxy or a browser uses; repeat, or separate with commas")
	refresh := fs.Duration("refresh", time.Second, "how often the page gets a new snapshot (at least 250ms)")
	nf := addFlags[natsFlags](fs)
	lf := addFlags[logFlags](fs)
	log, err := lf.parseArgs(fs, args, 0, stderr)
	if err != nil {
		return err
	}
	if *refresh < 250*time.Millisecond {
		return usageError("--refresh %s: at least 250ms", *refresh)
	}
	if err := checkDashAddr("addr", "token", *addr, *token); err != nil {
		return err
	}
	l, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("--addr: %w", err)
	}
	defer l.Close()
	ss, err := nf.session(ctx, "captchaq-dashboard", stream.ClientConfig{Name: "captchaq-dashboard"})
	if err != nil {
		return err
	}
	defer ss.close()
	connect := func(ctx context.Context, user, password string) (*nats.Conn, error) {
		as := *nf
		as.user, as.password, as.creds = user, password, ""
		nc, _, err := as.connect(ctx, "captchaq-dashboard-change")
		return nc, err
	}
	return serveDashboard(ss.ctx, dashboard.Config{Client: ss.client, Connect: connect, Refresh: *refresh, Token: *token, Hosts: hosts, Logger: log},
		l, stdout, log)
}

// checkDashAddr refuses to listen beyond loopback without a token; flag and
// tokenFlag name the command's flags of the address and the token.
func checkDashAddr(flag, tokenFlag, addr, token string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return usageError("--%s %q: want host:port: %v", flag, addr, err)
	}
	if ip := net.ParseIP(host); token == "" && (ip == nil || !ip.IsLoopback()) && host != "localhost" {
		return usageError("--%s %s is beyond loopback: set --%s (%s) so that only those given it can open the page", flag, addr, tokenFlag, envName(tokenFlag))
	}
	return nil
}

// hostsFlag collects --allowed-host names.
type hostsFlag []string

func (h *hostsFlag) String() string { return strings.Join(*h, ",") }

func (h *hostsFlag) Set(s string) error {
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		if name == "" || strings.ContainsAny(name, "/@?# ") {
			return fmt.Errorf("%q: want a host name or host:port, without scheme or path", name)
		}
		*h = append(*h, name)
	}
	return nil
}

// serveDashboard serves the dashboard on l until ctx ends. It answers to
// the address l listens on and to the names in cfg.Hosts.
func serveDashboard(ctx context.Context, cfg dashboard.Config, l net.Listener, stdout io.Writer, log *slog.Logger) error {
	cfg.Hosts = dashboard.HostsOf(l.Addr().String(), cfg.Hosts...)
	d, err := dashboard.New(cfg)
	if err != nil {
		l.Close()
		return err
	}
	// Requests end with ctx: the event streams would otherwise outlive it.
	var lim httpguard.Limits
	l, lim = guardListener(l, "dashboard", httpguard.Dashboard(), log)
	srv := httpguard.Server(d, lim)
	srv.BaseContext = func(net.Listener) context.Context { return ctx }
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	url := "http://" + l.Addr().String() + "/"
	if cfg.Token != "" {
		url += "?token=…"
	}
	fmt.Fprintf(stdout, "captchaq dashboard on %s\n", url)
	select {
	case <-ctx.Done():
	case err := <-done:
		if !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx) // event streams end with their requests' contexts
	log.Info("dashboard stopped")
	return nil
}
