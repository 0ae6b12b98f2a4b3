package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	blocks := shellBlocks(string(readme), "sh")

	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "captchaq"), "./cmd/captchaq")
	build.Dir = root
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "testdata"), 0o755))
	tasks, err := os.ReadFile(filepath.Join(root, "testdata", "tasks.jsonl"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "testdata", "tasks.jsonl"), tasks, 0o600))

	// The squatter: takes the port, accepts, never answers.
	squat, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = squat.Close() })
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				_ = c.Close()
			}
		}()
		for {
			c, err := squat.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	natsAddr := squat.Addr().String()
	emuPort := freePort(t)
	script := readmeScript(t, blocks, map[string]string{"127.0.0.1:8088": fmt.Sprintf("127.0.0.1:%d", emuPort)})

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CAPTCHAQ_") && !strings.HasPrefix(kv, "CAPTCHAAI_") && !strings.HasPrefix(kv, "GOFLAGS=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "CAPTCHAQ_LISTEN="+natsAddr, "CAPTCHAQ_NATS=nats://"+natsAddr,
		"HTTPS_PROXY=http://127.0.0.1:1", "HTTP_PROXY=http://127.0.0.1:1", "NO_PROXY=127.0.0.1,localhost")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// The script may end while the jobs it started in the background still
	// hold its output open: stop waiting for them soon after, then kill them
	// with the rest of the process group.
	cmd.WaitDelay = 5 * time.Second
	var output strings.Builder
	cmd.Stdout, cmd.Stderr = &output, &output
	start := time.Now()
	err = cmd.Run()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	t.Logf("after %v, output:\n%s", time.Since(start).Round(time.Second), output.String())

	require.NoError(t, ctx.Err(), "the walkthrough still waited for the server after 90s; it should end once the server has failed to start")
	require.Error(t, err, "the walkthrough cannot succeed without its server")
	require.Contains(t, output.String(), "address already in use", "the server's own error is shown")
	require.NotContains(t, output.String(), "real API", "nothing reaches the paid service")
}
