package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// gatewayPage returns docs/gateway.md's walkthrough as one script, the
// gateway's 127.0.0.1:8090 replaced by gwAddr, and a directory to run it in
// (captchaq built there). It skips when curl, which the page runs, is
// missing.
func gatewayPage(t *testing.T, gwAddr string) (script, dir string) {
	t.Helper()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skipf("curl, which the page's walkthrough runs, is not installed: %v", err)
	}
	_, dir = readmeWorkdir(t)
	page, err := os.ReadFile(filepath.Join("..", "..", "docs", "gateway.md"))
	require.NoError(t, err)
	blocks := shellBlocks(string(page), "sh")
	// The try-it is the page's first block; the HTTPS one is
	// TestGatewayHTTPSWalkthrough's.
	require.NotEmpty(t, blocks, "docs/gateway.md's walkthrough")
	return readmeScript(t, blocks[:1], map[string]string{"127.0.0.1:8090": gwAddr}), dir
}

// TestGatewayWalkthroughRunsAsWritten runs docs/gateway.md's try-it as
// TestREADMEShellBlocks runs the README (no key, HTTPS refused): a captcha
// sent to in.php as a script would comes back from res.php solved, by the
// emulator run starts without a key.
func TestGatewayWalkthroughRunsAsWritten(t *testing.T) {
	t.Parallel()
	gwAddr := freeAddr(t)
	script, dir := gatewayPage(t, gwAddr)
	got, err, hung := runDocBlocksBounded(t, dir, script, 2*time.Minute)
	require.False(t, hung)
	require.NoError(t, err)
	require.Contains(t, got, "no CAPTCHAAI_API_KEY: solving with the emulator")
	require.Regexp(t, regexp.MustCompile(`(?m)^OK\|\d+$`), got, "in.php's answer, the captcha's id")
	require.Regexp(t, regexp.MustCompile(`(?m)^OK\|\S{20,}$`), got, "res.php's answer, the token")
	require.Contains(t, got, fmt.Sprintf("captchaq gateway on http://%s/", gwAddr))
	require.NotContains(t, got, "real API", "nothing reaches the paid service")
}

// TestGatewayWalkthroughEndsWhenItsPortIsTaken runs the walkthrough with
// the gateway's port held by an HTTP server of something else, one that
// answers every request as if it took the captcha: run cannot listen, and
// the walkthrough stops there, before a caller's key is sent to whatever
// holds the port.
func TestGatewayWalkthroughEndsWhenItsPortIsTaken(t *testing.T) {
	t.Parallel()
	gwAddr, asked := answeringSquatter(t)
	script, dir := gatewayPage(t, gwAddr)
	got, err, hung := runDocBlocksBounded(t, dir, script, 90*time.Second)
	require.False(t, hung, "the walkthrough still ran after 90s; it should stop once run has failed to listen")
	require.Error(t, err)
	require.Contains(t, got, "captchaq run: gateway: listen tcp "+gwAddr+": bind: address already in use")
	require.NotContains(t, got, "$ reply=", "the walkthrough stops before the first request")
	require.Zero(t, asked.Load(), "no key was sent to what holds the gateway's port")
}
