package stream

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/captchaq/captchaq/internal/logbuf"
	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
)

// The shipped leaf-site configs (testdata/leaf) read the link's password
// hash and the hub's URL from the environment; set once for the binary, as
// setRoleEnv does. The URL is replaced by each test's own.
var (
	siteEnvOnce  sync.Once
	sitePassword = "site-link-test-secret"
	// The password of the producers' link (user site-producers).
	siteProducersPassword = "site-producers-link-test-secret"
)

func setSiteEnv(t *testing.T) {
	t.Helper()
	setRoleEnv(t)
	siteEnvOnce.Do(func() {
		h, err := bcrypt.GenerateFromPassword([]byte(sitePassword), bcrypt.MinCost)
		if err != nil {
			panic(err)
		}
		ph, err := bcrypt.GenerateFromPassword([]byte(siteProducersPassword), bcrypt.MinCost)
		if err != nil {
			panic(err)
		}
		for k, v := range map[string]string{"CAPTCHAQ_SITE_PASSWORD_HASH": string(h), "CAPTCHAQ_SITE_PRODUCERS_PASSWORD_HASH": string(ph),
			"CAPTCHAQ_HUB_LEAF_URL": "nats-leaf://127.0.0.1:1", "CAPTCHAQ_HUB_PRODUCERS_LEAF_URL": "nats-leaf://127.0.0.1:1"} {
			if err := os.Setenv(k, v); err != nil {
				panic(err)
			}
		}
	})
}

// linkProxy stands between a site and the hub's leaf node port, so that a
// test can cut the link and bring it back.
type linkProxy struct {
	t      *testing.T
	target string
	mu     sync.Mutex
	l      net.Listener
	addr   string
	conns  []net.Conn
}

func newLinkProxy(t *testing.T, target string) *linkProxy {
	p := &linkProxy{t: t, target: target}
	p.listen("127.0.0.1:0")
	t.Cleanup(p.cut)
	return p
}

func (p *linkProxy) listen(addr string) {
	l, err := net.Listen("tcp", addr)
	require.NoError(p.t, err)
	p.mu.Lock()
	p.l, p.addr = l, l.Addr().String()
	p.mu.Unlock()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(s, c); s.Close() }()
			go func() { _, _ = io.Copy(c, s); c.Close() }()
		}
	}()
}

// cut closes the link and refuses it until restore.
func (p *linkProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.l.Close()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *linkProxy) restore() { p.listen(p.addr) }

// sites is a hub (testdata/leaf/hub.conf: the queue, JetStream domain
// "hub") and a site linked to it as a leaf node through a proxy
// (testdata/leaf/site.conf, or site-js.conf with JetStream of its own).
type sites struct {
	hub, site *server.Server
	link      *linkProxy
	roles     bool
	links     int // the site's leaf node links to the hub
}

// freePort is a loopback port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// traceKinds counts a task's trace entries by kind.
func traceKinds(tr []TraceEntry) map[string]int {
	out := map[string]int{}
	for _, e := range tr {
		out[e.Kind]++
	}
	return out
}

// startSites starts the shipped hub and site configs on loopback ports with
// temporary stores, and creates the topology at the hub as its admin, as
// `captchaq server --config testdata/leaf/hub.conf` does.
// Without roles, both run without their users: every client may do
// everything, so that what a client is refused is the domain, not a
// permission.
func startSites(t *testing.T, top Topology, siteConf string, roles bool) *sites {
	t.Helper()
	return startSitesWith(t, top, siteConf, roles, nil)
}

