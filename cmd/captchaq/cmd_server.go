package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/conf"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/captchaq/captchaq/dashboard"
	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/broker"
	"github.com/captchaq/captchaq/stream/wire"
)

// adminFlags name the account `captchaq server` uses, in process, to create
// and update the topology when the config requires authentication.
type adminFlags struct {
	user, password string
}

func (a *adminFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&a.user, "admin-user", "admin", "user the server creates the stream and consumers as, when nats.conf requires authentication")
	fs.StringVar(&a.password, "admin-password", "", "that user's password (set the environment variable: a flag value shows in ps)")
}

func runServer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("server", "[flags]", stdout)
	config := fs.String("config", "nats.conf", "nats-server config file; empty or missing ./nats.conf: built-in defaults (127.0.0.1:4222)")
	listen := fs.String("listen", "127.0.0.1:4222", "without a config file (--config ''): the address clients connect to (port 0: a free one, named in --addr-file)")
	store := fs.String("store", "", "JetStream store directory (default: the config's store_dir, else ./data/jetstream)")
	lazy := fs.Bool("lazy-sync", false, "fsync every 2 minutes instead of before every ack (faster; an OS crash can lose acknowledged tasks)")
	plan := addFlags[planFlags](fs)
	dash := fs.String("dashboard", "", "also serve the web dashboard on this address (e.g. 127.0.0.1:8080; beyond loopback only with --dashboard-token); empty: off")
	dashToken := fs.String("dashboard-token", "", "require this token of the dashboard's browsers (open it with ?token=…)")
	addrFile := fs.String("addr-file", "", "once ready, write the address clients connect to (host:port) to this file, removed again as the server stops: "+
		"a script waits for it and connects there, and stops when it never comes (the port taken, by another server too)")
	admin := addFlags[adminFlags](fs)
	top := addFlags[topoFlags](fs)
	lf := addFlags[logFlags](fs)
	var gf gatewayFlags
	gf.register(fs, "gateway-")
	log, err := lf.parseArgs(fs, args, 0, stderr)
	if err != nil {
		return err
	}
	if gf.addr != "" {
		if err := gf.check("gateway-"); err != nil {
			return err
		}
	}
	if *addrFile != "" {
		// A file left by a server that was killed must not pass for
		// this one's.
		if err := os.Remove(*addrFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("--addr-file: %w", err)
		}
	}
	var dashL net.Listener
	if *dash != "" {
		if err := checkDashAddr("dashboard", "dashboard-token", *dash, *dashToken); err != nil {
			return err
		}
		// Taken before the server starts: a port held by something else
		// stops the server before it answers anyone, so a walkthrough
		// waiting for it ends there.
		var err error
		if dashL, err = net.Listen("tcp", *dash); err != nil {
			return fmt.Errorf("--dashboard: %w", portTaken(err, "--dashboard", `"captchaq dashboard on" names the address it got`))
		}
		defer dashL.Close()
	}
	cfg := broker.Config{StoreDir: *store, LazySync: *lazy, Logger: log, Verbose: true, Listen: true, StoreKey: os.Getenv(storeKeyEnv)}
	switch _, statErr := os.Stat(*config); {
	case *config == "":
	case statErr == nil:
		cfg.ConfigFile = *config
	case errors.Is(statErr, os.ErrNotExist) && *config == "nats.conf":
		log.Warn("no ./nats.conf: built-in defaults, 127.0.0.1:4222 without authentication")
	default:
		return fmt.Errorf("--config %s: %w", *config, statErr)
	}
	if cfg.ConfigFile != "" {
		opts, err := server.ProcessConfigFile(cfg.ConfigFile)
		if err != nil {
			if m := missingVarRe.FindStringSubmatch(err.Error()); m != nil {
				return missingVar(cfg.ConfigFile, m[1])
			}
		}
		if err == nil {
			if err := refuseSite(cfg.ConfigFile, opts); err != nil {
				return err
			}
			if err := refuseEmptyPasswords(cfg.ConfigFile, opts); err != nil {
				return err
			}
		}
	}
	if cfg.ConfigFile != "" && admin.password == "" {
		// An in-process client the config refuses only learns so after the
		// server's write deadline, in words about pipes: say it first.
		if opts, err := server.ProcessConfigFile(cfg.ConfigFile); err == nil && requiresAuth(opts) {
			return fmt.Errorf("%s requires authentication: set %s to the password of user %q, which creates the stream and consumers (%s names another user)",
				cfg.ConfigFile, envName("admin-password"), admin.user, envName("admin-user"))
		}
	}
	if cfg.ConfigFile == "" {
		host, port, err := net.SplitHostPort(*listen)
		if err == nil {
			cfg.Port, err = strconv.Atoi(port)
		}
		if err != nil || cfg.Port < 0 || cfg.Port > 65535 {
			return usageError("--listen %q: want HOST:PORT, e.g. 127.0.0.1:4222 (port 0: a free one, named in --addr-file)", *listen)
		}
		if cfg.Port == 0 {
			cfg.Port = -1 // nats-server's "pick a free port"; --addr-file and the ready line name it
		}
		cfg.Host = host
		if cfg.StoreDir == "" {
			cfg.StoreDir = "data/jetstream"
		}
	}
	if cfg.ConfigFile == "" {
		// Say at once that the port is taken, instead of waiting for a
		// server that cannot start.
		if l, err := net.Listen("tcp", *listen); err != nil {
			return fmt.Errorf("listen on %s: %w", *listen, err)
		} else {
			_ = l.Close()
		}
	}
	ns, err := broker.Start(cfg)
	if err != nil {
		return err
	}
	defer func() {
		ns.Shutdown() // flushes and closes the JetStream store
		ns.WaitForShutdown()
		log.Info("server stopped")
	}()
	if !ns.JetStreamConfig().SyncAlways {
		log.Warn("JetStream fsyncs lazily: an OS crash or power loss can lose tasks the server acknowledged",
			slog.Duration("sync_interval", ns.JetStreamConfig().SyncInterval))
	}

	// Create or bring up to date the topology, as the admin.
	nc, err := connectInProcess(ns, "captchaq-server", admin.user, admin.password)
	if err != nil {
		if errors.Is(err, nats.ErrAuthorization) || (admin.password != "" && errors.Is(err, io.ErrClosedPipe)) {
			return fmt.Errorf("create the topology: %s refuses user %q (wrong password?): set %s (and %s if the admin is not %q): %w",
				*config, admin.user, envName("admin-password"), envName("admin-user"), "admin", err)
		}
		return fmt.Errorf("connect in-process: %w", err)
	}
	defer nc.Close()
	// A site whose producers' link logs in as the streams' link user gives
	// its producers the streams' account: drop such links and say so.
	if cid, err := nc.GetClientID(); err == nil {
		if acc := broker.AccountOf(ns, cid); acc != "" {
			stopLeafGuard := broker.GuardLeafLinks(ns, broker.LeafGuard{Account: acc, Logger: log,
				// A worker's wake-ups: no producer may subscribe to them.
				WorkerSubjects: []string{wire.SubjectStored + ".tasks."}})
			defer stopLeafGuard()
		}
	}
	stopGuard, err := guardStore(ns, nc, top.topology(), log, func() error {
		return ensureTopology(ctx, nc, top.topology(), -1, false)
	})
	if err != nil {
		return err
	}
	defer stopGuard()
	if err := ensureTopologyPatiently(ctx, ns, nc, top.topology(), plan.threads, plan.early, log); err != nil {
		return err
	}
	// The plan the service tells the workers (CaptchaAI's threadsinfo)
	// becomes the plan-wide quota, unless an operator set one.
	if err := followServicePlan(ctx, nc, top.topology(), plan.early, log); err != nil {
		// The queue works without it: the workers split the plan.
		log.Warn("the plan the service tells the workers is not made the plan-wide quota", slog.Any("error", err))
	}
	if *addrFile != "" {
		if err := writeAddrFile(*addrFile, strings.TrimPrefix(ns.ClientURL(), "nats://")); err != nil {
			return fmt.Errorf("--addr-file: %w", err)
		}
		defer os.Remove(*addrFile)
	}
	fmt.Fprintf(stdout, "captchaq server ready on %s (store %s)\n", ns.ClientURL(), ns.JetStreamConfig().StoreDir)
	if gf.addr != "" {
		stopGW, err := gf.startIn(ctx, ns, time.Now, stdout, log)
		if err != nil {
			return err
		}
		defer stopGW()
	}
	if *dash != "" {
		// The page reads through the server's own connection; changes take
		// the operator's credentials, checked by the server as for any client.
		client, err := stream.NewClient(ctx, nc, stream.ClientConfig{Name: "captchaq-dashboard", Topology: top.topology()})
		if err != nil {
			return err
		}
		url := ns.ClientURL()
		connect := func(ctx context.Context, user, password string) (*nats.Conn, error) {
			return nats.Connect(url, nats.UserInfo(user, password), nats.Name("captchaq-dashboard-change"), nats.Timeout(5*time.Second))
		}
		return serveDashboard(ctx, dashboard.Config{Client: client, Connect: connect, Token: *dashToken, Logger: log}, dashL, stdout, log)
	}
	<-ctx.Done()
	log.Info("shutting down")
	return nil
}

