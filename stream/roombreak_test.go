package stream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream/wire"
)

// A producer cannot have a waiting task lost by taking the message id of
// its move back to its lane: it reads the task's room message (direct gets
// are the producer's), and publishes on the task's subject, under the
// message id the worker's copy will carry, the same body naming the same
// generation but with a header of its own (another client), so that its
// digest is not the generation's. Its message waits in the lane behind a
// busy thread. When the task is due, the worker's copy is a duplicate of
// it; the worker must not take the stranger's message for its own copy and
// ack the room's message, or the generation is left with a forged copy
// only (ended invalid) and is never solved.
func TestMoveBackNotTakenByForgedMessageID(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	js, s := b.raw(t)

	var mu sync.Mutex
	solved := map[string]int{}
	busy, release := make(chan struct{}, 1), make(chan struct{})
	solve := solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
		mu.Lock()
		solved[req.Params["pageurl"]]++
		mu.Unlock()
		if strings.Contains(req.Params["pageurl"], "blocker") {
			busy <- struct{}{}
			<-release
		}
		out, _ := json.Marshal("tok-" + req.Params["sitekey"])
		return solver.Answer{Solution: out}, nil
	})
	obs, dead := observed(EventDead)
	obsScheduled, scheduled := observed(EventScheduled)
	b.startWorker(t, WorkerConfig{Solver: solve, Threads: 1, ScheduleCheck: 100 * time.Millisecond,
		Observer: ObserverFunc(func(o Observation) { obs.Observe(o); obsScheduled.Observe(o) })})

	// The victim waits in the room.
	moved := roomMoves(t, b)
	victim := turnstileTask("victim")
	victim.NotBefore = At(time.Now().Add(2 * time.Second))
	_, err := b.client.Submit(ctx, victim)
	require.NoError(t, err)
	await(ctx, t, scheduled, "the victim's scheduled event")
	await(ctx, t, moved, "the victim's move to the room")
	room, err := s.GetLastMsgForSubject(ctx, wire.SubjectLater+".*.*.victim")
	require.NoError(t, err)

	// Then the pool's one thread is busy, so that what is published on the
	// lane now waits there.
	blocker := turnstileTask("blocker")
	blocker.Params = Params{"sitekey": "0x4AAAAAAAB", "pageurl": "https://shop.example/blocker"}
	_, err = b.client.Submit(ctx, blocker)
	require.NoError(t, err)
	await(ctx, t, busy, "the blocker's solve")
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()

	// Acks of the room's consumer for the room message: the worker acks it
	// once it takes its move back for done.
	acked := make(chan struct{}, 1)
	sub, err := b.nc.Subscribe("$JS.ACK."+b.top.withDefaults().Stream+"."+wire.WaitingRoomConsumer+".>", func(m *nats.Msg) {
		tok := strings.Split(m.Subject, ".")
		if len(tok) >= 7 && tok[5] == strconv.FormatUint(room.Sequence, 10) &&
			(len(m.Data) == 0 || strings.HasPrefix(string(m.Data), "+ACK")) {
			select {
			case acked <- struct{}{}:
			default:
			}
		}
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, b.nc.Flush())

	forged := nats.NewMsg(wire.TaskSubjectOf(room.Subject))
	forged.Data = room.Data
	forged.Header.Set(wire.HeaderMsgID, wire.MovedMsgID("victim", room.Sequence))
	forged.Header.Set(wire.HeaderGen, room.Header.Get(wire.HeaderGen))
	forged.Header.Set(wire.HeaderSubmitted, room.Header.Get(wire.HeaderSubmitted))
	forged.Header.Set(wire.HeaderTaskID, "victim")
	forged.Header.Set(wire.HeaderClient, "attacker")
	_, err = js.PublishMsg(ctx, forged)
	require.NoError(t, err)

	await(ctx, t, acked, "the room message's ack once the victim is due")
	close(release)
	for {
		if o := await(ctx, t, dead, "the forged message's end"); o.Code == CodeInvalidEnvelope {
			break
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 8*time.Second)
	defer cancel()
	out, err := b.client.Wait(wctx, "victim")
	require.NoError(t, err, "the waiting task is not lost to a stranger's message id")
	require.Equal(t, StatusSolved, out.Status)
	mu.Lock()
	require.Equal(t, 1, solved["https://shop.example/checkout/123"], "solved once")
	mu.Unlock()
}

// padded is task t as JSON, padded with white space (which a task message
// may hold) to exactly size bytes with a message id header of id.
func padded(t *testing.T, task Task, size int) []byte {
	t.Helper()
	body, err := json.Marshal(task)
	require.NoError(t, err)
	hdr := len("NATS/1.0\r\n" + wire.HeaderMsgID + ": " + task.ID + "\r\n\r\n")
	fill := size - hdr - len(body)
	require.Positive(t, fill)
	return append(append([]byte("{"), bytes.Repeat([]byte(" "), fill)...), body[1:]...)
}

// A raw producer's task as large as the stream takes, waiting for its
// time, cannot be moved (a move adds headers): it must end with an error
// that says so, not come back on its lane for ever holding a slot of the
// lane's limit (stalling the due tasks of every producer), nor stay in the
// waiting room until its deadline when published there.
func TestOversizedScheduledTaskEndsClearly(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{LaneLimits: map[Lane]int{LaneFast: 1}})
	ctx := testContext(t)
	js, s := b.raw(t)
	most := int(s.CachedInfo().Config.MaxMsgSize)
	require.Positive(t, most)
	b.startWorker(t, WorkerConfig{Solver: tokenSolver(), ScheduleCheck: 100 * time.Millisecond})

	onLane := turnstileTask("big-lane")
	onLane.NotBefore = In(time.Hour)
	m := nats.NewMsg("captcha.tasks.fast.normal.big-lane")
	m.Header.Set(wire.HeaderMsgID, onLane.ID)
	m.Data = padded(t, onLane, most)
	_, err := js.PublishMsg(ctx, m)
	require.NoError(t, err, "the stream takes a message of its MaxMsgSize")

	inRoom := turnstileTask("big-room")
	m = nats.NewMsg("captcha.later.fast.normal.big-room")
	m.Header.Set(wire.HeaderMsgID, inRoom.ID)
	m.Data = padded(t, inRoom, most)
	_, err = js.PublishMsg(ctx, m)
	require.NoError(t, err)

	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := b.client.Solve(wctx, turnstileTask("due-now"))
	require.NoError(t, err, "a due task is solved beside an oversized one that waits, at a lane limit of one")
	require.Equal(t, StatusSolved, out.Status)
	for _, id := range []string{onLane.ID, inRoom.ID} {
		out, err := b.client.Wait(wctx, id)
		require.ErrorIs(t, err, ErrNotSolved, id)
		require.Equal(t, "invalid-task", out.Reason, id)
		require.Contains(t, out.Detail+out.Error, "too large", id)
	}
}

