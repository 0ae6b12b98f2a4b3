package stream

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream/wire"
)

// Tasks waiting for their time do not stall the pool: without lane limits
// a lane's consumer hands out at most MaxInFlight tasks at once, and as
// many tasks scheduled an hour on (any producer may submit them) leave the
// lane's due tasks to be solved now, not in an hour.
func TestScheduledTasksDoNotFillMaxInFlight(t *testing.T) {
	t.Parallel()
	b := scheduledSetup(t, Topology{MaxInFlight: 5})
	ctx := testContext(t)
	b.worker(t, WorkerConfig{})
	tasks := make([]Task, 5)
	for i := range tasks {
		tasks[i] = turnstileTask(fmt.Sprintf("later-%d", i))
		tasks[i].NotBefore = In(time.Hour)
	}
	_, err := b.client.SubmitAll(ctx, tasks)
	require.NoError(t, err)
	for range tasks {
		await(ctx, t, b.scheduled, "a scheduled event")
	}
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	out, err := b.client.Solve(wctx, turnstileTask("due-now"))
	require.NoError(t, err, "a due task is solved while five wait for an hour at a MaxInFlight of five")
	require.Equal(t, StatusSolved, out.Status)
}

// With the shipped roles, a task with not_before waits in the waiting
// room and is solved after it; a raw producer's task published straight
// into the room with a bad field ends invalid naming the field, never
// stalling or crashing the worker; a raw producer's message that names the
// waiting task's generation (a forged copy) ends invalid on its own, and
// the waiting task is solved once, as submitted. No role meets a
// permission violation.
func TestWaitingRoomWithShippedRoles(t *testing.T) {
	t.Parallel()
	ns := authServer(t)
	ctx := testContext(t)
	pnc, perrs := roleConn(t, ns, "producer")
	producer, err := NewClient(ctx, pnc, ClientConfig{Name: "producer"})
	require.NoError(t, err)
	var mu sync.Mutex
	solved := map[string]int{}
	solve := solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
		mu.Lock()
		solved[req.Params["pageurl"]]++
		mu.Unlock()
		b, _ := json.Marshal("tok-" + req.Params["sitekey"])
		return solver.Answer{Solution: b}, nil
	})
	obs, dead := observed(EventDead)
	wnc, werrs := roleConn(t, ns, "worker")
	w, err := NewWorker(ctx, wnc, WorkerConfig{Solver: solve, Threads: 2, IdleCheck: 50 * time.Millisecond,
		ScheduleCheck: 100 * time.Millisecond, Observer: obs})
	require.NoError(t, err)
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	t.Cleanup(func() { stop(); <-done })

	notBefore := time.Now().Add(3 * time.Second)
	later := turnstileTask("later")
	later.NotBefore = At(notBefore)
	r, err := producer.Submit(ctx, later)
	require.NoError(t, err)

	js, err := jetstream.New(pnc)
	require.NoError(t, err)
	// Straight into the room, with a bad not_before.
	publishRaw(ctx, t, js, "captcha.later.fast.normal.raw-bad",
		`{"id":"raw-bad","method":"turnstile","params":{"sitekey":"0x4AAAAAAAB","pageurl":"https://shop.example/a"},"not_before":"soon"}`,
		map[string]string{"Nats-Msg-Id": "raw-bad"})
	out, err := producer.Wait(ctx, "raw-bad")
	require.ErrorIs(t, err, ErrNotSolved)
	require.Equal(t, "invalid-task", out.Reason)
	require.Contains(t, out.Detail+out.Error, "not_before")

	// A copy of the waiting task that no worker made: another page, the
	// waiting task's generation.
	publishRaw(ctx, t, js, "captcha.tasks.fast.high.later",
		`{"id":"later","method":"turnstile","params":{"sitekey":"0x4AAAAAAAB","pageurl":"https://evil.example/x"}}`,
		map[string]string{"Nats-Msg-Id": "later.moved.1", "Captchaq-Gen": fmt.Sprint(r.Seq),
			"Captchaq-Submitted": time.Now().UTC().Format(time.RFC3339Nano)})
	for {
		o := await(ctx, t, dead, "the forged copy's end")
		if o.Code == CodeInvalidEnvelope {
			break
		}
	}

	out, err = producer.Wait(ctx, "later")
	require.NoError(t, err)
	require.Equal(t, StatusSolved, out.Status)
	require.False(t, out.SolvedAt.Before(notBefore), "solved at %v, before not_before %v", out.SolvedAt, notBefore)
	steps := traceOf(ctx, t, producer, "later")
	require.Len(t, steps["scheduled"], 1, "recorded once: %+v", steps["scheduled"])
	submissions := 0
	for _, e := range steps["submitted"] {
		if e.Gen == r.Seq {
			submissions++
		}
	}
	require.Equal(t, 1, submissions, "the moves are not submissions: %+v", steps["submitted"])
	mu.Lock()
	require.Equal(t, map[string]int{"https://shop.example/checkout/123": 1}, solved, "solved once, as submitted; the forged copy never")
	mu.Unlock()
	for role, errs := range map[string]<-chan error{"producer": perrs, "worker": werrs} {
		select {
		case err := <-errs:
			t.Fatalf("%s: unexpected asynchronous error: %v", role, err)
		default:
		}
	}
}

