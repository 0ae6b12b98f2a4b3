package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/captchaq/captchaq/gateway"
	"github.com/captchaq/captchaq/internal/httpguard"
	"github.com/captchaq/captchaq/stream"
)

// gatewayFlags are the gateway's own flags. `captchaq gateway` names them
// --addr, --keys, --https-cert, --https-key, --plan-threads; `run` and
// `server` take them with the prefix gateway- (--gateway ADDR for the
// address), so they do not collide with their own.
type gatewayFlags struct {
	addr, keys, cert, key string
	planThreads           int
	// prefix is what the command puts before the flags' names ("gateway-"
	// for run and server), for messages that name one.
	prefix string
	// pingbackAllow lists the internal hosts and networks callbacks may
	// reach (comma-separated).
	pingbackAllow string
	// maxConns and maxConnsPerAddr bound the gateway's connections; 0:
	// httpguard.Gateway's.
	maxConns, maxConnsPerAddr int
	// user and password are the producer credentials `server` connects
	// the gateway with (in-process; run's server has no users).
	user, password string
}

func (g *gatewayFlags) register(fs *flag.FlagSet, prefix string) {
	g.prefix = prefix
	addrName, addrDefault, addrUsage := "addr", "127.0.0.1:8090", "listen on this address (beyond loopback only with --https-cert and --https-key)"
	if prefix != "" {
		addrName, addrDefault, addrUsage = "gateway", "", "also serve the gateway (classic in.php/res.php and JSON createTask/getTaskResult) on this address, e.g. 127.0.0.1:8090; with --gateway-keys; empty: off"
	}
	fs.StringVar(&g.addr, addrName, addrDefault, addrUsage)
	fs.StringVar(&g.keys, prefix+"keys", "", "the gateway's key file: {\"keys\": [{\"key\": \"…\", \"producer\": \"crawler\", \"priority\": \"high\", \"deadline\": \"5m\", \"share\": 0.5, \"client\": \"capsolver\"}]}; client: the JSON replies' shape for CapSolver's SDKs (docs/gateway.md)")
	fs.StringVar(&g.cert, prefix+"https-cert", "", "serve HTTPS with this certificate (PEM); with --"+prefix+"https-key")
	fs.StringVar(&g.key, prefix+"https-key", "", "private key (PEM) of --"+prefix+"https-cert")
	fs.IntVar(&g.planThreads, prefix+"plan-threads", 0, "the plan's thread count keys' shares divide; 0: the stream's plan (captchaq server --plan-threads)")
	fs.StringVar(&g.pingbackAllow, prefix+"pingback-allow", "", "internal hosts, addresses and CIDR networks callers' pingback URLs may reach, comma-separated (e.g. hooks.internal,10.0.0.0/8); by default only public addresses are called back (docs/security.md)")
	fs.IntVar(&g.maxConns, prefix+"max-conns", 0, "the most connections the gateway holds at once (0: 1024, within half the process's descriptor limit); more wait in the kernel's backlog")
	fs.IntVar(&g.maxConnsPerAddr, prefix+"max-conns-per-addr", 0, "the most connections one client address holds (0: 64)")
	if prefix != "" {
		fs.StringVar(&g.user, prefix+"user", "producer", "with a nats.conf that has users: the producer user the gateway connects as")
		fs.StringVar(&g.password, prefix+"password", "", "its password (prefer the environment variable: a flag value shows in ps)")
	}
}

// check validates the flags before anything starts.
func (g *gatewayFlags) check(flagPrefix string) error {
	if g.keys == "" {
		return usageError("--%skeys: required: the gateway's callers and their keys (docs/gateway.md)", flagPrefix)
	}
	if (g.cert == "") != (g.key == "") {
		return usageError("--%shttps-cert and --%shttps-key go together", flagPrefix, flagPrefix)
	}
	host, _, err := net.SplitHostPort(g.addr)
	if err != nil {
		return usageError("gateway address %q: want host:port: %v", g.addr, err)
	}
	if ip := net.ParseIP(host); g.cert == "" && (ip == nil || !ip.IsLoopback()) && host != "localhost" {
		return usageError("gateway address %s is beyond loopback: set --%shttps-cert and --%shttps-key, since callers send their keys with every request", g.addr, flagPrefix, flagPrefix)
	}
	if g.maxConns < 0 || g.maxConnsPerAddr < 0 {
		return usageError("--%smax-conns and --%smax-conns-per-addr: negative", flagPrefix, flagPrefix)
	}
	if g.planThreads < 0 {
		return usageError("--%splan-threads %d: negative", flagPrefix, g.planThreads)
	}
	return nil
}