// refuseEmptyPasswords refuses a config in which a user's password is
// empty: a *_PASSWORD_HASH variable set to nothing (a `$(captchaq passwd <
// file)` whose file was missing) reads as an empty password, and nats-server
// lets a leaf node link in as such a user with no password at all (the
// hub's link user "site" is the streams' account without limits). Users
// that TLS certificates name (verify_and_map) have no password by design.
func refuseEmptyPasswords(config string, opts *server.Options) error {
	const why = " (a *_PASSWORD_HASH variable set but empty? export it as $(captchaq passwd < FILE) with the password's file there)"
	if !opts.TLSMap {
		for _, u := range opts.Users {
			if u.Password == "" {
				return fmt.Errorf("%s: user %q has an empty password%s", config, u.Username, why)
			}
		}
	}
	if !opts.LeafNode.TLSMap {
		for _, u := range opts.LeafNode.Users {
			if u.Password == "" {
				return fmt.Errorf("%s: leaf node user %q has an empty password, and a site could link as it with none%s", config, u.Username, why)
			}
		}
	}
	return nil
}

// refuseSite refuses a config that would make `captchaq server` a site of
// another server's queue: with JetStream disabled (captchaq server keeps a
// queue, so it runs JetStream), or linked to a hub as a leaf node (its own
// CAPTCHA stream would capture captcha.> beside the hub's: a second queue,
// paid twice). A site runs plain nats-server (docs/across-sites.md).
func refuseSite(config string, opts *server.Options) error {
	const site = "; a site of a queue kept elsewhere runs nats-server with a leaf node config (testdata/leaf/site.conf, docs/across-sites.md), and its clients take --js-domain"
	if raw, err := conf.ParseFile(config); err == nil {
		switch v := raw["jetstream"].(type) {
		case bool:
			if !v {
				return fmt.Errorf("%s: jetstream is disabled, and captchaq server keeps the queue in JetStream%s", config, site)
			}
		case string:
			if v == "disabled" || v == "disable" {
				return fmt.Errorf("%s: jetstream is disabled, and captchaq server keeps the queue in JetStream%s", config, site)
			}
		}
	}
	if n := len(opts.LeafNode.Remotes); n > 0 {
		return fmt.Errorf("%s: leafnodes names %d remote(s): captchaq server would keep a second CAPTCHA stream of its own beside the hub's, "+
			"and tasks would be solved and paid at both%s", config, n, site)
	}
	return nil
}

