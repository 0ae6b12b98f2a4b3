package main

import (
	"context"
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
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	hash := func(pw string) string {
		h, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.MinCost)
		require.NoError(t, err)
		return string(h)
	}
	for _, empty := range []string{"CAPTCHAQ_SITE_PASSWORD_HASH", "CAPTCHAQ_PRODUCER_PASSWORD_HASH"} {
		t.Run(empty, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			hubPort, leafPort := freePort(t), freePort(t)
			copyFile(t, filepath.Join(root, "nats.conf"), filepath.Join(dir, "nats.conf"),
				"127.0.0.1:4222", fmt.Sprintf("127.0.0.1:%d", hubPort))
			require.NoError(t, os.MkdirAll(filepath.Join(dir, "testdata", "leaf"), 0o755))
			copyFile(t, filepath.Join(root, "testdata", "leaf", "hub.conf"), filepath.Join(dir, "testdata", "leaf", "hub.conf"),
				"127.0.0.1:7422", fmt.Sprintf("127.0.0.1:%d", leafPort))
			env := []string{
				"CAPTCHAQ_PRODUCER_PASSWORD_HASH=" + hash("producer-pw"),
				"CAPTCHAQ_WORKER_PASSWORD_HASH=" + hash("worker-pw"),
				"CAPTCHAQ_ADMIN_PASSWORD_HASH=" + hash("admin-pw"),
				"CAPTCHAQ_SITE_PASSWORD_HASH=" + hash("site-pw"),
				"CAPTCHAQ_SITE_PRODUCERS_PASSWORD_HASH=" + hash("site-producers-pw"),
				"CAPTCHAQ_STORE_KEY=" + strings.Repeat("k", 64),
				"CAPTCHAQ_ADMIN_PASSWORD=admin-pw",
				empty + "=", // last: it wins
			}
			p := startProc(t, env, "server", "--config", filepath.Join(dir, "testdata", "leaf", "hub.conf"),
				"--store", filepath.Join(dir, "store"))
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
	opts := &server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true}
	opts.LeafNode.Remotes = []*server.RemoteLeafOpts{{URLs: []*url.URL{u}}}
	leaf, err := server.NewServer(opts)
	require.NoError(t, err)
	go leaf.Start()
	t.Cleanup(func() { leaf.Shutdown(); leaf.WaitForShutdown() })
	require.True(t, leaf.ReadyForConnections(10*time.Second))
	deadline := time.Now().Add(10 * time.Second)
	for leaf.NumLeafNodes() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if leaf.NumLeafNodes() == 0 {
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
