package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A `captchaq fakeapi` stopped with Ctrl-C while a client holds a
// connection it has sent nothing on yet (an HTTP client's spare dial)
// prints its bill and exits 0, as with no connection.
//
// Failed before: the server's shutdown waited for that connection, which
// net/http counts as active for its first 5 s, for all of its own 5 s,
// and the emulator exited 130 ("interrupted") after printing its bill: a
// run's emulator in TestRunWithJSONProviderOnFakeAPI did, now and then.
func TestFakeAPIStopsWithAConnectionSayingNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	api := startProc(t, nil, "fakeapi", "--addr", "127.0.0.1:0", "--addr-file", filepath.Join(dir, "addr"))
	api.waitLine("fakeapi listening on http://", 30*time.Second)
	addr, err := os.ReadFile(filepath.Join(dir, "addr"))
	require.NoError(t, err)
	conn, err := net.Dial("tcp", strings.TrimSpace(string(addr)))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	require.NoError(t, api.cmd.Process.Signal(syscall.SIGINT))
	require.Equal(t, 0, api.wait(30*time.Second), api.output())
	require.Contains(t, api.output(), "fakeapi: 0 captchas accepted")
}
