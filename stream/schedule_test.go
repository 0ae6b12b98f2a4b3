package stream

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream/broker"
	"github.com/captchaq/captchaq/stream/internal/topology"
)

// observed forwards a worker's observations of kind to a channel, without
// blocking the worker.
func observed(kind EventKind) (Observer, <-chan Observation) {
	ch := make(chan Observation, 64)
	return ObserverFunc(func(o Observation) {
		if o.Kind == kind {
			select {
			case ch <- o:
			default:
			}
		}
	}), ch
}

// await waits for one value on ch or fails the test.
func await[T any](ctx context.Context, t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-ctx.Done():
		t.Fatalf("never saw %s", what)
	}
	var zero T
	return zero
}

// scheduledBed is the set-up of a test of tasks that wait for their time:
// a bundle, the API emulator (every solve a second long, run at a
// thousandth of real time), and the scheduled events of the workers that
// worker starts.
type scheduledBed struct {
	*bundle
	api       *fakeapi.Server
	sc        *solver.Client
	obs       Observer
	scheduled <-chan Observation
}

// scheduledSetup starts a scheduledBed on topology top; no worker yet.
func scheduledSetup(t *testing.T, top Topology) *scheduledBed {
	t.Helper()
	bed := &scheduledBed{bundle: setup(t, top)}
	bed.api, bed.sc = emulator(t, fakeapi.Config{SolveTime: fastSolve(time.Second), TimeScale: 0.001}, 0.001)
	bed.obs, bed.scheduled = observed(EventScheduled)
	return bed
}

// worker starts a worker of cfg that solves through the bed's emulator and
// reports its scheduled events on bed.scheduled, unless cfg names a
// Solver or an Observer of its own.
func (bed *scheduledBed) worker(t *testing.T, cfg WorkerConfig) *runningWorker {
	t.Helper()
	if cfg.Solver == nil {
		cfg.Solver = bed.sc
	}
	if cfg.Observer == nil {
		cfg.Observer = bed.obs
	}
	return bed.startWorker(t, cfg)
}

// traceKinds returns the kinds of the steps of task id's trace and its
// entries by kind.
func traceOf(ctx context.Context, t *testing.T, c *Client, id string) map[string][]TraceEntry {
	t.Helper()
	tr, err := c.Trace(ctx, id)
	require.NoError(t, err)
	out := map[string][]TraceEntry{}
	for _, e := range tr {
		out[e.Kind] = append(out[e.Kind], e)
	}
	return out
}

// A task with not_before is not solved before then, and is solved after: a
// worker with a single thread solves a task submitted after it meanwhile,
// since the waiting task holds no thread, and the waiting task's trace says
// once that it waits, until when.
func TestNotBeforeWaitsWithoutAThread(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	api, sc := emulator(t, fakeapi.Config{SolveTime: fastSolve(20 * time.Second), TimeScale: 0.001}, 0.001)
	obs, scheduled := observed(EventScheduled)
	b.startWorker(t, WorkerConfig{Solver: sc, Threads: 1, Observer: obs})

	notBefore := time.Now().Add(1500 * time.Millisecond)
	late := turnstileTask("late")
	late.NotBefore = At(notBefore)
	_, err := b.client.Submit(ctx, late)
	require.NoError(t, err)
	await(ctx, t, scheduled, "the scheduled event")

	now, err := b.client.Solve(ctx, turnstileTask("now"))
	require.NoError(t, err)
	require.True(t, now.SolvedAt.Before(notBefore), "the task submitted later is solved while the scheduled one waits: %v", now.SolvedAt)

	out, err := b.client.Wait(ctx, "late")
	require.NoError(t, err)
	require.Equal(t, StatusSolved, out.Status)
	require.Equal(t, 1, out.Attempts)
	steps := traceOf(ctx, t, b.client, "late")
	require.Len(t, steps["scheduled"], 1, "recorded once: %+v", steps["scheduled"])
	require.Contains(t, steps["scheduled"][0].Detail, "waits in the stream until")
	require.Len(t, steps["attempt"], 1)
	require.False(t, steps["attempt"][0].At.Before(notBefore), "the attempt started at %v, before not_before %v", steps["attempt"][0].At, notBefore)
	require.Equal(t, 2, api.Stats().Submitted)
}

