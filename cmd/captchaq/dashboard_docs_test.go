package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/dashboard"
)

// dashboardPage returns docs/dashboard.md's ```sh blocks and a directory
// to run them in (captchaq built there, testdata/tasks.jsonl copied in), as
// TestREADMEShellBlocks prepares the README's.
func dashboardPage(t *testing.T) (blocks []string, dir string) {
	t.Helper()
	_, dir = readmeWorkdir(t)
	page, err := os.ReadFile(filepath.Join("..", "..", "docs", "dashboard.md"))
	require.NoError(t, err)
	blocks = shellBlocks(string(page), "sh")
	require.Len(t, blocks, 3, "docs/dashboard.md's walkthrough: the server, the worker and tasks, the stop")
	return blocks, dir
}

// TestDashboardWalkthroughRunsAsWritten runs docs/dashboard.md's
// walkthrough as TestREADMEShellBlocks runs the README's (no key, HTTPS
// refused, the server's port moved through the environment the page names,
// the dashboard's 8080 replaced by a free port). Before its last block
// stops everything, the dashboard it started answers with what the page
// says: the thirty tasks ended, two dead, one worker seen; the emulator
// was paid once per captcha.
func TestDashboardWalkthroughRunsAsWritten(t *testing.T) {
	t.Parallel()
	blocks, dir := dashboardPage(t)
	natsAddr, dashAddr := freeAddr(t), freeAddr(t)
	replace := map[string]string{"127.0.0.1:8080": dashAddr}
	// The test reads the dashboard while the script waits before its stop.
	script := readmeScript(t, blocks[:2], replace) + "until [ -e dashboard-read ]; do sleep 0.1; done\n" +
		strings.TrimPrefix(readmeScript(t, blocks[2:], replace), "set -e\n")
	type result struct {
		out  string
		err  error
		hung bool
	}
	ran := make(chan result, 1)
	go func() {
		out, err, hung := runDocBlocksBounded(t, dir, script, 3*time.Minute,
			"CAPTCHAQ_LISTEN="+natsAddr, "CAPTCHAQ_NATS=nats://"+natsAddr)
		ran <- result{out, err, hung}
	}()

	var snap dashboard.Snapshot
	read := func() bool {
		resp, err := http.Get("http://" + dashAddr + "/api/snapshot")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&snap) == nil && snap.Stats.Solved+snap.Stats.Dead == 30
	}
	for !read() {
		select {
		case r := <-ran:
			t.Fatalf("the walkthrough ended before its dashboard showed thirty outcomes (hung %v, %v):\n%s", r.hung, r.err, r.out)
		case <-time.After(200 * time.Millisecond):
		}
	}
	require.Equal(t, 28, snap.Stats.Solved)
	require.Equal(t, 2, snap.Stats.Dead)
	require.Equal(t, 1, snap.Stats.WorkersAlive)
	body, code := httpGet(t, "http://"+dashAddr+"/api/servers")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `"total":1`)
	require.Contains(t, body, `"store":{`, "captchaq server reports its store on the server page")
	body, code = httpGet(t, "http://"+dashAddr+"/api/dead")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `"total":2`)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "dashboard-read"), nil, 0o600))

	r := <-ran
	require.False(t, r.hung, r.out)
	require.NoError(t, r.err, r.out)
	require.Contains(t, r.out, "2 of 30 tasks not solved")
	require.Contains(t, r.out, "captchaq dashboard on http://"+dashAddr+"/")
	require.Contains(t, r.out, "fakeapi: no task was paid for more than once")
	require.NotContains(t, r.out, "real API", "nothing reaches the paid service")
}

// TestDashboardWalkthroughEndsWhenItsPortIsTaken runs the walkthrough with
// the dashboard's port held by something that accepts connections and never
// answers: the server says which port and exits before it answers anyone,
// and the walkthrough ends there, before a worker starts or anything is
// submitted.
func TestDashboardWalkthroughEndsWhenItsPortIsTaken(t *testing.T) {
	t.Parallel()
	blocks, dir := dashboardPage(t)
	natsAddr, dashAddr := freeAddr(t), squatPort(t)
	script := readmeScript(t, blocks, map[string]string{"127.0.0.1:8080": dashAddr})
	got, err, hung := runDocBlocksBounded(t, dir, script, 90*time.Second,
		"CAPTCHAQ_LISTEN="+natsAddr, "CAPTCHAQ_NATS=nats://"+natsAddr)
	require.False(t, hung, "the walkthrough still waited after 90s; it should end once the server has failed to start")
	require.Error(t, err, "the walkthrough cannot succeed without its dashboard")
	require.Contains(t, got, fmt.Sprintf("captchaq server: --dashboard: listen tcp %s: bind: address already in use", dashAddr))
	require.NotContains(t, got, "captchaq server ready", "the server never announced itself")
	require.NotContains(t, got, "$ ./captchaq fakeapi", "the walkthrough stops before the emulator and the worker")
}
