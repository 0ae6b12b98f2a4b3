package main

import (
	"bufio"
	"context"
	"flag"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestMain lets the test binary stand in for the captchaq binary: the
// process tests start it again with CAPTCHAQ_TEST_MAIN=1 and captchaq's
// arguments, so real processes are killed without a separate build.
func TestMain(m *testing.M) {
	if os.Getenv("CAPTCHAQ_TEST_MAIN") == "1" {
		// A test may start captchaq with a low descriptor limit (soft and
		// hard), as a host with few descriptors would.
		if n, err := strconv.ParseUint(os.Getenv("CAPTCHAQ_TEST_NOFILE"), 10, 64); err == nil {
			if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: n}); err != nil {
				panic(err)
			}
		}
		ctx, stop := withSignals(context.Background())
		code := realMain(ctx, os.Args[1:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	// This package's tests mostly wait: on the captchaq processes they
	// start, on an emulator's scaled solve times, on pasted walkthroughs.
	// go test runs GOMAXPROCS parallel tests at once (2 on the CI
	// machine), which left the package past go test's 10-minute limit;
	// 4 at once, unless -parallel is given, keeps it well inside it.
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given && runtime.GOMAXPROCS(0) < 4 {
		_ = flag.Set("test.parallel", "4")
	}
	os.Exit(m.Run())
}

// childEnv makes the test binary act as captchaq; under the race detector it
// also skips the detector's one-second pause at exit.
var childEnv = []string{"CAPTCHAQ_TEST_MAIN=1", "GORACE=atexit_sleep_ms=0"}

// proc is a captchaq process started by a test.
type proc struct {
	t     *testing.T
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []string
	added chan struct{} // closed and replaced whenever a line arrives
	exit  chan error
}

// startProc runs captchaq with args; env adds to the test's environment.
// It is killed at the end of the test if still running.
func startProc(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), childEnv...), env...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	p := &proc{t: t, cmd: cmd, added: make(chan struct{}), exit: make(chan error, 1)}
	require.NoError(t, cmd.Start())
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			close(p.added)
			p.added = make(chan struct{})
			p.mu.Unlock()
		}
	}()
	go func() {
		err := cmd.Wait()
		_ = pw.Close()
		// The exit is told once every line is in p.lines: a line the
		// scanner has read but not appended yet would be missing from
		// the output of a process that has ended.
		<-scanned
		p.exit <- err
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("output of captchaq %s:\n%s", strings.Join(args, " "), p.output())
		}
	})
	return p
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

// waitLine waits until the process printed a line containing s.
func (p *proc) waitLine(s string, timeout time.Duration) {
	p.t.Helper()
	deadline := time.After(timeout)
	for {
		p.mu.Lock()
		for _, l := range p.lines {
			if strings.Contains(l, s) {
				p.mu.Unlock()
				return
			}
		}
		added := p.added
		p.mu.Unlock()
		select {
		case <-added:
		case <-deadline:
			p.t.Fatalf("no line with %q within %s; output:\n%s", s, timeout, p.output())
		}
	}
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case err := <-p.exit:
		p.exit <- err
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		require.NoError(p.t, err)
		return 0
	case <-time.After(timeout):
		p.t.Fatalf("still running after %s; output:\n%s", timeout, p.output())
		return -1
	}
}

func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	p.wait(10 * time.Second)
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	return unusedPort(t)
}

func itoa(n int) string { return strconv.Itoa(n) }
