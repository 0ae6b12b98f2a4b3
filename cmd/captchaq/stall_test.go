package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
)

// A broker stalled (SIGSTOP) for 12 s under gateway callers: in.php answers
// each caller within its bound, and no caller told of an error is charged
// for it; a caller told its id is charged once. The callers' tasks published
// into the stalled connection reach the broker when it resumes: they end
// without reaching the service.
func TestGatewayStalledBrokerChargesNoCallerToldOfAnError(t *testing.T) {
	t.Parallel()
	server := startProcBroker(t, "30s")
	api := fakeapi.New(fakeapi.Config{Seed: 1, BurstLimit: 1 << 20,
		SolveTime: map[string]fakeapi.Range{solver.KindTurnstile: {Min: 50 * time.Millisecond, Max: 100 * time.Millisecond}}})
	calls, emu := countedEmulator(t, api)
	w := startProc(t, keyEnv, "worker", "--nats", server.url, "--solver-url", emu, "--poll-scale", "0.01", "--threads", "8")
	w.waitLine("worker started", 30*time.Second)
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	gw := startProc(t, nil, "gateway", "--nats", server.url, "--addr", addr, "--keys", gatewayKeyFile(t))
	gw.waitLine("captchaq gateway on http://"+addr, 30*time.Second)
	base := "http://" + addr
	inPHP := func(page string, more ...string) string {
		return gatewayGet(t, base, "in.php", append([]string{"key", gatewayKey, "method", "turnstile", "sitekey", "0x4AAAAAAABkMYinukE8nzY",
			"pageurl", "https://shop.example/stall/" + page}, more...)...)
	}
	solved := func(id string) bool {
		out := gatewayGet(t, base, "res.php", "key", gatewayKey, "action", "get", "id", id)
		if out == "CAPCHA_NOT_READY" {
			return false
		}
		require.True(t, strings.HasPrefix(out, "OK|"), "res.php %s: %s", id, out)
		return true
	}
	paid := func(page string) int {
		calls.mu.Lock()
		defer calls.mu.Unlock()
		return len(calls.at[page])
	}
	warm := inPHP("warm")
	require.True(t, strings.HasPrefix(warm, "OK|"), warm)
	require.Eventually(t, func() bool { return solved(strings.TrimPrefix(warm, "OK|")) }, 30*time.Second, 20*time.Millisecond)

	// And a Go producer on its own connection.
	nc, err := nats.Connect(server.url)
	require.NoError(t, err)
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	client, err := stream.NewClient(ctx, nc, stream.ClientConfig{Name: "stall-test"})
	require.NoError(t, err)

	require.NoError(t, server.cmd.Process.Signal(syscall.SIGSTOP))
	stopped := time.Now()
	resumed := false
	defer func() {
		if !resumed {
			_ = server.cmd.Process.Signal(syscall.SIGCONT)
		}
	}()
	const callers = 6
	answers := make([]string, callers)
	took := make([]time.Duration, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			start := time.Now()
			answers[i] = inPHP(fmt.Sprintf("caller-%d", i), "json", "1")
			took[i] = time.Since(start)
		})
	}
	var goErr error
	wg.Go(func() {
		sctx, cancel := context.WithTimeout(ctx, 4*time.Second)
		defer cancel()
		_, goErr = client.Submit(sctx, stream.Task{ID: "go-stall", Method: "turnstile",
			Params: stream.Params{"sitekey": "0x4AAAAAAABkMYinukE8nzY", "pageurl": "https://shop.example/stall/go"}})
	})
	wg.Wait()
	// Submit fails either before it publishes (its reading of the stream's
	// room, refreshed at most every few seconds, gets no answer: nothing
	// sent) or after (the publish is not confirmed: the task may be stored
	// late, after its submit-by). Both leave nothing that will be paid.
	published := errors.Is(goErr, stream.ErrNotConfirmed)
	require.Error(t, goErr)
	if published {
		require.Contains(t, goErr.Error(), `Wait("go-stall")`)
	} else {
		// The room check reads the stream's size, then counts the queued
		// tasks: the stall may catch either read first.
		msg := goErr.Error()
		require.True(t, strings.Contains(msg, "read the stream's size") || strings.Contains(msg, "count queued tasks"),
			"a Submit that fails before it publishes says where: %v", goErr)
	}
	time.Sleep(time.Until(stopped.Add(12 * time.Second))) // the stall's length is the scenario, not a wait for an event
	require.NoError(t, server.cmd.Process.Signal(syscall.SIGCONT))
	resumed = true
	for i, a := range answers {
		t.Logf("caller %d: %q after %s", i, a, took[i].Round(time.Millisecond))
		require.Less(t, took[i], 12*time.Second, "caller %d is answered before the broker resumes", i)
	}

	// A task submitted after the resumption goes out on the gateway's
	// connection after whatever waited in it: once it is solved and the
	// stream holds no unfinished task, every task of the stall has ended.
	after := inPHP("after")
	require.True(t, strings.HasPrefix(after, "OK|"), after)
	require.Eventually(t, func() bool { return solved(strings.TrimPrefix(after, "OK|")) }, 60*time.Second, 50*time.Millisecond)
	require.Eventually(t, func() bool {
		left, err := client.Tasks(ctx, stream.TaskFilter{})
		return err == nil && len(left) == 0
	}, 60*time.Second, 100*time.Millisecond, "every task of the stall ends")

	for i, a := range answers {
		page := fmt.Sprintf("caller-%d", i)
		var r struct {
			Status    int
			Request   string
			ErrorText string `json:"error_text"`
		}
		require.NoError(t, json.Unmarshal([]byte(a), &r), a)
		if r.Status == 1 {
			require.Eventually(t, func() bool { return solved(r.Request) }, 30*time.Second, 50*time.Millisecond)
			require.Equal(t, 1, paid(page), "caller %d was given id %s: paid once", i, r.Request)
			continue
		}
		// Told it was not confirmed, with the id to look up: res.php says
		// what became of it, and a caller charged is one that gets its token.
		id := regexp.MustCompile(`id (\d+) says`).FindStringSubmatch(r.ErrorText)
		if id == nil {
			require.Equal(t, 0, paid(page), "caller %d was told %q and is charged for it", i, a)
			continue
		}
		look := gatewayGet(t, base, "res.php", "key", gatewayKey, "action", "get", "id", id[1])
		t.Logf("caller %d looks up id %s: %s", i, id[1], look)
		if strings.HasPrefix(look, "OK|") {
			require.Equal(t, 1, paid(page), "caller %d looked its task up and got the token: paid once", i)
			continue
		}
		require.NotEqual(t, "CAPCHA_NOT_READY", look, "every task of the stall has ended")
		require.Equal(t, 0, paid(page), "caller %d was told %q, and res.php %q, and is charged for it", i, a, look)
	}
	// The Go producer, told its submission was not confirmed, looks its
	// task up: stored after its submit-by, it ended unsolved and unpaid.
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	out, err := client.Wait(wctx, "go-stall")
	wcancel()
	if published {
		require.ErrorIs(t, err, stream.ErrNotSolved, "%+v", out)
		require.Equal(t, "SUBMIT_BY_PASSED", out.Error, "%+v", out)
	} else {
		require.ErrorIs(t, err, stream.ErrNotFound, "nothing was published: %+v", out)
	}
	require.Equal(t, 0, paid("go"))
	require.Equal(t, 1, paid("warm"))
	require.Equal(t, 1, paid("after"))
}