// A task with use_at is solved shortly before it: the solve starts no
// earlier than use_at less the kind's lead, the token arrives before use_at,
// and the outcome says how much of its lifetime is left then.
func TestUseAtTokenArrivesJustBefore(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	// At a twentieth of real time: the lead (four times turnstile's 5-s
	// first poll) is a second, a solve 50 ms, room for a loaded machine.
	_, sc := emulator(t, fakeapi.Config{SolveTime: fastSolve(time.Second), TimeScale: 0.05}, 0.05)
	b.startWorker(t, WorkerConfig{Solver: sc})
	lead, learned := sc.SolveTime("turnstile", LeadQuantile)
	require.False(t, learned, "nothing solved yet")

	task := turnstileTask("jit")
	task.UseAt = In(2 * time.Second)
	r, err := b.client.Submit(ctx, task)
	require.NoError(t, err)
	out, err := b.client.Wait(ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, StatusSolved, out.Status)
	require.False(t, out.UseAt.IsZero(), "the outcome names use_at")
	if !out.SolvedAt.Before(out.UseAt) {
		tr, _ := b.client.Trace(ctx, r.ID)
		for _, e := range tr {
			t.Logf("%s %s %s", e.At.Format("15:04:05.000"), e.Kind, e.Detail)
		}
	}
	require.True(t, out.SolvedAt.Before(out.UseAt), "solved at %v, used at %v", out.SolvedAt, out.UseAt)
	life := DefaultTokenLifetimes["turnstile"].Seconds()
	require.InDelta(t, out.ExpiresAt.Sub(out.UseAt).Seconds(), out.LifetimeAtUseS, 0.01)
	require.Greater(t, out.LifetimeAtUseS, 0.95*life, "most of the lifetime is left at use_at")
	steps := traceOf(ctx, t, b.client, r.ID)
	require.Len(t, steps["attempt"], 1)
	require.False(t, steps["attempt"][0].At.Before(out.UseAt.Add(-lead-100*time.Millisecond)),
		"the solve started at %v, more than the lead %v before use_at %v", steps["attempt"][0].At, lead, out.UseAt)
	require.Contains(t, strings.Join([]string{steps["outcome"][0].Detail}, ""), "left at use_at")
}

// A task canceled while it waits ends canceled within ScheduleCheck, long
// before its time, and the service never hears of it.
func TestCancelWhileScheduled(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	api, sc := emulator(t, fakeapi.Config{SolveTime: fastSolve(time.Second), TimeScale: 0.001}, 0.001)
	obs, scheduled := observed(EventScheduled)
	b.startWorker(t, WorkerConfig{Solver: sc, Observer: obs, ScheduleCheck: 50 * time.Millisecond})

	task := turnstileTask("wait-cancel")
	task.NotBefore = In(time.Hour)
	_, err := b.client.Submit(ctx, task)
	require.NoError(t, err)
	await(ctx, t, scheduled, "the scheduled event")
	ti, err := b.client.TaskOf(ctx, "wait-cancel")
	require.NoError(t, err)
	require.Equal(t, TaskScheduled, ti.Status, "%+v", ti)
	require.WithinDuration(t, time.Now().Add(time.Hour), ti.NotBefore, time.Minute)
	require.WithinDuration(t, ti.NotBefore, ti.StartAt, time.Second, "not_before alone: the solve starts then")
	_, err = b.client.Cancel(ctx, "wait-cancel", "not needed")
	require.NoError(t, err)
	out, err := b.client.Wait(ctx, "wait-cancel")
	require.ErrorIs(t, err, ErrNotSolved)
	require.Equal(t, StatusDead, out.Status)
	require.Equal(t, "canceled", out.Reason)
	require.Zero(t, api.Stats().InCalls, "the service never heard of it")
}

// High-priority and normal tasks of both lanes go on while many scheduled
// tasks wait: a worker with two threads solves them all at once.
func TestScheduledTasksHoldNoThread(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	_, sc := emulator(t, fakeapi.Config{SolveTime: fastSolve(5 * time.Second), TimeScale: 0.001}, 0.001)
	obs, scheduled := observed(EventScheduled)
	b.startWorker(t, WorkerConfig{Solver: sc, Threads: 2, Observer: obs, ScheduleCheck: 100 * time.Millisecond})
	for i := range 6 {
		task := recaptchaTask("waiting-" + string(rune('a'+i)))
		if i%2 == 0 {
			task = turnstileTask("waiting-" + string(rune('a'+i)))
		}
		task.NotBefore = In(time.Hour)
		_, err := b.client.Submit(ctx, task)
		require.NoError(t, err)
	}
	for range 6 {
		await(ctx, t, scheduled, "a scheduled event")
	}
	hi := recaptchaTask("high")
	hi.Priority = PriorityHigh
	for _, task := range []Task{hi, turnstileTask("fast"), recaptchaTask("slow")} {
		out, err := b.client.Solve(ctx, task)
		require.NoError(t, err, task.ID)
		require.Equal(t, StatusSolved, out.Status)
	}
}