// A cancel names the generation of the task's latest message on its task
// subjects and in the waiting room. A producer's message there that names
// another generation (a forged copy, which a worker would end invalid on
// its own sequence) must not have the cancel name that generation: the
// waiting task would go on to be solved, paid for, while Cancel said it
// was canceled. Here the forged copy waits while no worker runs (a
// restart; under load it waits behind a lane's backlog).
func TestCancelNotMisdirectedByForgedCopy(t *testing.T) {
	t.Parallel()
	b := scheduledSetup(t, Topology{})
	ctx := testContext(t)
	js, s := b.raw(t)
	moved := roomMoves(t, b.bundle)

	first := b.worker(t, WorkerConfig{})
	task := turnstileTask("victim")
	task.NotBefore = In(time.Hour)
	r, err := b.client.Submit(ctx, task)
	require.NoError(t, err)
	await(ctx, t, b.scheduled, "the scheduled event")
	await(ctx, t, moved, "the move to the room")
	first.stop()
	require.NoError(t, <-first.done)
	first.done <- nil // for the test's cleanup

	room, err := s.GetLastMsgForSubject(ctx, wire.SubjectLater+".*.*.victim")
	require.NoError(t, err)
	forged := nats.NewMsg(room.Subject)
	forged.Data = room.Data
	forged.Header.Set(wire.HeaderMsgID, "victim.moved.forged")
	forged.Header.Set(wire.HeaderTaskID, "victim")
	forged.Header.Set(wire.HeaderGen, "1")
	forged.Header.Set(wire.HeaderSubmitted, room.Header.Get(wire.HeaderSubmitted))
	_, err = js.PublishMsg(ctx, forged)
	require.NoError(t, err)

	ti, err := b.client.TaskOf(ctx, "victim")
	require.NoError(t, err)
	require.Equal(t, r.Seq, ti.Gen, "the task's generation, not the one a stranger's message names")
	ti, err = b.client.Cancel(ctx, "victim", "not needed")
	require.NoError(t, err)
	require.Equal(t, r.Seq, ti.Gen, "the cancel names the task's generation")

	b.worker(t, WorkerConfig{})
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := b.client.Wait(wctx, "victim")
	require.ErrorIs(t, err, ErrNotSolved)
	require.Equal(t, "canceled", out.Reason)
	require.Zero(t, b.api.Stats().InCalls)
}

