package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWalkthroughsPastedWithTheDefaultPortsTaken pastes every walkthrough
// (the pages of walkthroughs) into a shell as a reader does, without set
// -e, on a machine where the fixed ports the pages name are held by
// programs that are not captchaq: the server's 4222 (also what a command
// dials without an address of its own), the emulator's 8088, the
// gateway's 8090, the dashboard's 8080, the across-sites site's 4223 (where
// the page's producer and worker sign in with their passwords) and the
// hub's leaf node port 7422 (where the site's links sign in with theirs). No API key is set. Each page must
// end on its own, send nothing to what holds those ports (not one
// connection), reach no paid service, and leave no process it started
// running. The same run as a script (set -e), which stops at the first
// failed line, must leave nothing running either, also where the server's
// port alone is taken and the emulators started (with CAPTCHAQ_SOAK=1).
func TestWalkthroughsPastedWithTheDefaultPortsTaken(t *testing.T) {
	t.Parallel()
	for page := range walkthroughs {
		modes := []struct{ pasted, serverOnly bool }{{true, false}}
		if os.Getenv("CAPTCHAQ_SOAK") == "1" {
			// As a script too (each page's RunsAsWritten test runs it so
			// with the ports free): two more runs of every page, which
			// the default run of this package has no room for.
			modes = append(modes, struct{ pasted, serverOnly bool }{false, false}, struct{ pasted, serverOnly bool }{false, true})
		}
		for _, mode := range modes {
			pasted := mode.pasted
			t.Run(fmt.Sprintf("%s pasted %v server port only %v", page, pasted, mode.serverOnly), func(t *testing.T) {
				t.Parallel()
				squat := map[string]string{}
				hits := map[string]*atomic.Int64{}
				for _, port := range []string{"4222", "8088", "8090", "8080", "4223", "7422"} {
					squat[port], hits[port] = countingSquatter(t)
				}
				moved := map[string]string{
					"127.0.0.1:8088": squat["8088"], "127.0.0.1:8090": squat["8090"], "127.0.0.1:8080": squat["8080"],
				}
				if mode.serverOnly {
					// The server's port alone: what the page starts next
					// does start, and must be stopped all the same.
					for old := range moved {
						moved[old] = freeAddr(t)
					}
					squat["8088"] = freeAddr(t)
					squat["4223"] = freeAddr(t)
					squat["7422"] = freeAddr(t)
				}
				env := []string{"CAPTCHAQ_LISTEN=" + squat["4222"], "CAPTCHAQ_NATS=nats://" + squat["4222"]}
				var dir, script string
				root := repoRoot(t)
				md, err := os.ReadFile(filepath.Join(root, page))
				require.NoError(t, err)
				blocks := shellBlocks(string(md), "sh")
				switch page {
				case "docs/cluster.md":
					script, dir = clusterPageAs(t, [3]string{squat["4222"], freeAddr(t), freeAddr(t)},
						[3]string{freeAddr(t), freeAddr(t), freeAddr(t)}, pasted)
				case "docs/across-sites.md":
					var more []string
					dir, script, more = sitesWalkthroughAs(t, squat["4222"], portOf(t, squat["4223"]), squat["8088"], squat["7422"], pasted)
					env = append(env, more...)
				case "docs/security.md":
					_, dir = readmeWorkdir(t)
					copyFile(t, filepath.Join(root, "nats.conf"), filepath.Join(dir, "nats.conf"), "127.0.0.1:4222", squat["4222"])
					require.NoError(t, os.WriteFile(filepath.Join(dir, "store.key"), []byte(strings.Repeat("k", 64)+"\n"), 0o600))
					moved["/etc/captchaq/store.key"] = "store.key"
					script = docScript(blocks, moved, pasted)
					env = append(env, "PRODUCER_PW=producer-pw", "WORKER_PW=worker-pw", "ADMIN_PW=admin-pw")
				case "docs/gateway.md":
					if _, err := exec.LookPath("curl"); err != nil {
						t.Skipf("curl, which the page's walkthrough runs, is not installed: %v", err)
					}
					_, dir = readmeWorkdir(t)
					script = docScript(blocks[:1], moved, pasted) // the second block is the HTTPS one, without a service
				default:
					_, dir = readmeWorkdir(t)
					script = docScript(blocks, moved, pasted)
				}

				got, hung, left := runPasted(t, dir, script, 2*time.Minute, env...)
				require.False(t, hung, "with the default ports taken, %s still ran after 2 minutes", page)
				for port, n := range hits {
					assert.Zero(t, n.Load(), "%s: connections to what holds %s", page, port)
				}
				assert.NotContains(t, got, "real API", "nothing reaches the paid service")
				assert.Empty(t, left, "%s: processes it started still run after it ended", page)
				if page == "README.md" && pasted {
					// What the README says pasting does when the server
					// could not start: the wait ends, and submit --wait
					// refuses the address left.
					for _, claim := range []string{"No such process", "names no host"} {
						require.Contains(t, string(md), claim, "the README says what pasting shows")
					}
					require.Contains(t, got, "No such process", "the wait for the server ends")
					require.Regexp(t, `captchaq submit: .*names no host`, got, "submit --wait refuses nats://")
				}
			})
		}
	}
}

// countingSquatter holds a loopback port as a program that is not a
// captchaq service would: it accepts connections, counts them and never
// answers. It returns its address and the count.
func countingSquatter(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	n := new(atomic.Int64)
	done := make(chan struct{})
	t.Cleanup(func() { _ = l.Close(); <-done })
	go func() {
		defer close(done)
		var held []net.Conn
		defer func() {
			for _, c := range held {
				_ = c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			held = append(held, c)
		}
	}()
	return l.Addr().String(), n
}

// runPasted runs a pasted script as runDocBlocksBounded does, for at most
// limit: its output, whether it was still running at limit, and the
// processes of its process group (those it started and left behind) still
// alive once the shell ended, by name; then it kills them.
func runPasted(t *testing.T, dir, script string, limit time.Duration, env ...string) (string, bool, []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd, output := docCommand(ctx, dir, script, env...)
	// A job left running holds the output open: stop waiting for it
	// soon after the shell ends.
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	err := cmd.Run()
	var left []string
	if cmd.Process != nil {
		left = groupAlive(t, cmd.Process.Pid)
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	t.Logf("after %v (%v), output:\n%s", time.Since(start).Round(time.Second), err, output.String())
	return output.String(), ctx.Err() != nil && !errors.Is(err, exec.ErrWaitDelay), left
}

// groupAlive names the processes of process group pgid that are alive (not
// zombies waiting to be reaped), from /proc.
func groupAlive(t *testing.T, pgid int) []string {
	t.Helper()
	procs, err := filepath.Glob("/proc/[0-9]*/stat")
	require.NoError(t, err)
	var alive []string
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // ended meanwhile
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		if g, err := strconv.Atoi(f[2]); err == nil && g == pgid {
			alive = append(alive, s[strings.IndexByte(s, '(')+1:i])
		}
	}
	return alive
}

// portOf is the port of a host:port address.
func portOf(t *testing.T, addr string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	return port
}
