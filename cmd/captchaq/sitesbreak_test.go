package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"
)

// A *_PASSWORD_HASH variable that is set but empty (a `$(captchaq passwd <
// file)` whose file was missing, an export without a value) gives its user
// an empty password, and nats-server then lets anyone in as that user
// without one: the hub's link user "site" is the streams' account without
// limits. `captchaq server` refuses such a config, naming the user, before
// it listens; it never runs a hub that a passwordless leaf node or client
// can join.
func TestServerRefusesAnEmptyPasswordHash(t *testing.T) {
	t.Parallel()
	for _, empty := range []string{"CAPTCHAQ_SITE_PASSWORD_HASH", "CAPTCHAQ_PRODUCER_PASSWORD_HASH"} {
		t.Run(empty, func(t *testing.T) {
			t.Parallel()
			hub := startHub(t, empty+"=") // last: it wins
			p, hubPort, leafPort := hub.proc, hub.clientPort, hub.leafPort
			ready := make(chan struct{})
			go func() {
				defer close(ready)
				for !strings.Contains(p.output(), "captchaq server ready") {
					select {
					case err := <-p.exit:
						p.exit <- err
						return
					case <-time.After(20 * time.Millisecond):
					}
				}
			}()
			select {
			case <-ready:
			case <-time.After(60 * time.Second):
				t.Fatalf("neither refused nor ready; output:\n%s", p.output())
			}
			if strings.Contains(p.output(), "captchaq server ready") {
				t.Errorf("captchaq server started a hub with %s empty:\n%s", empty, p.output())
				// What that lets anyone do, with no password at all.
				switch empty {
				case "CAPTCHAQ_SITE_PASSWORD_HASH":
					t.Errorf("a leaf node linked as %q without a password: %v", "site", passwordlessLeafReaches(t, leafPort))
				case "CAPTCHAQ_PRODUCER_PASSWORD_HASH":
					nc, err := nats.Connect(fmt.Sprintf("nats://producer@127.0.0.1:%d", hubPort))
					if err == nil {
						nc.Close()
						t.Errorf("a client connected as %q without a password", "producer")
					}
				}
				return
			}
			require.NotZero(t, p.wait(10*time.Second))
			out := p.output()
			require.Contains(t, out, "empty password", out)
			user := map[string]string{"CAPTCHAQ_SITE_PASSWORD_HASH": `"site"`, "CAPTCHAQ_PRODUCER_PASSWORD_HASH": `"producer"`}[empty]
			require.Contains(t, out, user, out)
		})
	}
}

// passwordlessLeafReaches links a leaf node to the hub's leaf port as user
// "site" with no password and reports what a client there reached: the
// hub's JetStream in domain "hub", with the streams' account's rights.
func passwordlessLeafReaches(t *testing.T, leafPort int) string {
	t.Helper()
	u, err := url.Parse(fmt.Sprintf("nats-leaf://site@127.0.0.1:%d", leafPort))
	require.NoError(t, err)
	// A system account with a user, to hear the leaf server say that its
	// link is up; every other client is the global account's, as without
	// users.
	sys := server.NewAccount("SYS")
	opts := &server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true, SystemAccount: "SYS",
		Accounts: []*server.Account{sys}, NoAuthUser: "client",
		Users: []*server.User{{Username: "sys", Password: "sys-pw", Account: sys}, {Username: "client", Password: "client-pw"}}}
	opts.LeafNode.Remotes = []*server.RemoteLeafOpts{{URLs: []*url.URL{u}}}
	leaf, err := server.NewServer(opts)
	require.NoError(t, err)
	go leaf.Start()
	t.Cleanup(func() { leaf.Shutdown(); leaf.WaitForShutdown() })
	require.True(t, leaf.ReadyForConnections(10*time.Second))
	if !leafLinked(t, leaf) {
		return "the link was refused"
	}
	nc, err := nats.Connect(leaf.ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := nc.RequestWithContext(ctx, "$JS.hub.API.STREAM.NAMES", nil)
	if err != nil {
		return "linked, and " + err.Error()
	}
	return "linked, and the hub's JetStream listed its streams: " + string(m.Data)
}