// A worker started before `captchaq init` added the waiting room moves no
// task, but tasks other workers moved back to their lanes reach it: it must
// take a copy whose digest its generation's scheduled event names for the
// generation, as any worker does, not end it invalid (the generation's only
// message), losing the task.
func TestWorkerWithoutRoomTakesMovedCopies(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	js, _ := removeWaitingRoom(ctx, t, b)

	var mu sync.Mutex
	solvedBy := map[string]string{}
	solverOf := func(name string, busy chan<- struct{}, release <-chan struct{}) solver.Solver {
		return solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
			mu.Lock()
			solvedBy[req.Params["pageurl"]] = name
			mu.Unlock()
			if busy != nil && strings.Contains(req.Params["pageurl"], "blocker") {
				busy <- struct{}{}
				<-release
			}
			out, _ := json.Marshal("tok-" + req.Params["sitekey"])
			return solver.Answer{Solution: out}, nil
		})
	}
	b.startWorker(t, WorkerConfig{Name: "before-init", Solver: solverOf("before-init", nil, nil), Threads: 1})
	_, err := EnsureTopology(ctx, b.nc, b.top, true)
	require.NoError(t, err)
	busy, release := make(chan struct{}, 1), make(chan struct{})
	b.startWorker(t, WorkerConfig{Name: "after-init", Solver: solverOf("after-init", busy, release), Threads: 1,
		ScheduleCheck: 100 * time.Millisecond})
	t.Cleanup(func() { close(release) }) // before the worker's stop, which waits for its solve

	// The worker with the room is busy; the other one is not.
	for i := 0; ; i++ {
		blocker := turnstileTask(fmt.Sprintf("blocker-%d", i))
		blocker.Params = Params{"sitekey": "0x4AAAAAAAB", "pageurl": fmt.Sprintf("https://shop.example/blocker/%d", i)}
		_, err := b.client.Submit(ctx, blocker)
		require.NoError(t, err)
		waited := make(chan error, 1)
		go func() { _, err := b.client.Wait(ctx, blocker.ID); waited <- err }()
		select {
		case <-busy:
		case err := <-waited:
			require.NoError(t, err)
			continue
		}
		break
	}

	// Submitted into the room: the worker with the room moves it back to
	// its lane when due, where the other worker takes it.
	victim := turnstileTask("victim")
	victim.NotBefore = At(time.Now().Add(time.Second))
	body, err := json.Marshal(victim)
	require.NoError(t, err)
	publishRaw(ctx, t, js, "captcha.later.fast.normal.victim", string(body), map[string]string{wire.HeaderMsgID: "victim"})
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := b.client.Wait(wctx, "victim")
	require.NoError(t, err, "a moved copy is not lost to a worker that moves none")
	require.Equal(t, StatusSolved, out.Status)
	mu.Lock()
	require.Equal(t, "before-init", solvedBy["https://shop.example/checkout/123"])
	mu.Unlock()
}

// Many tasks waiting for their time, on every lane and priority, moved to
// the room by several workers at once, hold no slot of a lane's limit nor
// of MaxInFlight: due tasks submitted after them are solved at once, on
// both lanes.
func TestManyWaitingTasksDoNotStallSeveralWorkers(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{MaxInFlight: 4, LaneLimits: map[Lane]int{LaneFast: 2, LaneSlow: 2}})
	ctx := testContext(t)
	counted := make(chan Observation, 1024)
	for range 3 {
		b.startWorker(t, WorkerConfig{Solver: tokenSolver(), Threads: 4, Observer: ObserverFunc(func(o Observation) {
			if o.Kind == EventScheduled {
				counted <- o
			}
		})})
	}
	var tasks []Task
	for i := range 300 {
		task := turnstileTask(fmt.Sprintf("wait-%d", i))
		if i%2 == 1 {
			task = recaptchaTask(fmt.Sprintf("wait-%d", i))
		}
		if i%3 == 0 {
			task.Priority = PriorityHigh
		}
		task.NotBefore = In(time.Hour)
		tasks = append(tasks, task)
	}
	_, err := b.client.SubmitAll(ctx, tasks)
	require.NoError(t, err)
	for range tasks {
		await(ctx, t, counted, "a scheduled event")
	}
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	for _, task := range []Task{turnstileTask("due-fast"), recaptchaTask("due-slow")} {
		out, err := b.client.Solve(wctx, task)
		require.NoError(t, err, "%s solved while 300 tasks wait", task.ID)
		require.Equal(t, StatusSolved, out.Status)
	}
	_, s := b.raw(t)
	room, err := s.Consumer(ctx, wire.WaitingRoomConsumer)
	require.NoError(t, err)
	info, err := room.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(300), info.NumPending+uint64(info.NumAckPending), "all of them wait in the room")
}

