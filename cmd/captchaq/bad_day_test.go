package main

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream"
)

// An emulator that cannot listen (its port held by something else) exits
// non-zero with one line naming the address, and prints no bill: a "0
// captchas accepted … balance" summary reads as if an emulator had run.
func TestFakeAPIThatCannotListenPrintsNoBill(t *testing.T) {
	t.Parallel()
	held, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = held.Close() })
	addr := held.Addr().String()

	r := captchaq(t, "", "fakeapi", "--addr", addr, "--addr-file", t.TempDir()+"/fakeapi.addr")
	require.Equal(t, 1, r.code, "%s%s", r.stdout, r.stderr)
	require.Empty(t, r.stdout, "no bill from an emulator that never listened")
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	require.Len(t, lines, 1, "one line: %s", r.stderr)
	require.Contains(t, lines[0], "captchaq fakeapi: ")
	require.Contains(t, lines[0], addr)
	require.Contains(t, lines[0], "address already in use")
	require.NotContains(t, lines[0], "fakeapi: fakeapi:", "the command's name once")
}

// --version takes nothing after it: `captchaq --version extra` is a usage
// error (exit 2), as any command given an argument it does not take.
func TestVersionRefusesArguments(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--version", "extra"}, {"version", "stats"}} {
		r := captchaq(t, "", args...)
		require.Equal(t, 2, r.code, "%v: %s%s", args, r.stdout, r.stderr)
		require.Empty(t, r.stdout, "%v", args)
		require.Contains(t, r.stderr, `"`+args[1]+`"`, "%v names what it refuses", args)
	}
	r := captchaq(t, "", "--version")
	require.Zero(t, r.code, r.stderr)
	require.True(t, strings.HasPrefix(r.stdout, "captchaq "), r.stdout)
}

// A flag before the command (`captchaq --nats X stats`) is refused with a
// hint that flags go after the command, naming the line to type.
func TestFlagBeforeTheCommandSaysWhereFlagsGo(t *testing.T) {
	t.Parallel()
	r := captchaq(t, "", "--nats", "nats://127.0.0.1:1", "stats")
	require.Equal(t, 2, r.code, "%s%s", r.stdout, r.stderr)
	require.Contains(t, r.stderr, "flags go after the command")
	require.Contains(t, r.stderr, "captchaq stats --nats nats://127.0.0.1:1")
	r = captchaq(t, "", "--log-level", "warn")
	require.Equal(t, 2, r.code, "%s%s", r.stdout, r.stderr)
	require.Contains(t, r.stderr, "flags go after the command")
}

// `dead replay --all --yes` with no dead letter to replay says so and
// exits 0: silence reads as if it had not run. It says so on stderr;
// stdout holds the receipts (none), JSON lines a script reads.
func TestReplayAllWithNothingToReplaySaysSo(t *testing.T) {
	t.Parallel()
	natsURL, _, _ := listeningServer(t, stream.Topology{})
	for _, args := range [][]string{{"--all", "--yes"}, {"--all", "--reason", "permanent", "--yes"}} {
		r := captchaq(t, natsURL, append([]string{"dead", "replay"}, args...)...)
		require.Zero(t, r.code, "%v: %s%s", args, r.stdout, r.stderr)
		require.Empty(t, r.stdout, "%v", args)
		require.Contains(t, r.stderr, "nothing to replay", "%v", args)
	}
}

// The pause warning of stats words a deadline already past as past: a
// task past its deadline ends dead whether or not the lane resumes, so the
// warning must not promise that resuming saves it.
func TestPauseWarningForDeadlinesAlreadyPast(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	var b strings.Builder
	printDeadlineWarnings(&b, stream.Stats{At: at, Queues: []stream.QueueStats{
		{Lane: "slow", DeadlinesInPause: 3, FirstDeadline: at.Add(-2 * time.Minute)},
	}})
	got := b.String()
	require.Contains(t, got, "warning: lane slow is paused with 3 waiting tasks whose deadline passes before the pause ends")
	require.Contains(t, got, "the first passed at 2026-12-06T11:58:00Z, 2m0s ago")
	require.NotContains(t, got, "unless `captchaq lane resume slow` comes first", "resuming does not save a task past its deadline")
	require.Contains(t, got, "past its deadline ends dead with DEADLINE_PASSED, resumed or not")
	require.Contains(t, got, "`captchaq lane resume slow` saves only those whose deadline is still ahead")

	b.Reset()
	printDeadlineWarnings(&b, stream.Stats{At: at, Queues: []stream.QueueStats{
		{Lane: "slow", DeadlinesInPause: 3, FirstDeadline: at.Add(2 * time.Minute)},
	}})
	require.Contains(t, b.String(), "(the first passes at 2026-12-06T12:02:00Z, in 2m0s): they end dead with DEADLINE_PASSED unless `captchaq lane resume slow` comes first")
}