// start binds the gateway on nc and listens; it serves in the background
// until stop, which waits for it. Errors while serving are logged.
func (g *gatewayFlags) start(ctx context.Context, nc *nats.Conn, top stream.Topology, now func() time.Time, out io.Writer, log *slog.Logger) (stop func(), err error) {
	keys, err := gateway.LoadKeys(g.keys)
	if err != nil {
		return nil, err
	}
	var allow []string
	for _, a := range strings.Split(g.pingbackAllow, ",") {
		if a = strings.TrimSpace(a); a != "" {
			allow = append(allow, a)
		}
	}
	gw, err := gateway.New(ctx, gateway.Config{Conn: nc, Topology: top, Keys: keys, PlanThreads: g.planThreads, Logger: log, Now: now,
		Pingback: gateway.Pingback{Allow: allow}})
	if err != nil {
		return nil, err
	}
	if gw.SharesUnenforced() {
		log.Warn(fmt.Sprintf("no plan thread count (set one with `captchaq server --plan-threads` or --%splan-threads): keys' shares are not enforced", g.prefix))
	}
	l, err := net.Listen("tcp", g.addr)
	if err != nil {
		gw.Close()
		flag := "--addr"
		if g.prefix != "" {
			flag = "--gateway"
		}
		return nil, fmt.Errorf("gateway: %w", portTaken(err, flag, `"captchaq gateway on" names the address it got`))
	}
	scheme := "http"
	if g.cert != "" {
		pair, err := tls.LoadX509KeyPair(g.cert, g.key)
		if err != nil {
			l.Close()
			gw.Close()
			return nil, fmt.Errorf("gateway: HTTPS certificate: %w", err)
		}
		l, scheme = tls.NewListener(l, &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}), "https"
	}
	lim := httpguard.Gateway()
	if g.maxConns > 0 {
		lim.MaxConns = g.maxConns
	}
	if g.maxConnsPerAddr > 0 {
		lim.MaxConnsPerAddr = g.maxConnsPerAddr
	}
	l, lim = guardListener(l, "gateway", lim, log)
	srv := httpguard.Server(gw, lim)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
			log.Error("gateway stopped serving", slog.Any("error", err))
		}
	}()
	fmt.Fprintf(out, "captchaq gateway on %s://%s/ (in.php, res.php, createTask, getTaskResult; %d keys)\n", scheme, l.Addr(), len(keys))
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-done
		gw.Close()
		log.Info("gateway stopped")
	}, nil
}

// startIn starts the gateway on an in-process connection to ns, as the
// producer user when a password is set (`run` and `server`).
func (g *gatewayFlags) startIn(ctx context.Context, ns *server.Server, now func() time.Time, out io.Writer, log *slog.Logger) (stop func(), err error) {
	nc, err := connectInProcess(ns, "captchaq-gateway", g.user, g.password)
	if err != nil {
		return nil, fmt.Errorf("gateway: connect in-process as %q (with a nats.conf that has users, set %s to that producer's password): %w",
			g.user, envName("gateway-password"), err)
	}
	stopGW, err := g.start(ctx, nc, stream.Topology{}, now, out, log)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return func() { stopGW(); nc.Close() }, nil
}

// gatewaySynopsis is the usage line of `captchaq gateway`, and what it is.
const gatewaySynopsis = "[flags]\n\n" +
	"Serves the solving services' own APIs in front of captchaq: in.php and res.php (CaptchaAI's and 2captcha's\n" +
	"dialect), and createTask, getTaskResult, getBalance and the report calls (Anti-Captcha's, CapMonster Cloud's,\n" +
	"CapSolver's and 2captcha's API v2), so that a script or SDK becomes a producer by changing its base URL and\n" +
	"key (docs/gateway.md).\n" +
	"It connects to NATS as a producer (--nats, --user, --password)."

// runGateway serves the 2captcha-compatible HTTP API as a producer.
func runGateway(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("gateway", gatewaySynopsis, stdout)
	var gf gatewayFlags
	gf.register(fs, "")
	nf := addFlags[natsFlags](fs)
	lf := addFlags[logFlags](fs)
	if err := parseArgs(fs, args, 0); err != nil {
		return err
	}
	if err := gf.check(""); err != nil {
		return err
	}
	log, err := lf.logger(stderr)
	if err != nil {
		return err
	}
	nc, ae, err := nf.connect(ctx, "captchaq-gateway")
	if err != nil {
		return err
	}
	defer nc.Close()
	ae.setLogger(log)
	stop, err := gf.start(ctx, nc, nf.topology(stream.Topology{}), time.Now, stdout, log)
	if err != nil {
		return explain(err, ae)
	}
	<-ctx.Done()
	stop()
	return nil
}