// Two workers whose clocks are three minutes off, one ahead and one
// behind, share the waiting room: the task moves to the room once and back
// once (no back and forth between a worker that finds it due and one that
// does not), and is solved once, neither before its not_before nor late.
func TestWaitingRoomWithSkewedWorkers(t *testing.T) {
	t.Parallel()
	b := scheduledSetup(t, Topology{})
	ctx := testContext(t)
	var mu sync.Mutex
	copies := map[string]int{}
	sub, err := b.nc.Subscribe("captcha.*.*.*.skewed", func(m *nats.Msg) {
		mu.Lock()
		copies[strings.Split(m.Subject, ".")[1]]++
		mu.Unlock()
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, b.nc.Flush())
	for _, skew := range []time.Duration{3 * time.Minute, -3 * time.Minute} {
		b.worker(t, WorkerConfig{Name: "skew" + skew.String(), Now: func() time.Time { return time.Now().Add(skew) },
			ScheduleCheck: 100 * time.Millisecond})
	}
	notBefore := time.Now().Add(2 * time.Second)
	task := turnstileTask("skewed")
	task.NotBefore = At(notBefore)
	_, err = b.client.Submit(ctx, task)
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	out, err := b.client.Wait(wctx, task.ID)
	require.NoError(t, err)
	require.Equal(t, StatusSolved, out.Status)
	require.False(t, out.SolvedAt.Before(notBefore), "solved at %v, before not_before %v", out.SolvedAt, notBefore)
	require.True(t, time.Now().Before(notBefore.Add(10*time.Second)), "not late by the skew")
	require.Equal(t, 1, b.api.Stats().Submitted)
	require.NoError(t, b.nc.Flush())
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, map[string]int{"tasks": 2, "later": 1}, copies, "submitted, moved to the room once and back once")
}

// A producer replays a waiting task's room message byte for byte (its
// digest is the generation's, so each replay is a valid copy) under fresh
// message ids, many times: the copies move back to the lane together and
// reach several workers at once, and the task is still paid for once, with
// one outcome.
func TestReplayedRoomMessagesPaidOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	js, s := b.raw(t)
	api, sc := emulator(t, fakeapi.Config{SolveTime: fastSolve(time.Second), TimeScale: 0.3}, 0.3)
	obs, scheduled := observed(EventScheduled)
	moved := roomMoves(t, b)
	for i := range 3 {
		b.startWorker(t, WorkerConfig{Name: fmt.Sprintf("w%d", i), Solver: sc, ScheduleCheck: 100 * time.Millisecond, Observer: obs})
	}
	task := turnstileTask("victim")
	notBefore := time.Now().Add(2 * time.Second)
	task.NotBefore = At(notBefore)
	r, err := b.client.Submit(ctx, task)
	require.NoError(t, err)
	await(ctx, t, scheduled, "the scheduled event")
	await(ctx, t, moved, "the move to the room")
	room, err := s.GetLastMsgForSubject(ctx, wire.SubjectLater+".*.*.victim")
	require.NoError(t, err)
	for i := range 8 {
		m := nats.NewMsg(room.Subject)
		m.Data = room.Data
		for k, v := range room.Header {
			m.Header[k] = v
		}
		m.Header.Set(wire.HeaderMsgID, fmt.Sprintf("replay-%d", i))
		_, err := js.PublishMsg(ctx, m)
		require.NoError(t, err)
	}
	out, err := b.client.Wait(ctx, "victim")
	require.NoError(t, err)
	require.Equal(t, StatusSolved, out.Status)
	require.False(t, out.SolvedAt.Before(notBefore))
	// Every copy ends (acked and erased) without a second solve.
	require.Eventually(t, func() bool {
		_, err := s.GetLastMsgForSubject(ctx, "captcha.*.*.*.victim")
		return errors.Is(err, jetstream.ErrMsgNotFound)
	}, 15*time.Second, 50*time.Millisecond, "every copy ends")
	require.Equal(t, 1, api.Stats().Submitted, "paid once")
	require.Len(t, outcomesOf(ctx, t, s, "victim", r.Seq), 1)
}

// roomMoves signals (without blocking, at most one pending) each message
// stored in the waiting room, as seen by b's connection from now on: on
// the stream's republish of what it stored, which comes after the store
// (the publish itself may reach a subscriber before), so that a read of
// the room after the signal finds the message.
func roomMoves(t *testing.T, b *bundle) <-chan struct{} {
	t.Helper()
	moved := make(chan struct{}, 1)
	sub, err := b.nc.Subscribe(wire.StoredSubject(wire.SubjectAllLater), func(*nats.Msg) {
		select {
		case moved <- struct{}{}:
		default:
		}
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, b.nc.Flush())
	return moved
}
