package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWalkthroughsLeaveAnotherServerAlone runs each walkthrough that
// starts a local trial server (the README's, docs/dashboard.md's,
// docs/providers.md's) on a machine where the server's port is held by
// another captchaq server: a trial left running in another directory, say,
// or a colleague's. The walkthrough's server cannot start; the walkthrough
// must then stop, with the server's own error, before its worker takes
// that server's tasks and answers them with the emulator's tokens, and
// before a line submits, replays or purges anything there.
func TestWalkthroughsLeaveAnotherServerAlone(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ page, setE string }{
		{"README.md", "set -e"}, {"docs/dashboard.md", "set -e"}, {"docs/providers.md", "set -e"},
		// Pasted into a shell: a failed line does not stop the next.
		{"README.md", ""}, {"docs/dashboard.md", ""}, {"docs/providers.md", ""},
	} {
		page, typed := c.page, c.setE == ""
		t.Run(fmt.Sprintf("%s typed by hand %v", page, typed), func(t *testing.T) {
			t.Parallel()
			_, dir := readmeWorkdir(t)
			md, err := os.ReadFile(filepath.Join(repoRoot(t), page))
			require.NoError(t, err)
			natsAddr := otherServer(t)

			script := readmeScript(t, shellBlocks(string(md), "sh"), map[string]string{
				"127.0.0.1:8088": fmt.Sprintf("127.0.0.1:%d", freePort(t)),
				"127.0.0.1:8080": fmt.Sprintf("127.0.0.1:%d", freePort(t)),
			})
			got, err, hung := runDocBlocksBounded(t, dir, strings.Replace(script, "set -e\n", c.setE+"\n", 1), 90*time.Second,
				"CAPTCHAQ_LISTEN="+natsAddr, "CAPTCHAQ_NATS=nats://"+natsAddr)
			require.Contains(t, got, "address already in use", "the server's own error is shown")
			if !typed {
				require.False(t, hung, "the walkthrough still ran after 90s")
				require.Error(t, err, "the walkthrough cannot succeed without its own server")
				require.NotContains(t, got, "./captchaq submit", "the walkthrough stops before it submits to another server")
			}

			requireUntouched(t, dir, natsAddr)
		})
	}
}

// A NATS URL that names no host (CAPTCHAQ_NATS set to nothing, or
// "nats://$(cat server.addr)" after the server failed to start) is refused:
// nats.go takes it for 127.0.0.1:4222, and the command talked to whatever
// server holds that port as if it were the one meant. Nothing is dialled,
// so the test holds no port.
func TestNATSURLWithoutAHostIsRefused(t *testing.T) {
	t.Parallel()
	for _, url := range []string{"", "nats://", "tls://", ",", " ", "nats://:4222", "nats://127.0.0.1:4222,nats://"} {
		for _, args := range [][]string{{"workers", "ls"}, {"stats"}, {"submit", "-"}} {
			r := captchaq(t, url, args...)
			require.Equal(t, 2, r.code, "--nats %q: %v: %s%s", url, args, r.stdout, r.stderr)
			require.Contains(t, r.stderr, "names no host", "--nats %q: %v", url, args)
		}
	}
}

// TestGatewayWalkthroughTypedByHandEnds pastes docs/gateway.md's try-it
// into a shell (no set -e: a failed line does not stop the next) where the
// gateway's port is held by an HTTP server of something else. run cannot
// listen; the res.php poll must then end, not ask what holds the port for
// a token once a second for ever, and no request (with its key) goes to
// what holds the port (an outsider's walk saw in.php with the key in the
// squatter's log).
func TestGatewayWalkthroughTypedByHandEnds(t *testing.T) {
	t.Parallel()
	gwAddr, asked := answeringSquatter(t)
	script, dir := gatewayPage(t, gwAddr)
	got, _, hung := runDocBlocksBounded(t, dir, strings.Replace(script, "set -e\n", "", 1), 60*time.Second)
	require.Contains(t, got, "address already in use", "run's own error is shown")
	require.False(t, hung, "typed by hand, the walkthrough still polled after 60s what holds the gateway's port")
	require.Zero(t, asked.Load(), "typed by hand, no request went to what holds the gateway's port")
}

