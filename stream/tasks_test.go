package stream

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream/broker"
	"github.com/captchaq/captchaq/stream/internal/taskstore"
	"github.com/captchaq/captchaq/stream/wire"
)

// A queued task that is canceled ends dead/canceled at its delivery without
// a call to the service; its neighbour is solved.
func TestCancelQueuedTaskNeverReachesTheService(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	_, err := b.client.SubmitAll(ctx, []Task{turnstileTask("keep"), turnstileTask("drop")})
	require.NoError(t, err)

	ts, err := b.client.Tasks(ctx, TaskFilter{})
	require.NoError(t, err)
	require.Len(t, ts, 2)
	for _, ti := range ts {
		require.Equal(t, TaskQueued, ti.Status)
		require.Equal(t, LaneFast, ti.Lane)
		require.Equal(t, PriorityNormal, ti.Priority)
		require.Equal(t, "shop.example", ti.Host)
	}

	ti, err := b.client.Cancel(ctx, "drop", "operator")
	require.NoError(t, err)
	require.Equal(t, TaskQueued, ti.Status)
	require.True(t, ti.Canceled)

	var solved []string
	var calls atomic.Int32
	b.startWorker(t, WorkerConfig{Solver: solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
		calls.Add(1)
		return tokenSolver().Solve(ctx, req)
	})})
	out, err := b.client.Wait(ctx, "drop")
	require.ErrorIs(t, err, ErrNotSolved)
	require.Equal(t, string(retry.ReasonCanceled), out.Reason)
	require.Equal(t, "CANCELED", out.Error)
	require.Equal(t, "canceled by test-producer: operator", out.Detail)
	out, err = b.client.Wait(ctx, "keep")
	require.NoError(t, err)
	solved = append(solved, out.ID)
	require.Equal(t, []string{"keep"}, solved)
	require.Equal(t, int32(1), calls.Load(), "only the kept task reached the service")

	d, err := b.client.DeadLetterOf(ctx, "drop")
	require.NoError(t, err)
	require.Equal(t, retry.ReasonCanceled, d.Reason)

	_, err = b.client.Cancel(ctx, "keep", "too late")
	require.ErrorIs(t, err, ErrTaskEnded)
	_, err = b.client.Cancel(ctx, "never-was", "")
	require.ErrorIs(t, err, ErrNotFound)
}

// Tasks tells a task at the service from one waiting out a retry delay.
func TestTasksSolvingAndRetrying(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	started := make(chan string, 4)
	release := make(chan struct{})
	b.startWorker(t, WorkerConfig{Threads: 2, Policy: retry.Policy{InitialInterval: 5 * time.Minute, MaxInterval: 5 * time.Minute, NoJitter: true},
		Solver: solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
			started <- req.Params["sitekey"]
			if req.Params["sitekey"] == "fail" {
				return solver.Answer{}, apiErr("ERROR_CAPTCHA_UNSOLVABLE", retry.Transient)
			}
			select {
			case <-release:
			case <-ctx.Done():
			}
			b, _ := json.Marshal("tok")
			return solver.Answer{Solution: b}, ctx.Err()
		})})
	hold, fail := turnstileTask("hold"), turnstileTask("fail")
	hold.Params = Params{"sitekey": "hold", "pageurl": "https://a.example/x"}
	fail.Params = Params{"sitekey": "fail", "pageurl": "https://b.example/y"}
	_, err := b.client.SubmitAll(ctx, []Task{hold, fail})
	require.NoError(t, err)
	<-started
	<-started
	var ts []TaskInfo
	require.Eventually(t, func() bool {
		ts, err = b.client.Tasks(ctx, TaskFilter{})
		require.NoError(t, err)
		return len(ts) == 2 && ts[0].Status != TaskQueued && ts[1].Status == TaskRetrying
	}, 10*time.Second, 10*time.Millisecond, "%+v", ts)
	require.True(t, true, 10*time.Millisecond)
	require.Equal(t, "hold", ts[0].ID)
	require.Equal(t, TaskSolving, ts[0].Status)
	require.Equal(t, "fail", ts[1].ID)
	require.Equal(t, "ERROR_CAPTCHA_UNSOLVABLE", ts[1].LastCode)
	require.WithinDuration(t, time.Now().Add(5*time.Minute), ts[1].RetryAt, time.Minute)

	only, err := b.client.Tasks(ctx, TaskFilter{Status: TaskRetrying})
	require.NoError(t, err)
	require.Len(t, only, 1)
	require.Equal(t, "fail", only[0].ID)
	none, err := b.client.Tasks(ctx, TaskFilter{Lane: LaneSlow})
	require.NoError(t, err)
	require.Empty(t, none)

	// A retrying task that is canceled dies at its next delivery.
	_, err = b.client.Cancel(ctx, "fail", "")
	require.NoError(t, err)
	close(release)
	_, err = b.client.Wait(ctx, "hold")
	require.NoError(t, err)
}