// startSitesWith is startSites with editSite, when not nil, changing the
// site's options before it starts.
func startSitesWith(t *testing.T, top Topology, siteConf string, roles bool, editSite func(*server.Options)) *sites {
	t.Helper()
	setSiteEnv(t)
	hopts, err := server.ProcessConfigFile(filepath.Join("..", "testdata", "leaf", "hub.conf"))
	require.NoError(t, err)
	hopts.Port, hopts.LeafNode.Port, hopts.StoreDir, hopts.NoSigs = -1, freePort(t), t.TempDir(), true
	// The site reaches the hub through a proxy: without no_advertise the
	// hub tells it its own address, and a cut link comes back around the
	// proxy (docs/across-sites.md).
	hopts.LeafNode.NoAdvertise = true
	if !roles {
		// Without the roles' users and accounts: one global account with
		// JetStream, which the site's one link joins.
		hopts.Users, hopts.Accounts, hopts.LeafNode.Users = nil, nil, nil
	}
	// The hub closes a link over which the site subscribes to a literal
	// subject the hub may not send it, such as one under $JS.hub.API.
	// (TestLiteralSubscriptionUnderHubsDomainCutsTheSiteLink): no client
	// at a site does so.
	hubLog := violationLog{seen: make(chan string, 1)}
	hub := startLoggedServer(t, hopts, hubLog)
	t.Cleanup(func() {
		select {
		case msg := <-hubLog.seen:
			t.Errorf("the hub cut a site's link: %s", msg)
		default:
		}
	})
	s := &sites{hub: hub, roles: roles}
	s.link = newLinkProxy(t, fmt.Sprintf("127.0.0.1:%d", hopts.LeafNode.Port))

	sopts := s.siteOptions(t, siteConf)
	if !roles {
		// The global account, with JetStream where the site has it, and
		// one link.
		sopts.Users, sopts.Accounts = nil, nil
		sopts.LeafNode.Remotes = sopts.LeafNode.Remotes[:1]
		sopts.LeafNode.Remotes[0].LocalAccount = ""
	}
	s.links = len(sopts.LeafNode.Remotes)
	if editSite != nil {
		editSite(sopts)
	}
	s.site = startServer(t, sopts)
	s.waitLinked(t)

	ensureAsAdmin(t, s.conn(t, hub, "admin"), top)
	return s
}

// siteOptions are the options of the shipped site config siteConf
// (testdata/leaf) on a free loopback port, a temporary store where it has
// JetStream, and its two links to the hub through the proxy: the streams'
// account's, as user site, and the producers', as user site-producers.
func (s *sites) siteOptions(t *testing.T, siteConf string) *server.Options {
	t.Helper()
	sopts, err := server.ProcessConfigFile(filepath.Join("..", "testdata", "leaf", siteConf))
	require.NoError(t, err)
	sopts.Port, sopts.NoSigs = -1, true
	if sopts.JetStream {
		sopts.StoreDir = t.TempDir()
	}
	require.Len(t, sopts.LeafNode.Remotes, 2)
	for _, r := range sopts.LeafNode.Remotes {
		user, password := "site", sitePassword
		if r.LocalAccount == "PRODUCERS" {
			user, password = "site-producers", siteProducersPassword
		}
		u, err := url.Parse(fmt.Sprintf("nats-leaf://%s:%s@%s", user, password, s.link.addr))
		require.NoError(t, err)
		r.URLs = []*url.URL{u}
	}
	sopts.LeafNode.ReconnectInterval = 100 * time.Millisecond // the default is a second
	return sopts
}

// cutUntilExpired cuts the site's link to the hub, waits until the hub
// holds no heartbeat of the given workers (HeartbeatTTL after their last),
// and brings the link back.
func (s *sites) cutUntilExpired(ctx context.Context, t *testing.T, workers ...string) {
	t.Helper()
	s.link.cut()
	require.Eventually(t, func() bool { return s.site.NumLeafNodes() == 0 }, 10*time.Second, 10*time.Millisecond)
	hjs, err := jetstream.NewWithDomain(s.conn(t, s.hub, "admin"), "hub")
	require.NoError(t, err)
	hs, err := hjs.Stream(ctx, DefaultStream)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		for _, w := range workers {
			if _, err := hs.GetLastMsgForSubject(ctx, heartbeatSubject(w)); err == nil {
				return false
			}
		}
		return true
	}, HeartbeatTTL+10*time.Second, 100*time.Millisecond, "the heartbeats of %v expire at the hub", workers)
	s.link.restore()
	s.waitLinked(t)
}

func startServer(t *testing.T, opts *server.Options) *server.Server {
	t.Helper()
	return startLoggedServer(t, opts, nil)
}

// startLoggedServer is startServer with log, when not nil, taking the
// server's log.
func startLoggedServer(t *testing.T, opts *server.Options, log server.Logger) *server.Server {
	t.Helper()
	ns, err := server.NewServer(opts)
	require.NoError(t, err)
	if log != nil {
		ns.SetLogger(log, false, false)
	}
	go ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	require.True(t, ns.ReadyForConnections(30*time.Second), "nats-server not ready")
	return ns
}

