package stream

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/internal/logbuf"
	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
)

// A worker whose solving service does not listen yet (a wrong port, or the
// emulator started after the worker): its tasks wait without spending
// attempts, the log says what failed and then warns while it lasts, and
// once the service comes up they are solved on their first attempt. With a
// budget of one attempt, a single spent attempt would dead-letter a task.
func TestUnreachableServiceSpendsNoAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now

	var logs logbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	sc, err := solver.NewClient(solver.Config{BaseURL: "http://" + addr, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1,
		Timing: solver.Timing{Scale: 0.001}, Logger: log,
		OutageWarnAfter: 100 * time.Millisecond}) // the production default is 1 min
	require.NoError(t, err)
	p := retry.Policy{MaxAttempts: 1, InitialInterval: 10 * time.Millisecond, MaxInterval: 20 * time.Millisecond, NoJitter: true,
		CapacityDelay: 20 * time.Millisecond, CapacityMaxDelay: 50 * time.Millisecond}
	b.startWorker(t, WorkerConfig{Solver: sc, Threads: 2, Policy: p, Logger: log})

	tasks := []Task{turnstileTask("o1"), turnstileTask("o2"), recaptchaTask("o3")}
	receipts, err := b.client.SubmitAll(ctx, tasks)
	require.NoError(t, err)

	// Each task snoozes again and again, spending nothing, until the log
	// has warned about the outage.
	snoozed := func(id string) (n int) {
		for _, ev := range b.events(t, id) {
			if ev.Kind == EventSnooze {
				require.Equal(t, solver.CodeUnreachable, ev.Code, "%+v", ev)
				require.Zero(t, ev.Attempts, "a snooze for an outage spends no attempt: %+v", ev)
				n++
			}
			require.NotEqual(t, EventDead, ev.Kind, "task %s dead during the outage: %+v", id, ev)
		}
		return n
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		all := true
		for _, tk := range tasks {
			all = all && snoozed(tk.ID) >= 3
		}
		if all && strings.Contains(logs.String(), "still unreachable") {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("tasks did not snooze through the outage; log:\n%s", logs.String())
		case <-tick.C:
		}
	}
	want := "connection refused to " + addr + ": is the service's URL right?"
	require.Contains(t, logs.String(), want)
	require.Regexp(t, `level=WARN msg="the solving service is still unreachable`, logs.String())
	since, uerr := sc.Unreachable()
	require.False(t, since.IsZero())
	require.ErrorContains(t, uerr, want)

	// The service comes up where it was expected.
	api := fakeapi.New(fakeapi.Config{SolveTime: fastSolve(10 * time.Millisecond), BurstLimit: 1 << 20})
	up := make(chan struct{})
	sctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- api.ListenAndServe(sctx, addr, func(net.Addr) { close(up) }) }()
	t.Cleanup(func() { stop(); <-served })
	select {
	case <-up:
	case err := <-served:
		t.Fatalf("emulator on %s: %v", addr, err)
	}

	solved := 0
	require.NoError(t, b.client.WaitAll(ctx, receipts, func(o Outcome, err error) {
		require.NoError(t, err, "task %s: %+v", o.ID, o)
		require.Equal(t, StatusSolved, o.Status)
		require.Equal(t, 1, o.Attempts, "task %s: the outage spent no attempt", o.ID)
		solved++
	}))
	require.Equal(t, len(tasks), solved)
	require.Contains(t, logs.String(), "the solving service answers again")
	since, uerr = sc.Unreachable()
	require.True(t, since.IsZero(), "%v", uerr)
}

// A dead letter that ends on a network error names it: a service that cuts
// every connection mid-reply spends the attempts, and the outcome and the
// dead letter carry what failed beside the code.
func TestDeadLetterNamesNetworkError(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	cut := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	})
	url, stop, err := fakeapi.ServeLocal(cut)
	require.NoError(t, err)
	t.Cleanup(stop)
	sc, err := solver.NewClient(solver.Config{BaseURL: url, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1,
		Timing: solver.Timing{Scale: 0.001}})
	require.NoError(t, err)
	b.startWorker(t, WorkerConfig{Solver: sc, Threads: 1,
		Policy: retry.Policy{MaxAttempts: 2, InitialInterval: 10 * time.Millisecond, MaxInterval: 20 * time.Millisecond, NoJitter: true}})
	out, err := b.client.Solve(ctx, turnstileTask("cut1"))
	require.Error(t, err)
	require.Equal(t, StatusDead, out.Status, "%+v", out)
	require.Equal(t, solver.CodeNetwork, out.Error)
	require.Contains(t, out.Detail, "EOF", "the outcome names the network error: %+v", out)
	dead := 0
	for _, ev := range b.events(t, "cut1") {
		if ev.Kind == EventDead {
			dead++
			require.Contains(t, ev.Detail, "EOF", "%+v", ev)
		}
	}
	require.Equal(t, 1, dead, fmt.Sprint(b.events(t, "cut1")))
	dl, err := b.client.DeadLetterOf(ctx, "cut1")
	require.NoError(t, err)
	require.Equal(t, solver.CodeNetwork, dl.Error)
	require.Contains(t, dl.Detail, "EOF", "the dead letter names the network error: %+v", dl)
}