// requiresAuth reports whether a server with opts refuses clients without
// credentials.
func requiresAuth(opts *server.Options) bool {
	return len(opts.Users) > 0 || len(opts.Nkeys) > 0 || opts.Username != "" || opts.Authorization != "" ||
		len(opts.TrustedOperators) > 0 || opts.AuthCallout != nil
}

// planFlags set the plan-wide thread quota; server and init take them.
type planFlags struct {
	threads int // -1: leave the quota as it is
	early   bool
}

func (p *planFlags) register(fs *flag.FlagSet) {
	p.threads = -1
	fs.Var(planThreadsValue{&p.threads}, "plan-threads", "set the plan-wide thread quota (captchas at the service at once, across all workers); 0 removes it; -1 leaves it as it is")
	fs.BoolVar(&p.early, "plan-early", true, planEarlyUsage)
}

// planThreadsValue is --plan-threads: a count, or -1 to leave the quota
// as it is; another negative is refused when parsed (the flag package
// names the flag), not taken as -1.
type planThreadsValue struct{ n *int }

func (v planThreadsValue) String() string {
	if v.n == nil {
		return ""
	}
	return strconv.Itoa(*v.n)
}

func (v planThreadsValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return errors.New("want a whole number of threads")
	}
	if n < -1 {
		return errors.New("want 0 or more (0 removes the quota); leave the flag out to keep the quota as it is")
	}
	*v.n = n
	return nil
}