// waitLinked waits until the site's links to the hub are up.
func (s *sites) waitLinked(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool { return s.site.NumLeafNodes() == s.links && s.hub.NumLeafNodes() == s.links }, 30*time.Second, 10*time.Millisecond)
}

// emulatorSolver is a solver against the project's emulator over loopback
// HTTP, and the emulator, which counts what it is paid for (in.php).
func emulatorSolver(t *testing.T, solve time.Duration) (solver.Solver, *fakeapi.Server) {
	t.Helper()
	api := fakeapi.New(fakeapi.Config{SolveTime: map[string]fakeapi.Range{fakeapi.KindTurnstile: {Min: solve, Max: solve}}, BurstLimit: 1 << 30})
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	timing := solver.Timing{Scale: 0.01}
	if solve > 0 {
		// A poll a second, and enough of them for the whole solve.
		timing = solver.Timing{Fixed: true, FirstPoll: map[string]time.Duration{solver.KindTurnstile: time.Second}, PollInterval: time.Second, MaxCalls: 1000}
	}
	sc, err := solver.NewClient(solver.Config{BaseURL: srv.URL, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1,
		Timing: timing})
	require.NoError(t, err)
	return sc, api
}

// Producers and workers at a site, with the shipped site roles and the
// hub's domain, share the hub's one queue: every task is solved once, with
// one outcome, and the site's own JetStream (where it has one) holds no
// second CAPTCHA stream.
func TestSitesShareTheHubsQueue(t *testing.T) {
	t.Parallel()
	for _, conf := range []string{"site.conf", "site-js.conf"} {
		t.Run(conf, func(t *testing.T) {
			t.Parallel()
			top := Topology{Domain: "hub"}
			s := startSites(t, top, conf, true)
			ctx := testContext(t)
			sc, api := emulatorSolver(t, 0)
			for i := range 2 {
				wnc, _ := roleConn(t, s.site, "worker")
				w, err := NewWorker(ctx, wnc, WorkerConfig{Solver: sc, Threads: 3, Topology: top, Name: fmt.Sprintf("site-worker-%d", i),
					IdleCheck: 50 * time.Millisecond, ShutdownGrace: 100 * time.Millisecond})
				require.NoError(t, err)
				runWorker(t, w)
			}
			pnc, _ := roleConn(t, s.site, "producer")
			producer, err := NewClient(ctx, pnc, ClientConfig{Topology: top, Name: "site-producer"})
			require.NoError(t, err)

			const n = 10
			var wg sync.WaitGroup
			outcomes := make([]Outcome, n)
			errs := make([]error, n)
			for i := range n {
				wg.Go(func() { outcomes[i], errs[i] = producer.Solve(ctx, turnstileTask(fmt.Sprintf("site-%d", i))) })
			}
			wg.Wait()
			for i := range n {
				require.NoError(t, errs[i], "task %d", i)
				require.NotEmpty(t, outcomes[i].Solution)
			}
			require.Equal(t, n, api.Stats().Submitted, "every task paid once")
			for i := range n {
				tr, err := producer.Trace(ctx, fmt.Sprintf("site-%d", i))
				require.NoError(t, err)
				require.Equal(t, 1, traceKinds(tr)["outcome"], "one outcome for task %d: %v", i, traceKinds(tr))
				require.Equal(t, 1, traceKinds(tr)["attempt"], "one attempt for task %d: %v", i, traceKinds(tr))
			}

			if conf == "site-js.conf" {
				// The site's own JetStream holds no queue: nobody created one there.
				jsz, err := s.site.Jsz(nil)
				require.NoError(t, err)
				require.Zero(t, jsz.Streams, "a stream at the site")
			}
		})
	}
}