// A task waiting in the room is listed as scheduled under its generation,
// a resubmit of its id is a duplicate, and Wait sees it solved after its
// time, once.
func TestWaitingRoomListedAndWaitedFor(t *testing.T) {
	t.Parallel()
	b := scheduledSetup(t, Topology{})
	ctx := testContext(t)
	b.worker(t, WorkerConfig{ScheduleCheck: 200 * time.Millisecond})
	notBefore := time.Now().Add(4 * time.Second)
	task := turnstileTask("waits")
	task.NotBefore = At(notBefore)
	r1, err := b.client.Submit(ctx, task)
	require.NoError(t, err)
	await(ctx, t, b.scheduled, "the scheduled event")

	ls, err := b.client.Tasks(ctx, TaskFilter{Status: TaskScheduled})
	require.NoError(t, err)
	require.Len(t, ls, 1)
	require.Equal(t, "waits", ls[0].ID)
	require.Equal(t, r1.Seq, ls[0].Gen, "listed under its generation")
	r2, err := b.client.Submit(ctx, task)
	require.NoError(t, err)
	require.True(t, r2.Duplicate, "a resubmit while it waits is a duplicate")

	out, err := b.client.Wait(ctx, "waits")
	require.NoError(t, err)
	require.Equal(t, StatusSolved, out.Status)
	require.False(t, out.SolvedAt.Before(notBefore))
	require.Equal(t, 1, b.api.Stats().Submitted)
}

// A cancel of a task waiting for its time an hour on ends it at once, not
// at the next look of a worker (ScheduleCheck, a minute by default), and
// the service never hears of it.
func TestCancelOfWaitingTaskIsPrompt(t *testing.T) {
	t.Parallel()
	b := scheduledSetup(t, Topology{})
	ctx := testContext(t)
	b.worker(t, WorkerConfig{})
	task := turnstileTask("cancel-me")
	task.NotBefore = In(time.Hour)
	_, err := b.client.Submit(ctx, task)
	require.NoError(t, err)
	await(ctx, t, b.scheduled, "the scheduled event")
	_, err = b.client.Cancel(ctx, task.ID, "not needed")
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := b.client.Wait(wctx, task.ID)
	require.ErrorIs(t, err, ErrNotSolved, "ended within seconds, not a minute")
	require.Equal(t, "canceled", out.Reason)
	require.Zero(t, b.api.Stats().InCalls)
}

// A stream made by an earlier version has no waiting room: EnsureTopology
// without update leaves it so and fails nothing, a worker still solves a
// task with not_before after its time (waiting on its lane's consumer), and
// an update adds the room's subjects and its consumer.
func TestWaitingRoomAddedByUpdate(t *testing.T) {
	t.Parallel()
	b := scheduledSetup(t, Topology{})
	ctx := testContext(t)
	_, s := removeWaitingRoom(ctx, t, b.bundle)
	_, err := EnsureTopology(ctx, b.nc, b.top, false)
	require.NoError(t, err, "an older stream is found as it is")
	_, err = s.Consumer(ctx, wire.WaitingRoomConsumer)
	require.ErrorIs(t, err, jetstream.ErrConsumerNotFound)

	b.worker(t, WorkerConfig{ScheduleCheck: 100 * time.Millisecond})
	notBefore := time.Now().Add(time.Second)
	task := turnstileTask("old-stream")
	task.NotBefore = At(notBefore)
	_, err = b.client.Submit(ctx, task)
	require.NoError(t, err)
	out, err := b.client.Wait(ctx, task.ID)
	require.NoError(t, err)
	require.Equal(t, StatusSolved, out.Status)
	require.False(t, out.SolvedAt.Before(notBefore))

	_, err = EnsureTopology(ctx, b.nc, b.top, true)
	require.NoError(t, err)
	c, err := s.Consumer(ctx, wire.WaitingRoomConsumer)
	require.NoError(t, err, "the update adds the waiting room")
	require.Equal(t, -1, c.CachedInfo().Config.MaxAckPending, "no waiting task holds up another")
}

// removeWaitingRoom makes b's stream one an earlier version made: no
// waiting room subjects, no room consumer.
func removeWaitingRoom(ctx context.Context, t *testing.T, b *bundle) (jetstream.JetStream, jetstream.Stream) {
	t.Helper()
	js, s := b.raw(t)
	require.NoError(t, s.DeleteConsumer(ctx, wire.WaitingRoomConsumer))
	cfg := s.CachedInfo().Config
	cfg.Subjects = slices.DeleteFunc(slices.Clone(cfg.Subjects), func(subj string) bool { return wire.InWaitingRoom(subj) })
	_, err := js.UpdateStream(ctx, cfg)
	require.NoError(t, err)
	return js, s
}