// leafLinked waits up to ten seconds for leaf's link to come up: the
// connect event it sends of a leaf node connection
// ($SYS.ACCOUNT.<account>.CONNECT, nats-server's events.go). The link may be
// up before the subscription is.
func leafLinked(t *testing.T, leaf *server.Server) bool {
	t.Helper()
	sys, err := nats.Connect(leaf.ClientURL(), nats.UserInfo("sys", "sys-pw"))
	require.NoError(t, err)
	defer sys.Close()
	events := make(chan *nats.Msg, 16)
	_, err = sys.ChanSubscribe("$SYS.ACCOUNT.*.CONNECT", events)
	require.NoError(t, err)
	require.NoError(t, sys.Flush())
	timeout := time.After(10 * time.Second)
	for leaf.NumLeafNodes() == 0 {
		select {
		case m := <-events:
			var ev server.ConnectEventMsg
			if json.Unmarshal(m.Data, &ev) == nil && ev.Client.Kind == "Leafnode" {
				return true
			}
		case <-timeout:
			return false
		}
	}
	return true
}

// siteServer runs the shipped site config conf (testdata/leaf) on a free
// loopback port, its variables written in (this process's environment is
// shared by parallel tests): the roles' hashes of the given passwords, and
// links to a hub that is not there.
func siteServer(t *testing.T, conf string, passwords map[string]string) *server.Server {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	dir := filepath.Join(t.TempDir(), "leaf")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	var oldNew []string
	for role, pw := range passwords {
		h, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.MinCost)
		require.NoError(t, err)
		oldNew = append(oldNew, "$CAPTCHAQ_"+strings.ToUpper(role)+"_PASSWORD_HASH", `"`+string(h)+`"`)
	}
	oldNew = append(oldNew, "$CAPTCHAQ_HUB_LEAF_URL", `"nats-leaf://127.0.0.1:1"`, "$CAPTCHAQ_HUB_PRODUCERS_LEAF_URL", `"nats-leaf://127.0.0.1:1"`)
	copyFile(t, filepath.Join(root, "testdata", "leaf", "site.conf"), filepath.Join(dir, "site.conf"), oldNew...)
	if conf == "site-js.conf" {
		copyFile(t, filepath.Join(root, "testdata", "leaf", "site-js.conf"), filepath.Join(dir, "site-js.conf"), oldNew[:6]...)
	}
	opts, err := server.ProcessConfigFile(filepath.Join(dir, conf))
	require.NoError(t, err)
	opts.Port, opts.NoSigs, opts.NoLog = -1, true, true
	if opts.JetStream {
		opts.StoreDir = t.TempDir()
	}
	ns, err := server.NewServer(opts)
	require.NoError(t, err)
	go ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	require.True(t, ns.ReadyForConnections(10*time.Second))
	return ns
}

// A `captchaq worker` at a site that forgets --js-domain is told where it
// looked and what to give, as the page says (the JetStream reached without
// a domain, or the site's own, domain "site"), not that its role may not
// read the plan quota's stream there.
func TestSiteWorkerWithoutDomainIsToldWhereItLooked(t *testing.T) {
	t.Parallel()
	for conf, want := range map[string]string{
		"site.conf":    "the JetStream reached without a domain",
		"site-js.conf": `JetStream domain \"site\"`, // quoted in the log line
	} {
		t.Run(conf, func(t *testing.T) {
			t.Parallel()
			site := siteServer(t, conf, map[string]string{"producer": "p-pw", "worker": "w-pw", "admin": "a-pw"})
			p := startProc(t, []string{"CAPTCHAQ_JS_DOMAIN=", "CAPTCHAAI_API_KEY=0123456789abcdef0123456789abcdef",
				"CAPTCHAQ_SOLVER_URL=http://127.0.0.1:1", "CAPTCHAQ_USER=worker", "CAPTCHAQ_PASSWORD=w-pw"},
				"worker", "--nats", site.ClientURL())
			p.waitLine("--js-domain", 30*time.Second)
			require.Contains(t, p.output(), want)
		})
	}
}
