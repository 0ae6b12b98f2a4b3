package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestREADMEShellBlocksEndWhenTheServerCannotStart runs the README's
// walkthrough, as TestREADMEShellBlocks does, on a machine where the
// server's port is already held by something that accepts connections and
// never speaks NATS. The server cannot start; the walkthrough must then end
// (with the server's own error in its output) instead of waiting forever
// for a server that will never answer.
func TestREADMEShellBlocksEndWhenTheServerCannotStart(t *testing.T) {
	t.Parallel()
	readme, dir := readmeWorkdir(t)
	blocks := shellBlocks(readme, "sh")

	natsAddr := squatPort(t)
	emuPort := freePort(t)
	script := readmeScript(t, blocks, map[string]string{"127.0.0.1:8088": fmt.Sprintf("127.0.0.1:%d", emuPort)})

	got, err, hung := runDocBlocksBounded(t, dir, script, 90*time.Second,
		"CAPTCHAQ_LISTEN="+natsAddr, "CAPTCHAQ_NATS=nats://"+natsAddr)
	require.False(t, hung, "the walkthrough still waited for the server after 90s; it should end once the server has failed to start")
	require.Error(t, err, "the walkthrough cannot succeed without its server")
	require.Contains(t, got, "address already in use", "the server's own error is shown")
	require.NotContains(t, got, "real API", "nothing reaches the paid service")
}

// TestREADMEShellBlocksEndWhenTheEmulatorCannotStart runs the README's
// walkthrough with the emulator's port already held by an HTTP server of
// something else, one that answers every request. The emulator cannot
// start; the walkthrough must then stop there, with the emulator's own
// error, before a worker, balance or report talks to whatever holds the
// port. Also where an earlier emulator was SIGKILLed and left its
// fakeapi.addr behind, naming that same address: the wait for the new
// emulator's address must not take the stale one.
func TestREADMEShellBlocksEndWhenTheEmulatorCannotStart(t *testing.T) {
	t.Parallel()
	for _, stale := range []bool{false, true} {
		t.Run(map[bool]string{false: "port taken", true: "stale address file"}[stale], func(t *testing.T) {
			t.Parallel()
			got, err, hung, asked := readmeWithEmulatorPortTaken(t, "set -e", 90*time.Second, stale)
			require.False(t, hung, "the walkthrough still ran after 90s; it should stop once the emulator has failed to start")
			require.Error(t, err, "the walkthrough cannot succeed without its emulator")
			require.Contains(t, got, "address already in use", "the emulator's own error is shown")
			require.NotContains(t, got, "$ ./captchaq worker", "the walkthrough stops before the worker")
			require.Zero(t, asked.Load(), "nothing talked to what holds the emulator's port")
			require.NotContains(t, got, "real API", "nothing reaches the paid service")
		})
	}
}

// TestREADMEShellBlocksTypedByHandSayWhyTheyWait runs the README's
// walkthrough as a newcomer pastes it into a shell: without set -e, so a
// failed line does not stop the next. The emulator's port is held by an
// HTTP server of something else that answers every request; the emulator
// cannot start, the URL is left as "http://", the worker refuses it and
// exits, and submit --wait then waits for outcomes no worker will bring. It
// must say so instead of waiting in silence, and nothing may talk to what
// holds the port.
func TestREADMEShellBlocksTypedByHandSayWhyTheyWait(t *testing.T) {
	t.Parallel()
	got, _, _, asked := readmeWithEmulatorPortTaken(t, "", 40*time.Second, false) // typed by hand: every line runs
	require.Contains(t, got, "address already in use", "the emulator's own error is shown")
	require.Contains(t, got, "$ ./captchaq submit --wait", "typed by hand, the walkthrough reaches submit")
	require.Contains(t, got, "captchaq submit: no worker is alive", "submit --wait says why no outcome comes")
	require.Zero(t, asked.Load(), "nothing talked to what holds the emulator's port")
	require.NotContains(t, got, "real API", "nothing reaches the paid service")
}

// readmeWithEmulatorPortTaken runs the README's walkthrough, its "set -e"
// replaced by setE, with the emulator's port held by an answeringSquatter,
// for at most limit: the output, the script's error, whether it was still
// running at limit, and how many requests the squatter was asked. With
// stale, an earlier emulator's fakeapi.addr naming the squatter is left in
// the working directory first.
func readmeWithEmulatorPortTaken(t *testing.T, setE string, limit time.Duration, stale bool) (string, error, bool, *atomic.Int64) {
	t.Helper()
	readme, dir := readmeWorkdir(t)
	emuAddr, asked := answeringSquatter(t)
	if stale {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "fakeapi.addr"), []byte(emuAddr+"\n"), 0o644))
	}
	natsAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	script := readmeScript(t, shellBlocks(readme, "sh"), map[string]string{"127.0.0.1:8088": emuAddr})
	got, err, hung := runDocBlocksBounded(t, dir, strings.ReplaceAll(script, "set -e", setE), limit,
		"CAPTCHAQ_LISTEN="+natsAddr, "CAPTCHAQ_NATS=nats://"+natsAddr)
	return got, err, hung, asked
}