// Bad use_at and not_before values are refused, each error naming the
// field.
func TestScheduleRefusedNamingTheField(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	now := time.Now()
	cases := []struct {
		name  string
		edit  func(*Task)
		field string
	}{
		{"use_at past", func(t *Task) { t.UseAt = At(now.Add(-time.Hour)) }, "use_at"},
		{"not_before past", func(t *Task) { t.NotBefore = At(now.Add(-time.Hour)) }, "not_before"},
		{"not_before after use_at", func(t *Task) { t.UseAt, t.NotBefore = In(time.Minute), In(2*time.Minute) }, "not_before"},
		{"use_at after deadline", func(t *Task) { t.UseAt, t.Deadline = At(now.Add(time.Hour)), now.Add(time.Minute) }, "use_at"},
		{"not_before after deadline", func(t *Task) { t.NotBefore, t.Deadline = At(now.Add(time.Hour)), now.Add(time.Minute) }, "not_before"},
		{"use_at beyond retention", func(t *Task) { t.UseAt = In(30 * 24 * time.Hour) }, "use_at"},
	}
	for _, c := range cases {
		task := turnstileTask("bad")
		c.edit(&task)
		_, err := b.client.Submit(ctx, task)
		require.ErrorIs(t, err, ErrInvalidTask, c.name)
		require.Contains(t, err.Error(), c.field, c.name)
	}
	for _, in := range []struct{ json, field string }{
		{`{"method":"turnstile","params":{},"use_at":"tomorrow"}`, "use_at"},
		{`{"method":"turnstile","params":{},"not_before":"-5s"}`, "not_before"},
		{`{"method":"turnstile","params":{},"use_at":42}`, "use_at"},
	} {
		_, err := ParseTask([]byte(in.json))
		require.ErrorIs(t, err, ErrInvalidTask, in.json)
		require.Contains(t, err.Error(), in.field+":", in.json)
	}
	task, err := ParseTask([]byte(`{"method":"turnstile","params":{},"use_at":"90s","not_before":"2030-01-02T03:04:05Z"}`))
	require.NoError(t, err)
	require.Equal(t, In(90*time.Second), task.UseAt)
	require.Equal(t, time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC), task.NotBefore.At)
}

// A task waiting for its time survives a restart of its worker and one of
// the broker (a file store): it is solved once, after its time, with one
// attempt.
func TestScheduledTaskSurvivesRestarts(t *testing.T) {
	t.Parallel()
	top := Topology{AckWait: 2 * time.Second}
	dir := t.TempDir()
	start := func(port int) *server.Server {
		ns, err := broker.Start(broker.Config{StoreDir: dir, StoreKey: testStoreKey, Listen: true, Port: port})
		require.NoError(t, err)
		t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
		return ns
	}
	ns := start(-1)
	port, url := ns.Addr().(*net.TCPAddr).Port, ns.ClientURL()
	connect := func() *nats.Conn {
		nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		return nc
	}
	ctx := testContext(t)
	ensureAsAdmin(t, connect(), top)
	client, err := NewClient(ctx, connect(), ClientConfig{Topology: top, Name: "test-producer"})
	require.NoError(t, err)
	api, sc := emulator(t, fakeapi.Config{SolveTime: fastSolve(time.Second), TimeScale: 0.001}, 0.001)
	run := func() (context.CancelFunc, <-chan Observation, chan error) {
		obs, scheduled := observed(EventScheduled)
		w, err := NewWorker(ctx, connect(), WorkerConfig{Topology: top, Solver: sc, Observer: obs,
			IdleCheck: 50 * time.Millisecond, ScheduleCheck: 200 * time.Millisecond})
		require.NoError(t, err)
		wctx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(wctx) }()
		t.Cleanup(func() { stop(); <-done })
		return stop, scheduled, done
	}
	stop, scheduled, done := run()
	notBefore := time.Now().Add(3 * time.Second)
	task := turnstileTask("restarts")
	task.NotBefore = At(notBefore)
	r, err := client.Submit(ctx, task)
	require.NoError(t, err)
	await(ctx, t, scheduled, "the scheduled event")
	stop()
	<-done
	done <- nil // the cleanup's receive

	ns.Shutdown()
	ns.WaitForShutdown()
	start(port)
	js, err := topology.JetStream(connect(), "")
	require.NoError(t, err)
	_, err = EnsureTopology(ctx, js.Conn(), top, true) // the token stream is in memory
	require.NoError(t, err)
	run()

	out, err := client.Wait(ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, StatusSolved, out.Status)
	require.Equal(t, 1, out.Attempts)
	require.Equal(t, 1, api.Stats().Submitted, "solved once")
	steps := traceOf(ctx, t, client, r.ID)
	require.Len(t, steps["scheduled"], 1, "the wait is recorded once, across restarts")
	require.False(t, steps["attempt"][0].At.Before(notBefore))
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("timed out")
	}
}
