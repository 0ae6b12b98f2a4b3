package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/captchaq/captchaq/stream"
)

// repoRoot is the checkout's root directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	return root
}

// bcryptHash is the hash of password that a *_PASSWORD_HASH variable holds.
func bcryptHash(t *testing.T, password string) string {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	require.NoError(t, err)
	return string(h)
}

// hubProc is `captchaq server` running the shipped testdata/leaf/hub.conf
// (and the nats.conf it includes), copied into a temporary directory with
// the fixed ports moved to free ones: clientPort for 4222, leafPort for
// the leaf node port 7422.
type hubProc struct {
	*proc
	clientPort, leafPort int
}

// startHub starts a hub whose users have the passwords <role>-pw (site,
// site-producers, producer, worker, admin), with a store key and the
// admin's password for the topology; env comes after, and a variable set
// there again wins. It does not wait for the hub to be ready.
func startHub(t *testing.T, env ...string) *hubProc {
	t.Helper()
	root := repoRoot(t)
	dir := t.TempDir()
	h := &hubProc{clientPort: freePort(t), leafPort: freePort(t)}
	copyFile(t, filepath.Join(root, "nats.conf"), filepath.Join(dir, "nats.conf"),
		"127.0.0.1:4222", fmt.Sprintf("127.0.0.1:%d", h.clientPort))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "testdata", "leaf"), 0o755))
	copyFile(t, filepath.Join(root, "testdata", "leaf", "hub.conf"), filepath.Join(dir, "testdata", "leaf", "hub.conf"),
		"127.0.0.1:7422", fmt.Sprintf("127.0.0.1:%d", h.leafPort))
	base := []string{
		"CAPTCHAQ_PRODUCER_PASSWORD_HASH=" + bcryptHash(t, "producer-pw"),
		"CAPTCHAQ_WORKER_PASSWORD_HASH=" + bcryptHash(t, "worker-pw"),
		"CAPTCHAQ_ADMIN_PASSWORD_HASH=" + bcryptHash(t, "admin-pw"),
		"CAPTCHAQ_SITE_PASSWORD_HASH=" + bcryptHash(t, "site-pw"),
		"CAPTCHAQ_SITE_PRODUCERS_PASSWORD_HASH=" + bcryptHash(t, "site-producers-pw"),
		"CAPTCHAQ_STORE_KEY=" + strings.Repeat("k", 64),
		"CAPTCHAQ_ADMIN_PASSWORD=admin-pw",
	}
	h.proc = startProc(t, append(base, env...), "server", "--config", filepath.Join(dir, "testdata", "leaf", "hub.conf"),
		"--store", filepath.Join(dir, "store"))
	return h
}

// runDocBlocks runs script (a page's ```sh blocks, made one script by
// readmeScript) in one bash in dir, within four minutes, in a process group
// of its own that is stopped with it. Its environment is the test's
// without any CAPTCHAQ_ or CAPTCHAAI_ variable, GOFLAGS or a variable that
// env sets, then env, and HTTP(S) through a proxy that refuses every
// connection, so that nothing reaches the paid service. It fails the test,
// naming page, if the script fails, and returns the script's output.
func runDocBlocks(t *testing.T, page, dir, script string, env ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd, output := docCommand(ctx, dir, script, env...)
	err := cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	require.NoError(t, err, "%s's shell blocks:\n%s\n--- output:\n%s", page, script, output.String())
	return output.String()
}

// docCommand is bash running a page's script in dir as a reader would:
// with no CAPTCHAQ_ or CAPTCHAAI_ variable but env, HTTPS through a proxy
// that refuses everything (nothing reaches the paid service), in a process
// group of its own that ctx's end kills whole. Its output, both streams,
// goes to the builder returned.
func docCommand(ctx context.Context, dir, script string, env ...string) (*exec.Cmd, *strings.Builder) {
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = dir
	set := map[string]bool{}
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		set[k] = true
	}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, "CAPTCHAQ_") && !strings.HasPrefix(k, "CAPTCHAAI_") && k != "GOFLAGS" && !set[k] {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(append(cmd.Env, env...),
		"HTTPS_PROXY=http://127.0.0.1:1", "HTTP_PROXY=http://127.0.0.1:1", "NO_PROXY=127.0.0.1,localhost")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	output := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = output, output
	return cmd, output
}

// procBroker is `captchaq server` as a machine runs it: its own nats.conf
// on a free loopback port, its store in a temporary directory, the
// consumers' ack wait ackWait.
type procBroker struct {
	*proc
	t                  *testing.T
	conf, url, ackWait string
}

// startProcBroker starts one and waits until it is ready.
func startProcBroker(t *testing.T, ackWait string) *procBroker {
	t.Helper()
	dir := t.TempDir()
	port := freePort(t)
	b := &procBroker{t: t, conf: filepath.Join(dir, "nats.conf"), url: fmt.Sprintf("nats://127.0.0.1:%d", port), ackWait: ackWait}
	require.NoError(t, os.WriteFile(b.conf, []byte(fmt.Sprintf("listen: 127.0.0.1:%d\njetstream { store_dir: %q }\n", port, filepath.Join(dir, "js"))), 0o600))
	b.restart()
	return b
}

// restart starts the broker (again, once killed) on the same store and
// waits until it is ready.
func (b *procBroker) restart() {
	b.t.Helper()
	b.proc = startProc(b.t, nil, "server", "--config", b.conf, "--ack-wait", b.ackWait)
	b.waitLine("captchaq server ready", 30*time.Second)
}

// countedEmulator serves api over loopback HTTP and counts its in.php calls
// by task (inCalls).
func countedEmulator(t *testing.T, api http.Handler) (*inCalls, string) {
	t.Helper()
	calls := &inCalls{at: map[string][]time.Time{}}
	emu := httptest.NewServer(calls.wrap(api))
	t.Cleanup(emu.Close)
	return calls, emu.URL
}

// submitTurnstiles connects a producer named <label>-test to url, one that
// reconnects for ever (a broker restart is waited for), and submits n
// Turnstile tasks <label><number> (digits digits), each on its own page
// https://shop.example/<label>/<id> (inCalls counts by its last element).
func submitTurnstiles(ctx context.Context, t *testing.T, url, label string, digits, n int) (*nats.Conn, *stream.Client, []stream.Task) {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	client, err := stream.NewClient(ctx, nc, stream.ClientConfig{Name: label + "-test"})
	require.NoError(t, err)
	tasks := make([]stream.Task, n)
	for i := range tasks {
		id := fmt.Sprintf("%s%0*d", label, digits, i)
		tasks[i] = stream.Task{ID: id, Method: "turnstile",
			Params: stream.Params{"sitekey": "0x4AAAAAAAB", "pageurl": "https://shop.example/" + label + "/" + id}}
	}
	_, err = client.SubmitAll(ctx, tasks)
	require.NoError(t, err)
	return nc, client, tasks
}