// TestREADMEShellBlocksLeaveNoEmulatorSettings runs the README's
// walkthrough to its end, where it stops the emulator: the shell must then
// hold neither the emulator's URL nor its test key, or the next command
// typed there (the README's first `run`, say) talks to whatever takes the
// emulator's port next, with a key, as if it were the solving service.
func TestREADMEShellBlocksLeaveNoEmulatorSettings(t *testing.T) {
	t.Parallel()
	readme, dir := readmeWorkdir(t)
	blocks := shellBlocks(readme, "sh")
	natsAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	script := readmeScript(t, blocks, map[string]string{"127.0.0.1:8088": fmt.Sprintf("127.0.0.1:%d", freePort(t))}) +
		`echo "left set: solver-url=${CAPTCHAQ_SOLVER_URL-} key=${CAPTCHAAI_API_KEY:+yes}."` + "\n"

	got, err, hung := runDocBlocksBounded(t, dir, script, 3*time.Minute,
		"CAPTCHAQ_LISTEN="+natsAddr, "CAPTCHAQ_NATS=nats://"+natsAddr)
	require.False(t, hung)
	require.NoError(t, err)
	require.Contains(t, got, "left set: solver-url= key=.", "the walkthrough's last block unsets the emulator's settings once it is stopped")
}

// TestSecurityBlockEndsWhenTheServerCannotStart pastes docs/security.md's
// block as written into a shell, in a directory holding captchaq and the
// shipped nats.conf, without the passwords and the store key it names:
// the server refuses to start, and the wait for it must end then, as the
// README's does, instead of asking for stats for ever.
func TestSecurityBlockEndsWhenTheServerCannotStart(t *testing.T) {
	t.Parallel()
	_, dir := readmeWorkdir(t)
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	page, err := os.ReadFile(filepath.Join(root, "docs", "security.md"))
	require.NoError(t, err)
	conf, err := os.ReadFile(filepath.Join(root, "nats.conf"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "nats.conf"), conf, 0o600))
	blocks := shellBlocks(string(page), "sh")
	require.NotEmpty(t, blocks, "docs/security.md's commands are in a ```sh block")

	got, _, hung := runDocBlocksBounded(t, dir, blocks[0], 40*time.Second)
	require.False(t, hung, "the block still waited for the server after 40s; it should end once the server has failed to start")
	require.Contains(t, got, "captchaq server: ", "the server's own error is shown")
	require.NotContains(t, got, "real API", "nothing reaches the paid service")
}

// TestAcrossSitesEndsWhenTheHubCannotStart runs docs/across-sites.md's
// walkthrough, as TestAcrossSitesRunsAsWritten does, with the hub's client
// port already held by something that never speaks NATS: the hub cannot
// start, and the walkthrough must end (with the hub's error) instead of
// waiting forever for a queue no server holds.
func TestAcrossSitesEndsWhenTheHubCannotStart(t *testing.T) {
	t.Parallel()
	dir, script, env := sitesWalkthrough(t, squatPort(t), fmt.Sprint(freePort(t)), fmt.Sprintf("127.0.0.1:%d", freePort(t)))
	out, err, hung := runDocBlocksBounded(t, dir, script, 90*time.Second, env...)
	require.False(t, hung, "the walkthrough still waited for the hub after 90s; it should end once the hub has failed to start")
	require.Error(t, err, "the walkthrough cannot succeed without its hub")
	require.Contains(t, out, "address already in use", "the hub's own error is shown")
}

// TestAcrossSitesEndsWhenTheSiteCannotStart: the same with the site's port
// held by something that never speaks NATS. The site cannot start; the
// wait for the queue at the site must end (with the site's error) instead
// of asking the port's holder for ever.
func TestAcrossSitesEndsWhenTheSiteCannotStart(t *testing.T) {
	t.Parallel()
	_, sitePort, err := net.SplitHostPort(squatPort(t))
	require.NoError(t, err)
	dir, script, env := sitesWalkthrough(t, fmt.Sprintf("127.0.0.1:%d", freePort(t)), sitePort, fmt.Sprintf("127.0.0.1:%d", freePort(t)))
	out, err, hung := runDocBlocksBounded(t, dir, script, 90*time.Second, env...)
	require.False(t, hung, "the walkthrough still waited for the site after 90s; it should end once the site has failed to start")
	require.Error(t, err, "the walkthrough cannot succeed without its site")
	require.Contains(t, out, "address already in use", "the site's own error is shown")
}