// conn connects to ns as the role user, or as nobody when ns has no users.
func (s *sites) conn(t *testing.T, ns *server.Server, user string) *nats.Conn {
	t.Helper()
	if s.roles {
		nc, _ := roleConn(t, ns, user)
		return nc
	}
	nc, err := nats.Connect(ns.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

func runWorker(t *testing.T, w *Worker) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// A site's link to the hub cut for longer than the ack wait, and longer
// than a heartbeat lives, while the site's workers are solving: when it
// comes back, the redeliveries wait for the live workers that hold the
// tasks, and no task is paid twice. The outage is said once per worker.
func TestSiteLinkCutLongerThanAckWaitPaysOnce(t *testing.T) {
	t.Parallel()
	top := Topology{Domain: "hub", AckWait: 2 * time.Second}
	s := startSites(t, top, "site.conf", true)
	ctx := testContext(t)
	// Long enough to outlast the cut (heartbeats expire after HeartbeatTTL).
	sc, api := emulatorSolver(t, HeartbeatTTL+10*time.Second)
	var logs logbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	start := func(name string, threads int) {
		wnc, _ := roleConn(t, s.site, "worker")
		w, err := NewWorker(ctx, wnc, WorkerConfig{Solver: sc, Threads: threads, Topology: top, Name: name, Logger: log,
			IdleCheck: 50 * time.Millisecond, ShutdownGrace: 100 * time.Millisecond,
			Policy: retry.Policy{InitialInterval: 50 * time.Millisecond, MaxInterval: 200 * time.Millisecond, NoJitter: true}})
		require.NoError(t, err)
		runWorker(t, w)
	}
	start("holder-a", 3)
	start("holder-b", 3)
	pnc, _ := roleConn(t, s.site, "producer")
	producer, err := NewClient(ctx, pnc, ClientConfig{Topology: top, Name: "site-producer"})
	require.NoError(t, err)
	const n = 6
	for i := range n {
		_, err := producer.Submit(ctx, turnstileTask(fmt.Sprintf("cut-%d", i)))
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return api.Stats().Submitted == n }, 30*time.Second, 10*time.Millisecond, "every task at the service")
	// A worker with free threads, which takes whatever is redelivered.
	start("idle-c", 4)

	// The holders' heartbeats expire at the hub while the link is cut, and
	// the tasks' ack wait is long over.
	s.cutUntilExpired(ctx, t, "holder-a", "holder-b")
	// The link is up once the hub's JetStream answers across it.
	require.Eventually(t, func() bool { _, err := producer.Trace(ctx, "cut-0"); return err == nil }, 10*time.Second, 20*time.Millisecond)

	for i := range n {
		out, err := producer.Wait(ctx, fmt.Sprintf("cut-%d", i))
		require.NoError(t, err)
		require.NotEmpty(t, out.Solution)
	}
	require.Equal(t, n, api.Stats().Submitted, "a task was paid twice:\n%s", logs.String())
	for i := range n {
		tr, err := producer.Trace(ctx, fmt.Sprintf("cut-%d", i))
		require.NoError(t, err)
		require.Equal(t, 1, traceKinds(tr)["outcome"], "one outcome for task %d: %v", i, traceKinds(tr))
		require.Equal(t, 1, traceKinds(tr)["attempt"], "one attempt for task %d: %v", i, traceKinds(tr))
	}
	require.NotContains(t, logs.String(), "died with its worker")
	// Said once per worker (three), however many fetches failed meanwhile.
	require.Equal(t, 3, strings.Count(logs.String(), "the stream does not answer"), logs.String())
}

// A client pointed at the wrong JetStream domain is refused, and the error
// names the domain it reached; it creates nothing there.
func TestWrongDomainRefusedNamingIt(t *testing.T) {
	t.Parallel()
	s := startSites(t, Topology{Domain: "hub"}, "site-js.conf", false)
	ctx := testContext(t)
	admin := s.conn(t, s.site, "")

	// The site's admin, without --js-domain, reaches the site's own JetStream.
	_, err := NewClient(ctx, admin, ClientConfig{})
	require.ErrorIs(t, err, ErrNoTopology)
	require.ErrorContains(t, err, `stream CAPTCHA not found in JetStream domain "site"`)
	_, err = NewWorker(ctx, admin, WorkerConfig{Solver: tokenSolver()})
	require.ErrorIs(t, err, ErrNoTopology)
	require.ErrorContains(t, err, `JetStream domain "site"`)
	sjs, err := jetstream.New(admin)
	require.NoError(t, err)
	_, err = sjs.Stream(ctx, DefaultStream)
	require.ErrorIs(t, err, jetstream.ErrStreamNotFound, "a client created a second queue at the site")

	// A domain nobody serves.
	_, err = NewClient(ctx, admin, ClientConfig{Topology: Topology{Domain: "nowhere"}})
	require.Error(t, err)
	require.ErrorContains(t, err, `JetStream domain "nowhere"`)

	// The hub's domain: the queue.
	_, err = NewClient(ctx, admin, ClientConfig{Topology: Topology{Domain: "hub"}})
	require.NoError(t, err)
}