// A paused lane is not taken from; the other lane is; resumed, it is.
func TestPauseLane(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	b.startWorker(t, WorkerConfig{Solver: tokenSolver()})
	require.NoError(t, b.client.PauseLane(ctx, LaneFast, time.Now().Add(time.Hour)))
	require.ErrorContains(t, b.client.PauseLane(ctx, "medium", time.Now().Add(time.Hour)), `lane "medium"`)
	st, err := b.client.Stats(ctx, time.Hour)
	require.NoError(t, err)
	for _, q := range st.Queues {
		require.Equal(t, q.Lane == LaneFast, q.Paused, "%s %s", q.Lane, q.Priority)
	}
	_, err = b.client.SubmitAll(ctx, []Task{turnstileTask("paused"), recaptchaTask("free")})
	require.NoError(t, err)
	_, err = b.client.Wait(ctx, "free")
	require.NoError(t, err)
	ti, err := b.client.TaskOf(ctx, "paused")
	require.NoError(t, err)
	require.Equal(t, TaskQueued, ti.Status)
	// A topology update (captchaq server starting again) keeps the pause.
	js, err := jetstream.New(b.nc)
	require.NoError(t, err)
	_, err = EnsureTopology(ctx, js.Conn(), Topology{}, true)
	require.NoError(t, err)
	st, err = b.client.Stats(ctx, time.Hour)
	require.NoError(t, err)
	for _, q := range st.Queues {
		require.Equal(t, q.Lane == LaneFast, q.Paused, "after an update: %s %s", q.Lane, q.Priority)
	}
	require.NoError(t, b.client.ResumeLane(ctx, LaneFast))
	_, err = b.client.Wait(ctx, "paused")
	require.NoError(t, err)
}

// A running worker is listed with its threads; one that stopped says so.
func TestWorkersAnnounceThemselves(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	started := make(chan string, 1)
	w := b.startWorker(t, WorkerConfig{Solver: blockingSolver(started), Threads: 3, Name: "hb.worker 1", ShutdownGrace: 10 * time.Millisecond})
	_, err := b.client.Submit(ctx, turnstileTask("busy"))
	require.NoError(t, err)
	<-started
	// The first heartbeat goes out at start, before the task was taken; the
	// next one, wire.HeartbeatEvery later, counts it.
	var ws []WorkerInfo
	require.Eventually(t, func() bool {
		ws, err = b.client.Workers(ctx)
		require.NoError(t, err)
		return len(ws) == 1 && ws[0].InUse == 1
	}, 2*wire.HeartbeatEvery, 20*time.Millisecond)
	require.Equal(t, "hb.worker 1", ws[0].Name)
	require.Equal(t, 3, ws[0].Threads)
	require.False(t, ws[0].Stopped)
	require.WithinDuration(t, time.Now(), ws[0].At, wire.HeartbeatEvery+time.Second)

	w.stop()
	<-w.done
	w.done <- nil // for the cleanup
	ws, err = b.client.Workers(ctx)
	require.NoError(t, err)
	require.Len(t, ws, 1)
	require.True(t, ws[0].Stopped)
}

// Invalid tasks carry their reason in the outcome and the dead letter, with
// any URL in it cut to its host.
func TestInvalidTaskOutcomeSaysWhy(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	b.startWorker(t, WorkerConfig{Solver: tokenSolver()})
	_, err := b.client.js.Publish(ctx, wire.TaskSubject(LaneFast, "normal", "typo"),
		[]byte(`{"method":"turnstile","prority":"high","params":{"sitekey":"k","pageurl":"https://shop.example/secret/path"}}`), jetstream.WithMsgID("typo"))
	require.NoError(t, err)
	out, err := b.client.Wait(ctx, "typo")
	require.ErrorIs(t, err, ErrNotSolved)
	require.Equal(t, string(retry.ReasonInvalidTask), out.Reason)
	require.Contains(t, out.Detail, `unknown field "prority"`)
	d, err := b.client.DeadLetterOf(ctx, "typo")
	require.NoError(t, err)
	require.Equal(t, out.Detail, d.Detail)
}

// BenchmarkCancelCheck is what the cancel check adds to each delivery of a
// task no owner can cancel: nothing to read (an admin's cancel is among the
// task's records, read with its state).
func BenchmarkCancelCheck(b *testing.B) {
	ns, err := broker.Start(broker.Config{StoreDir: b.TempDir(), LazySync: true})
	require.NoError(b, err)
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	require.NoError(b, err)
	defer nc.Close()
	ctx := context.Background()
	ensureAsAdmin(b, nc, Topology{})
	c, err := NewClient(ctx, nc, ClientConfig{})
	require.NoError(b, err)
	for i := range 1000 {
		_, err := c.Submit(ctx, turnstileTask(fmt.Sprintf("t-%d", i)))
		require.NoError(b, err)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		rec, err := taskstore.CancelOf(ctx, c.nc, c.top.Domain, c.top.Stream, fmt.Sprintf("t-%d", i%1000), taskstore.GenState{Gen: uint64(i%1000 + 2)}, nil)
		if err != nil || rec != nil {
			b.Fatal(rec, err)
		}
		i++
	}
}

// Two workers whose names differ only in a character a subject token does
// not keep ("a.b" and "a_b") have a heartbeat subject each: both are
// listed, and neither's heartbeat stands for the other's when a task's
// holder is looked up.
func TestWorkersNamedDotAndUnderscoreHaveAHeartbeatEach(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	for _, name := range []string{"a.b", "a_b"} {
		b.startWorker(t, WorkerConfig{Solver: tokenSolver(), Name: name})
	}
	// Each stores its first heartbeat as it starts.
	var names []string
	require.Eventually(t, func() bool {
		ws, err := b.client.Workers(ctx)
		require.NoError(t, err)
		names = names[:0]
		for _, w := range ws {
			names = append(names, w.Name)
		}
		return len(names) == 2
	}, 10*time.Second, 20*time.Millisecond, "both workers listed")
	require.Equal(t, []string{"a.b", "a_b"}, names)
}