// TestAcrossSitesEndsWhenTheEmulatorCannotStart runs docs/across-sites.md's
// walkthrough, as TestAcrossSitesRunsAsWritten does, with the emulator's
// port already held by an HTTP server of something else, one that answers
// every request as if it took the captcha. The emulator cannot start; the
// walkthrough must stop there, with the emulator's own error, before the
// worker or solve talk to whatever holds the port.
func TestAcrossSitesEndsWhenTheEmulatorCannotStart(t *testing.T) {
	t.Parallel()
	emuAddr, asked := answeringSquatter(t)
	dir, script, env := sitesWalkthrough(t, fmt.Sprintf("127.0.0.1:%d", freePort(t)), fmt.Sprint(freePort(t)), emuAddr)
	got, err, hung := runDocBlocksBounded(t, dir, script, 90*time.Second, env...)
	require.False(t, hung, "the walkthrough still ran after 90s; it should stop once the emulator has failed to start")
	require.Error(t, err, "the walkthrough cannot succeed without its emulator")
	require.Contains(t, got, "address already in use", "the emulator's own error is shown")
	require.NotContains(t, got, "captchaq solve --method", "the walkthrough stops before the producer")
	require.Zero(t, asked.Load(), "nothing talked to what holds the emulator's port")
	require.NotContains(t, got, "real API", "nothing reaches the paid service")
}

// sitesWalkthrough prepares docs/across-sites.md's walkthrough as
// TestAcrossSitesRunsAsWritten runs it (site.conf): a directory holding the
// shipped configs, the page's script, and the environment with the
// binaries on the PATH; the hub's client address (4222), the site's port
// (4223) and the emulator's address (8088) are those given, the hub's leaf
// node port a free one. It skips when openssl, which the page runs, is
// missing.
func sitesWalkthrough(t *testing.T, hubAddr, sitePort, emuAddr string) (dir, script string, env []string) {
	t.Helper()
	return sitesWalkthroughAs(t, hubAddr, sitePort, emuAddr, "", false)
}

// sitesWalkthroughAs is sitesWalkthrough, the script pasted (pastedScript)
// or not, with the hub's leaf node address leaf ("": a free one).
func sitesWalkthroughAs(t *testing.T, hubAddr, sitePort, emuAddr, leaf string, pasted bool) (dir, script string, env []string) {
	t.Helper()
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skipf("openssl, which the page's walkthrough runs, is not installed (.ci/run installs it): %v", err)
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	page, err := os.ReadFile(filepath.Join(root, "docs", "across-sites.md"))
	require.NoError(t, err)
	blocks := shellBlocks(string(page), "sh")

	bin := buildSitesBinaries(t, root)
	if leaf == "" {
		leaf = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	}
	dir = t.TempDir()
	copyFile(t, filepath.Join(root, "nats.conf"), filepath.Join(dir, "nats.conf"), "127.0.0.1:4222", hubAddr)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "testdata", "leaf"), 0o755))
	copyFile(t, filepath.Join(root, "testdata", "leaf", "hub.conf"), filepath.Join(dir, "testdata", "leaf", "hub.conf"), "127.0.0.1:7422", leaf)
	copyFile(t, filepath.Join(root, "testdata", "leaf", "site.conf"), filepath.Join(dir, "testdata", "leaf", "site.conf"))
	script = docScript(blocks, map[string]string{"127.0.0.1:7422": leaf, "4223": sitePort, "127.0.0.1:8088": emuAddr}, pasted)
	return dir, script, []string{"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH")}
}

// buildSitesBinaries builds, into a temporary directory it returns, what
// docs/across-sites.md's walkthrough runs: captchaq from this checkout and
// nats-server from the module version captchaq embeds.
func buildSitesBinaries(t *testing.T, root string) string {
	t.Helper()
	bin := t.TempDir()
	for _, b := range [][]string{
		{"go", "build", "-o", filepath.Join(bin, "captchaq"), "./cmd/captchaq"},
		{"go", "build", "-o", filepath.Join(bin, "nats-server"), "github.com/nats-io/nats-server/v2"},
	} {
		build := exec.Command(b[0], b[1:]...)
		build.Dir = root
		out, err := build.CombinedOutput()
		require.NoError(t, err, "%s: %s", strings.Join(b, " "), out)
	}
	return bin
}

// answeringSquatter holds a loopback port as an HTTP server of something
// else would, one that answers every request as if it took the captcha. It
// returns its address and how many requests it was asked.
func answeringSquatter(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	asked := new(atomic.Int64)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		_, _ = io.WriteString(w, `{"status":1,"request":"12345"}`) // as if it took the captcha
	}))
	t.Cleanup(other.Close)
	return other.Listener.Addr().String(), asked
}

// squatPort holds a loopback port as a program that is not a NATS server
// would: it accepts connections and never answers. It returns the address.
func squatPort(t *testing.T) string {
	t.Helper()
	addr, _ := countingSquatter(t)
	return addr
}

// runDocBlocksBounded runs a page's script as runDocBlocks does (no
// CAPTCHAQ_ or CAPTCHAAI_ variable but env, HTTPS to a proxy that refuses
// everything), expecting it may fail: it returns the output, the script's
// error, and whether it was still running after limit (then killed).
func runDocBlocksBounded(t *testing.T, dir, script string, limit time.Duration, env ...string) (string, error, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd, output := docCommand(ctx, dir, script, env...)
	// The script may end while the jobs it started in the background still
	// hold its output open: stop waiting for them soon after, then kill them
	// with the rest of the process group.
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	err := cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	t.Logf("after %v, output:\n%s", time.Since(start).Round(time.Second), output.String())
	return output.String(), err, ctx.Err() != nil
}