// otherServer starts a captchaq server without users, as a trial left
// running elsewhere, on a free port, and returns its address once ready.
func otherServer(t *testing.T) string {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	other := startProc(t, []string{"CAPTCHAQ_LISTEN=" + addr}, "server", "--config", "", "--log-level", "warn",
		"--store", filepath.Join(t.TempDir(), "store"))
	other.waitLine("captchaq server ready", 60*time.Second)
	return addr
}

// requireUntouched requires that the server at addr saw no worker and no
// task of a walkthrough run in dir (whose captchaq asks it).
func requireUntouched(t *testing.T, dir, addr string) {
	t.Helper()
	for _, args := range [][]string{{"workers", "ls"}, {"results"}, {"task", "ls", "--json"}} {
		cmd := exec.Command(filepath.Join(dir, "captchaq"), args...)
		cmd.Env = []string{"CAPTCHAQ_NATS=nats://" + addr}
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.NotContains(t, string(out), "demo-0", "captchaq %s on the other server", strings.Join(args, " "))
		if args[0] == "workers" {
			require.Contains(t, string(out), "no worker", "captchaq workers ls on the other server: %s", out)
		}
	}
}

// TestClusterWalkthroughLeavesAnotherServerAlone: docs/cluster.md's
// walkthrough with node 1's client port held by another captchaq server
// without users (which takes any user and password), run as a script and
// pasted by hand. Node 1 cannot start; no worker or task of the
// walkthrough may reach the other server.
func TestClusterWalkthroughLeavesAnotherServerAlone(t *testing.T) {
	t.Parallel()
	for _, setE := range []string{"set -e", ""} {
		t.Run(fmt.Sprintf("typed by hand %v", setE == ""), func(t *testing.T) {
			t.Parallel()
			clients := [3]string{otherServer(t), freeAddr(t), freeAddr(t)}
			routes := [3]string{freeAddr(t), freeAddr(t), freeAddr(t)}
			script, dir := clusterPage(t, clients, routes)
			got, _, _ := runDocBlocksBounded(t, dir, strings.Replace(script, "set -e\n", setE+"\n", 1), 90*time.Second)
			require.Contains(t, got, "address already in use")
			requireUntouched(t, dir, clients[0])
		})
	}
}

// TestSecurityBlockWithItsPasswordsEnds pastes docs/security.md's block as
// a reader who set the passwords it names would, without CAPTCHAAI_API_KEY
// (nothing may be paid): the block must end, not wait for ever for
// outcomes no worker will bring. The fixed paths it names are moved: the
// server's port (in the shipped nats.conf) to a free one, the store key's
// file to one in the working directory.
func TestSecurityBlockWithItsPasswordsEnds(t *testing.T) {
	t.Parallel()
	_, dir := readmeWorkdir(t)
	root := repoRoot(t)
	page, err := os.ReadFile(filepath.Join(root, "docs", "security.md"))
	require.NoError(t, err)
	addr := freeAddr(t)
	copyFile(t, filepath.Join(root, "nats.conf"), filepath.Join(dir, "nats.conf"), "127.0.0.1:4222", addr)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "store.key"), []byte(strings.Repeat("k", 64)+"\n"), 0o600))
	script := readmeScript(t, shellBlocks(string(page), "sh"), map[string]string{"/etc/captchaq/store.key": "store.key"})
	got, _, hung := runDocBlocksBounded(t, dir, script, 60*time.Second,
		"PRODUCER_PW=producer-pw", "WORKER_PW=worker-pw", "ADMIN_PW=admin-pw", "CAPTCHAQ_NATS=nats://"+addr)
	require.Contains(t, got, "captchaq server ready", "the server started with the passwords")
	require.False(t, hung, "the block still waited after 60s")
	require.NotContains(t, got, "real API", "nothing reaches the paid service")
}