// planEarlyUsage is the --plan-early flag's help.
const planEarlyUsage = "with --plan-threads: give a thread back when its captcha is probably solved (from the learned solve times), not when the answer is fetched, so the service's threads stay busy; the service may then be sent more captchas than the quota for a moment and refuse a few (no attempt spent); --plan-early=false: never more than the quota"

// ensureTopology creates or updates the stream, the workers' consumers and
// the timings bucket, and sets the plan quota unless planThreads is negative.
func ensureTopology(ctx context.Context, nc *nats.Conn, top stream.Topology, planThreads int, early bool) error {
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	adm, err := stream.NewAdmin(nc, stream.AdminConfig{Topology: top})
	if err != nil {
		return fmt.Errorf("create the topology: %w", err)
	}
	if _, err := adm.EnsureTopology(tctx, true); err != nil {
		return fmt.Errorf("create the topology: %w", err)
	}
	if _, err := adm.EnsureTimings(tctx); err != nil {
		return fmt.Errorf("create the timings bucket: %w", err)
	}
	if planThreads >= 0 {
		if _, err := setPlanQuota(tctx, adm, planThreads, early); err != nil {
			return err
		}
	}
	return nil
}

// setPlanQuota sets the plan-wide thread quota (--plan-threads,
// --plan-early) and returns the quota held when it returned: threads, or
// another operator's set at the same moment and recorded after this one
// (stream.PlanHeld).
func setPlanQuota(ctx context.Context, adm *stream.Admin, threads int, early bool) (int, error) {
	held := threads
	if err := adm.SetPlan(ctx, threads, append(planOptions(early), stream.PlanHeld(&held))...); err != nil {
		return 0, fmt.Errorf("set the plan quota: %w", err)
	}
	return held, nil
}

// planHeldLine says which plan-wide quota holds after `captchaq init
// --plan-threads asked`: another operator's, set at the same moment and
// recorded after this one, holds in its place and is named.
func planHeldLine(asked, held int) string {
	quota := func(n int) string {
		if n == 0 {
			return "none"
		}
		return fmt.Sprintf("%d threads", n)
	}
	if held == asked {
		return "plan-wide quota: " + quota(held)
	}
	return fmt.Sprintf("plan-wide quota: %s, not the %s asked: another operator set it at the same moment, after this one", quota(held), quota(asked))
}

// planOptions are the plan quota's options of --plan-early.
func planOptions(early bool) []stream.PlanOption {
	if early {
		return []stream.PlanOption{stream.PlanEarly()}
	}
	return nil
}

// followServicePlan sets the plan-wide quota from the plan the service
// tells the workers until ctx ends (stream.Admin.FollowServicePlan), with
// the server's early hand-back (--plan-early).
func followServicePlan(ctx context.Context, nc *nats.Conn, top stream.Topology, early bool, log *slog.Logger) error {
	adm, err := stream.NewAdmin(nc, stream.AdminConfig{Topology: top})
	if err != nil {
		return err
	}
	if err := adm.FollowServicePlan(ctx, log, planOptions(early)...); err != nil {
		return fmt.Errorf("follow the plan the service tells: %w", err)
	}
	return nil
}

