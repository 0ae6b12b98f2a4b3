package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
)

// `captchaq server --gateway` with the shipped nats.conf, in a process
// allowed 1,024 descriptors, while 2,000 connections (20,000 with
// CAPTCHAQ_SOAK=1 and a process allowed 16,384) each send in.php's headers
// and one byte of a body they never finish: a producer's `stats`, a new
// worker, and a legitimate caller's in.php and res.php are all served, the
// caller's captcha solved and answered within 20 s, and the server never
// runs out of descriptors. The gateway holds at most half the process's
// descriptors; the connections beyond wait in the kernel's backlog, and
// those without a key in their query beyond the address's count are
// answered at once and closed.
func TestSlowConnectionsLeaveTheBrokerServed(t *testing.T) {
	n, nofile := 2000, "1024"
	if os.Getenv("CAPTCHAQ_SOAK") == "1" {
		n, nofile = 20000, "16384"
	}
	root, dir := repoRoot(t), t.TempDir()
	natsPort, addr := freePort(t), fmt.Sprintf("127.0.0.1:%d", freePort(t))
	conf := filepath.Join(dir, "nats.conf")
	copyFile(t, filepath.Join(root, "nats.conf"), conf, "127.0.0.1:4222", fmt.Sprintf("127.0.0.1:%d", natsPort))
	env := []string{
		"CAPTCHAQ_PRODUCER_PASSWORD_HASH=" + bcryptHash(t, "producer-pw"),
		"CAPTCHAQ_WORKER_PASSWORD_HASH=" + bcryptHash(t, "worker-pw"),
		"CAPTCHAQ_ADMIN_PASSWORD_HASH=" + bcryptHash(t, "admin-pw"),
		"CAPTCHAQ_STORE_KEY=" + strings.Repeat("k", 64),
		"CAPTCHAQ_ADMIN_PASSWORD=admin-pw",
		"CAPTCHAQ_GATEWAY_PASSWORD=producer-pw",
		"CAPTCHAQ_TEST_NOFILE=" + nofile,
	}
	p := startProc(t, env, "server", "--config", conf, "--store", filepath.Join(dir, "store"),
		"--gateway", addr, "--gateway-keys", gatewayKeyFile(t), "--gateway-max-conns-per-addr", "1000000")
	p.waitLine("captchaq gateway on http://"+addr, time.Minute)
	natsURL := fmt.Sprintf("nats://127.0.0.1:%d", natsPort)

	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		conns  []net.Conn
		dialed atomic.Int32
	)
	head := "POST /in.php HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100000\r\n\r\nm"
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			if _, err := c.Write([]byte(head)); err == nil {
				dialed.Add(1)
			}
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	t.Logf("%d of %d slow connections opened and sent their headers", dialed.Load(), n)
	start := time.Now()

	// A producer reads the queue's state.
	st := startProc(t, []string{"CAPTCHAQ_USER=producer", "CAPTCHAQ_PASSWORD=producer-pw"}, "stats", "--nats", natsURL)
	require.Equal(t, 0, st.wait(20*time.Second), st.output())
	t.Logf("stats served after %v", time.Since(start).Round(time.Millisecond))

	// A new worker connects and takes tasks.
	api := fakeapi.New(fakeapi.Config{TimeScale: 0.001})
	apiURL, stopAPI, err := fakeapi.ServeLocal(api)
	require.NoError(t, err)
	t.Cleanup(stopAPI)
	sc, err := solver.NewClient(solver.Config{BaseURL: apiURL, APIKey: fakeapi.TestKey, Timing: solver.Timing{Scale: 0.001},
		MinSubmitInterval: -1, SubmitBurst: -1})
	require.NoError(t, err)
	wnc, err := nats.Connect(natsURL, nats.UserInfo("worker", "worker-pw"), nats.Timeout(10*time.Second))
	require.NoError(t, err, "a new worker connects")
	t.Cleanup(wnc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := stream.NewWorker(ctx, wnc, stream.WorkerConfig{Solver: sc, Threads: 2, ShutdownGrace: 100 * time.Millisecond})
	require.NoError(t, err)
	wctx, stopWorker := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	t.Cleanup(func() { stopWorker(); <-done })

	// A legitimate caller submits and polls through the gateway.
	out := gatewayGet(t, "http://"+addr, "in.php", gatewayTurnstile...)
	require.True(t, strings.HasPrefix(out, "OK|"), out)
	t.Logf("in.php served after %v", time.Since(start).Round(time.Millisecond))
	id := strings.TrimPrefix(out, "OK|")
	for {
		out = gatewayGet(t, "http://"+addr, "res.php", "key", gatewayKey, "action", "get", "id", id)
		if out != "CAPCHA_NOT_READY" {
			break
		}
		require.Less(t, time.Since(start), 20*time.Second, "not answered within 20 s")
		time.Sleep(50 * time.Millisecond) // the caller's poll interval
	}
	require.True(t, strings.HasPrefix(out, "OK|"), out)
	elapsed := time.Since(start)
	t.Logf("stats, a new worker, and a caller's in.php and answer served in %v", elapsed.Round(time.Millisecond))
	require.Less(t, elapsed, 20*time.Second)
	require.Equal(t, 1, api.Stats().Submitted, "the caller's captcha, paid once")
	require.NotContains(t, p.output(), "too many open files")
}
