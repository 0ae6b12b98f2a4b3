package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A solver URL that names no host ("http://$(cat fakeapi.addr)" after the
// emulator failed to start, as the walkthroughs leave it when pasted) is
// refused as a usage error that names the flag and its variable, and what
// to put there, before any key is read or anything is dialled.
func TestSolverURLWithoutAHostIsRefused(t *testing.T) {
	t.Parallel()
	keyFile := filepath.Join(t.TempDir(), "key")
	require.NoError(t, os.WriteFile(keyFile, []byte("0123456789abcdef0123456789abcdef\n"), 0o600))
	for _, url := range []string{"http://", "https://", "http://:8088", "127.0.0.1:8088", "ftp://127.0.0.1:8088"} {
		for _, args := range [][]string{{"balance"}, {"report", "bad", "123"}} {
			args = append(args, "--solver-url", url, "--key-file", keyFile)
			r := captchaq(t, "nats://127.0.0.1:1", args...)
			require.Equal(t, 2, r.code, "--solver-url %q: %v: %s%s", url, args, r.stdout, r.stderr)
			require.Contains(t, r.stderr, "--solver-url", "%v", args)
			require.Contains(t, r.stderr, "CAPTCHAQ_SOLVER_URL", "%v", args)
			require.Equal(t, 1, strings.Count(strings.TrimSpace(r.stderr), "\n")+1, "one line: %s", r.stderr)
		}
	}
}