// ensureTopologyPatiently is ensureTopology for a server: a node of a
// cluster whose peers are not up yet has no JetStream leader to create the
// stream with, so it waits for them with backoff and says so, as a worker
// waits for its NATS server. A single server tries once.
func ensureTopologyPatiently(ctx context.Context, ns *server.Server, nc *nats.Conn, top stream.Topology, planThreads int, early bool, log *slog.Logger) error {
	if !ns.JetStreamIsClustered() {
		return ensureTopology(ctx, nc, top, planThreads, early)
	}
	b := newBackoff()
	for {
		if ns.JetStreamIsLeader() || ns.JetStreamIsCurrent() {
			err := ensureTopology(ctx, nc, top, planThreads, early)
			if err == nil || ctx.Err() != nil {
				return err
			}
			log.Warn("the cluster could not create the topology yet; trying again", slog.Any("error", err), slog.Duration("retry_in", b.wait))
		} else {
			log.Warn("waiting for the cluster's peers: no JetStream leader yet", slog.Int("routes", ns.NumRoutes()),
				slog.Duration("for", b.waited()), slog.Duration("retry_in", b.wait))
		}
		if !b.sleep(ctx) {
			return fmt.Errorf("no JetStream leader in the cluster after %s (%d route(s) up): are the other nodes started, and do their routes reach this one?",
				b.waited(), ns.NumRoutes())
		}
	}
}

// runInit creates or updates the topology on a NATS server that captchaq
// does not run: a separately installed nats-server or a cluster.
func runInit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("init", "[flags]", stdout)
	plan := addFlags[planFlags](fs)
	nf := addFlags[natsFlags](fs)
	top := addFlags[topoFlags](fs)
	if err := parseArgs(fs, args, 0); err != nil {
		return err
	}
	nc, ae, err := nf.connect(ctx, "captchaq-init")
	if err != nil {
		return err
	}
	defer nc.Close()
	fctx, cancel := ae.failFast(ctx)
	defer cancel()
	if err := ensureTopology(fctx, nc, nf.topology(top.topology()), -1, false); err != nil {
		return explain(err, ae)
	}
	t := top.topology()
	fmt.Fprintf(stdout, "stream %s and the workers' consumers are ready on %s (replicas %d)\n", stream.DefaultStream, nc.ConnectedUrlRedacted(), max(t.Replicas, 1))
	if plan.threads < 0 {
		return nil
	}
	adm, err := stream.NewAdmin(nc, stream.AdminConfig{Topology: nf.topology(t)})
	if err != nil {
		return fmt.Errorf("set the plan quota: %w", err)
	}
	pctx, cancel := context.WithTimeout(fctx, 30*time.Second)
	defer cancel()
	held, err := setPlanQuota(pctx, adm, plan.threads, plan.early)
	if err != nil {
		return explain(err, ae)
	}
	fmt.Fprintln(stdout, planHeldLine(plan.threads, held))
	return nil
}

// missingVarRe finds the variable nats-server's config parser could not
// resolve ("variable reference for 'X' on line 39 can not be found").
var missingVarRe = regexp.MustCompile(`variable reference for '([^']+)'`)

// missingVar says which environment variable a config reads and is not set,
// what it is for, and how to make it.
func missingVar(config, name string) error {
	why := ""
	switch {
	case name == storeKeyEnv:
		why = " (the key that encrypts the store at rest, at least 32 characters: export " + name + "=$(openssl rand -hex 32), and keep it: the store opens only with it)"
	case strings.HasSuffix(name, "_PASSWORD_HASH"):
		why = " (the bcrypt hash of a role's password: export " + name + "=$(captchaq passwd))"
	}
	return fmt.Errorf("%s reads %s from the environment, and it is not set%s; for a quick local trial without users or encryption, run `captchaq server --config ''`",
		config, name, why)
}
