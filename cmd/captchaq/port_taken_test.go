package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// An emulator whose port something else holds says how to move it, on one
// line, not only the kernel's "address already in use" (what a walkthrough
// pasted where 8088 is taken showed, and nothing more).
func TestTakenPortSaysHowToMoveIt(t *testing.T) {
	t.Parallel()
	held, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = held.Close() })
	r := captchaq(t, "nats://127.0.0.1:1", "fakeapi", "--addr", held.Addr().String())
	require.NotZero(t, r.code, r.stdout)
	require.Contains(t, r.stderr, "address already in use", r.stderr)
	require.Contains(t, r.stderr, "--addr 127.0.0.1:0", r.stderr)
	require.Equal(t, 1, strings.Count(strings.TrimSpace(r.stderr), "\n")+1, "one line: %s", r.stderr)
	require.NotContains(t, r.stdout, "fakeapi:", "no bill from an emulator that never listened")

	// run's gateway (docs/gateway.md), on the port the page names.
	keys := filepath.Join(t.TempDir(), "keys.json")
	require.NoError(t, os.WriteFile(keys, []byte(`{"keys": [{"key": "crawler-3f9a0c1e5b7d2468ace1", "producer": "crawler"}]}`), 0o600))
	r = captchaq(t, "nats://127.0.0.1:1", "run", "--gateway", held.Addr().String(), "--gateway-keys", keys)
	require.NotZero(t, r.code, r.stdout)
	require.Contains(t, r.stderr, "address already in use", r.stderr)
	require.Contains(t, r.stderr, "--gateway 127.0.0.1:0", r.stderr)

	// The server's dashboard (docs/dashboard.md), on the port the page names.
	r = captchaq(t, "nats://127.0.0.1:1", "server", "--config", "", "--listen", "127.0.0.1:0",
		"--store", filepath.Join(t.TempDir(), "store"), "--dashboard", held.Addr().String())
	require.NotZero(t, r.code, r.stdout)
	require.Contains(t, r.stderr, "address already in use", r.stderr)
	require.Contains(t, r.stderr, "--dashboard 127.0.0.1:0", r.stderr)
}

// A trial server on --listen HOST:0 takes a free port and names it in
// --addr-file, as the emulator does with --addr 127.0.0.1:0, instead of
// refusing a HOST:PORT with "want HOST:PORT".
func TestServerListensOnAFreePort(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	addrFile := filepath.Join(dir, "server.addr")
	p := startProc(t, nil, "server", "--config", "", "--listen", "127.0.0.1:0", "--log-level", "warn",
		"--store", filepath.Join(dir, "store"), "--addr-file", addrFile)
	p.waitLine("captchaq server ready", 60*time.Second)
	b, err := os.ReadFile(addrFile)
	require.NoError(t, err)
	host, port, err := net.SplitHostPort(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1", host)
	require.NotEqual(t, "0", port)
	p.kill()
}
