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
	"github.com/captchaq/captchaq/stream/internal/topology"
	"github.com/captchaq/captchaq/stream/wire"
)

// blockingSolver signals each solve that starts and holds it until ctx ends.
func blockingSolver(started chan<- string) solver.Solver {
	return solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
		started <- req.Params["sitekey"]
		<-ctx.Done()
		return solver.Answer{}, ctx.Err()
	})
}

// events returns every event of task id, oldest first.
func (b *bundle) events(t *testing.T, id string) []Event {
	t.Helper()
	var out []Event
	err := scanFrom(testContext(t), b.client, []string{wire.EventSubject(id)}, 0, false, func(m jetstream.Msg) (bool, error) {
		var ev Event
		require.NoError(t, json.Unmarshal(m.Data(), &ev))
		out = append(out, ev)
		return false, nil
	})
	require.NoError(t, err)
	return out
}

// count returns how many messages the stream holds on subject.
func (b *bundle) count(t *testing.T, subject string) int {
	t.Helper()
	n := 0
	err := scanFrom(testContext(t), b.client, []string{subject}, 0, false, func(jetstream.Msg) (bool, error) {
		n++
		return false, nil
	})
	require.NoError(t, err)
	return n
}

func TestShutdownHandsBackInFlightWithoutSpendingAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	started := make(chan string, 4)
	a := b.startWorker(t, WorkerConfig{Solver: blockingSolver(started), Threads: 2, ShutdownGrace: 100 * time.Millisecond})
	_, err := b.client.SubmitAll(ctx, []Task{turnstileTask("h1"), turnstileTask("h2")})
	require.NoError(t, err)
	<-started
	<-started

	a.stop()
	require.NoError(t, <-a.done)
	a.done <- nil
	for _, id := range []string{"h1", "h2"} {
		evs := b.events(t, id)
		last := evs[len(evs)-1]
		require.Equal(t, EventHandback, last.Kind, id)
		require.Zero(t, last.Attempts, id)
	}

	b.startWorker(t, WorkerConfig{Solver: tokenSolver()})
	for _, id := range []string{"h1", "h2"} {
		out, err := b.client.Wait(ctx, id)
		require.NoError(t, err)
		require.Equal(t, 1, out.Attempts, "the handed-back attempt is not counted")
	}
}

func TestWorkerDiesMidSolveTaskRedeliveredOnce(t *testing.T) {
	t.Parallel()
	top := Topology{AckWait: 500 * time.Millisecond}
	b := setup(t, top)
	ctx := testContext(t)

	// Worker A takes the task, then its connection dies: no ack, no heartbeat.
	started := make(chan string, 1)
	ncA := b.connect(t)
	wA, err := NewWorker(ctx, ncA, WorkerConfig{Solver: blockingSolver(started), Topology: top, IdleCheck: 50 * time.Millisecond,
		ShutdownGrace: time.Millisecond})
	require.NoError(t, err)
	ctxA, stopA := context.WithCancel(context.Background())
	doneA := make(chan error, 1)
	go func() { doneA <- wA.Run(ctxA) }()
	r, err := b.client.Submit(ctx, turnstileTask("crash"))
	require.NoError(t, err)
	<-started
	ncA.Close()

	b.startWorker(t, WorkerConfig{Solver: tokenSolver()})
	out, err := b.client.Wait(ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, StatusSolved, out.Status)
	require.Equal(t, 2, out.Attempts, "the dead worker's attempt counts")

	stopA() // A wakes up; its late writes go nowhere
	<-doneA
	require.Equal(t, 1, b.count(t, wire.ResultSubject("crash")), "exactly one outcome")
	evs := b.events(t, "crash")
	require.True(t, evs[1].Crashed, "the second attempt knows the first died: %+v", evs)
}

func TestMalformedMessagesAreDeadLetteredAndWorkerGoesOn(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	b.startWorker(t, WorkerConfig{Solver: tokenSolver()})
	js, err := jetstream.New(b.nc)
	require.NoError(t, err)
	raw := map[string]string{
		"notjson":   `{{{ not json`,
		"nomethod":  `{"id":"nomethod","method":"telepathy","params":{}}`,
		"noparams":  `{"id":"noparams","method":"turnstile","params":{"sitekey":"0x4AAAAAAAB"}}`,
		"mismatch":  `{"id":"other","method":"turnstile","params":{"sitekey":"0x4AAAAAAAB","pageurl":"https://a.example/"}}`,
		"hugeimage": `{"id":"hugeimage","method":"base64","params":{"body":"` + string(make([]byte, 0)) + bigBase64(1100*1024) + `"}}`,
	}
	gens := map[string]uint64{}
	for id, body := range raw {
		ack, err := js.Publish(ctx, "captcha.tasks.fast.normal."+id, []byte(body), jetstream.WithMsgID(id))
		require.NoError(t, err, id)
		gens[id] = ack.Sequence
	}
	r, err := b.client.Submit(ctx, turnstileTask("after-garbage"))
	require.NoError(t, err)
	_, err = b.client.Wait(ctx, r.ID)
	require.NoError(t, err, "the worker still solves good tasks")

	for id := range raw {
		out, err := b.client.waitGen(ctx, id, gens[id])
		require.ErrorIs(t, err, ErrNotSolved, id)
		require.Equal(t, string(retry.ReasonInvalidTask), out.Reason, id)
		require.Equal(t, 1, b.count(t, wire.DeadSubject(id)), id)
	}
}

func bigBase64(n int) string {
	b := make([]byte, n*4/3)
	for i := range b {
		b[i] = 'A'
	}
	return string(b)
}

// scriptedSolver fails with the given errors in turn, then solves.
func scriptedSolver(calls *atomic.Int32, errs ...error) solver.Solver {
	return solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
		n := int(calls.Add(1))
		if n <= len(errs) {
			return solver.Answer{}, errs[n-1]
		}
		return tokenSolver().Solve(ctx, req)
	})
}

func apiErr(code string, class retry.Class) error {
	return &solver.Error{Code: code, Class: class, Op: "res.php"}
}

func TestRetryPaths(t *testing.T) {
	t.Parallel()
	transient := apiErr("ERROR_SERVER_ERROR", retry.Transient)
	capacity := apiErr("ERROR_NO_SLOT_AVAILABLE", retry.Capacity)
	cases := []struct {
		name         string
		errs         []error
		wantStatus   Status
		wantReason   retry.Reason
		wantAttempts int
		wantCalls    int32
	}{
		{"transient recovers", []error{transient, transient}, StatusSolved, "", 3, 3},
		{"permanent dead at once", []error{apiErr("ERROR_PAGEURL", retry.Permanent)}, StatusDead, retry.ReasonPermanent, 1, 1},
		{"attempts exhausted", []error{transient, apiErr("ERROR_CAPTCHA_UNSOLVABLE", retry.Resubmit), transient, transient}, StatusDead, retry.ReasonAttemptsExhausted, 3, 3},
		{"capacity never spends attempts", repeat(capacity, 12), StatusSolved, "", 1, 13}, // 12 snoozes ≫ the backoff budget
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, Topology{})
			ctx := testContext(t)
			var calls atomic.Int32
			b.startWorker(t, WorkerConfig{Solver: scriptedSolver(&calls, tc.errs...), Policy: retry.Policy{
				InitialInterval: 20 * time.Millisecond, MaxInterval: 50 * time.Millisecond, NoJitter: true,
				CapacityDelay: 10 * time.Millisecond, CapacityMaxDelay: 20 * time.Millisecond}})
			out, err := b.client.Solve(ctx, turnstileTask("r"))
			if tc.wantStatus == StatusSolved {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, ErrNotSolved)
				require.Equal(t, 1, b.count(t, wire.DeadSubject("r")))
			}
			require.Equal(t, tc.wantStatus, out.Status)
			require.Equal(t, string(tc.wantReason), out.Reason)
			require.Equal(t, tc.wantAttempts, out.Attempts)
			require.Equal(t, tc.wantCalls, calls.Load())
		})
	}
}

func repeat(err error, n int) []error {
	out := make([]error, n)
	for i := range out {
		out[i] = err
	}
	return out
}

func TestExpiredTaskNeverReachesTheService(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	// A producer an hour behind gives a deadline a minute on by its clock:
	// long passed on the broker's, which workers judge deadlines on (a
	// worker's own clock being off does not matter): no sleeping in the test.
	early := func() time.Time { return time.Now().Add(-time.Hour) }
	producer, err := NewClient(ctx, b.nc, ClientConfig{Name: "early-producer", Now: early})
	require.NoError(t, err)
	task := turnstileTask("exp")
	task.Deadline = early().Add(time.Minute)
	r, err := producer.Submit(ctx, task)
	require.NoError(t, err)
	var calls atomic.Int32
	b.startWorker(t, WorkerConfig{Solver: scriptedSolver(&calls)})
	out, err := b.client.Wait(ctx, r.ID)
	require.ErrorIs(t, err, ErrNotSolved)
	require.Equal(t, string(retry.ReasonExpired), out.Reason)
	require.Zero(t, calls.Load())
}

func TestFatalErrorStopsWorkerAndLeavesTasksUntouched(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	var calls atomic.Int32
	rw := b.startWorker(t, WorkerConfig{Solver: scriptedSolver(&calls, apiErr("ERROR_WRONG_USER_KEY", retry.Fatal))})
	_, err := b.client.Submit(ctx, turnstileTask("fatal"))
	require.NoError(t, err)
	err = <-rw.done
	rw.done <- nil
	var fe *FatalError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "ERROR_WRONG_USER_KEY", fe.Code)
	evs := b.events(t, "fatal")
	require.Equal(t, EventHandback, evs[len(evs)-1].Kind)
	require.Zero(t, evs[len(evs)-1].Attempts)
	require.Zero(t, b.count(t, wire.DeadSubject("fatal")))
}

var _ = nats.ErrTimeout

// TestThreadFreedWhenServiceIsDone: a thread goes on to the next task as soon
// as the service is done with one, while that one's outcome is still being
// recorded. With one thread, the first task's recording is held up (its
// observer waits) until the second task reaches the service: that can only
// happen if the thread was freed.
func TestThreadFreedWhenServiceIsDone(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	second := make(chan struct{})
	var calls atomic.Int32
	sv := solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
		if calls.Add(1) == 2 {
			close(second)
		}
		return solver.Answer{Solution: json.RawMessage(`"tok"`), CaptchaID: "1"}, nil
	})
	var held atomic.Bool
	overlapped := make(chan bool, 1)
	obs := ObserverFunc(func(o Observation) {
		if o.Kind != EventSolved || !held.CompareAndSwap(false, true) {
			return
		}
		select {
		case <-second:
			overlapped <- true
		case <-time.After(10 * time.Second):
			overlapped <- false
		}
	})
	b.startWorker(t, WorkerConfig{Solver: sv, Threads: 1, Observer: obs})
	receipts, err := b.client.SubmitAll(ctx, []Task{turnstileTask("first"), turnstileTask("second")})
	require.NoError(t, err)
	require.True(t, <-overlapped, "the second task never reached the service while the first was being recorded")
	n := 0
	require.NoError(t, b.client.WaitAll(ctx, receipts, func(o Outcome, err error) {
		require.NoError(t, err)
		require.Equal(t, StatusSolved, o.Status, o.ID)
		n++
	}))
	require.Equal(t, 2, n)
}

// TestIdleWorkerNeverMissesAPublish: an idle worker learns of a task from
// its wake-up subscription, which can see the publish before the stream has
// stored it; the fetch that follows may then find nothing. Tasks submitted
// one at a time must still each be picked up at once, not at the next idle
// check (an hour here) or the next publish.
func TestIdleWorkerNeverMissesAPublish(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	b.startWorker(t, WorkerConfig{Solver: tokenSolver(), Threads: 2, IdleCheck: time.Hour})
	for i := range 150 {
		ctx, cancel := context.WithTimeout(testContext(t), 5*time.Second)
		r, err := b.client.Submit(ctx, turnstileTask(fmt.Sprintf("one-%03d", i)))
		require.NoError(t, err)
		o, err := b.client.Wait(ctx, r.ID)
		cancel()
		require.NoError(t, err, "task %d was not picked up: the worker missed its publish", i)
		require.Equal(t, StatusSolved, o.Status)
	}
}

// TestFatalStopsIntakeAtOnce: once the service refuses the worker (a Fatal
// code), no task beyond those already with the service reaches it: with one
// thread, exactly one call.
func TestFatalStopsIntakeAtOnce(t *testing.T) {
	t.Parallel()
	for range 3 {
		b := setup(t, Topology{})
		ctx := testContext(t)
		tasks := make([]Task, 20)
		for i := range tasks {
			tasks[i] = turnstileTask(fmt.Sprintf("t%02d", i))
		}
		_, err := b.client.SubmitAll(ctx, tasks)
		require.NoError(t, err)
		var calls atomic.Int32
		sv := solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
			calls.Add(1)
			return solver.Answer{}, &solver.Error{Code: "ERROR_WRONG_USER_KEY", Class: retry.Fatal, Op: "in.php"}
		})
		rw := b.startWorker(t, WorkerConfig{Solver: sv, Threads: 1})
		err = <-rw.done
		rw.done <- err // for the cleanup
		var fe *FatalError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, int32(1), calls.Load(), "tasks sent to a service that refused the worker")
	}
}

// TestFatalStopsIntakeWithPlanQuota: with a plan-wide quota, the plan thread
// of a task refused with a Fatal code is not handed to another task: with a
// quota of one, exactly one call reaches the service.
func TestFatalStopsIntakeWithPlanQuota(t *testing.T) {
	t.Parallel()
	for range 3 {
		b := setup(t, Topology{})
		ctx := testContext(t)
		js, err := jetstream.New(b.nc)
		require.NoError(t, err)
		require.NoError(t, SetPlan(ctx, js.Conn(), b.top, 1))
		tasks := make([]Task, 20)
		for i := range tasks {
			tasks[i] = turnstileTask(fmt.Sprintf("t%02d", i))
		}
		_, err = b.client.SubmitAll(ctx, tasks)
		require.NoError(t, err)
		var calls atomic.Int32
		sv := solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
			calls.Add(1)
			// A solve that takes a while: the other thread waits for the
			// plan thread meanwhile.
			timer := time.NewTimer(100 * time.Millisecond)
			defer timer.Stop()
			select {
			case <-timer.C:
			case <-ctx.Done():
			}
			return solver.Answer{}, &solver.Error{Code: "ERROR_WRONG_USER_KEY", Class: retry.Fatal, Op: "in.php"}
		})
		rw := b.startWorker(t, WorkerConfig{Solver: sv, Threads: 2})
		err = <-rw.done
		rw.done <- err
		var fe *FatalError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, int32(1), calls.Load(), "tasks sent to a service that refused the worker")
	}
}

// TestShortFetchOnFreshNewsLooksAgain: news of two tasks, only the first
// stored when the worker fetches: it takes that one and looks again shortly
// for the second instead of waiting for the idle check.
func TestShortFetchOnFreshNewsLooksAgain(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	w, err := NewWorker(ctx, b.connect(t), WorkerConfig{Solver: tokenSolver(), Threads: 4, IdleCheck: time.Hour})
	require.NoError(t, err)
	_, err = b.client.Submit(ctx, turnstileTask("A"))
	require.NoError(t, err)
	waitCounted(ctx, t, b.client.s, topology.ConsumerName(LaneFast, wire.PriorityNormal), 1) // "A stored"
	// Past the initial "unknown: look once".
	for _, f := range w.dispatch.Feeds {
		f.EmptyAt.Store(f.News.Load())
	}
	w.dispatch.News(wire.TaskSubject(LaneFast, wire.PriorityNormal, "A"))
	w.dispatch.News(wire.TaskSubject(LaneFast, wire.PriorityNormal, "B")) // B's publish seen, B not stored yet
	require.Len(t, w.dispatch.Fetch(ctx, 4), 1)
	require.Eventually(t, w.dispatch.AnyNews, 5*time.Second, time.Millisecond, "the worker stopped looking for B")
}

// A worker configuration out of range is refused with the field's name,
// never replaced by a default.
func TestWorkerConfigRefusedNotReplaced(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	for want, cfg := range map[string]WorkerConfig{
		"Threads -3":          {Solver: tokenSolver(), Threads: -3},
		"RandomizationFactor": {Solver: tokenSolver(), Policy: retry.Policy{RandomizationFactor: 1.5}},
		"TokenLifetimes":      {Solver: tokenSolver(), TokenLifetimes: map[string]time.Duration{"turnstile": 0}},
		"no Solver":           {},
	} {
		_, err := NewWorker(ctx, b.nc, cfg)
		require.ErrorContains(t, err, want)
	}
}

// A client's or a topology's configuration out of range is refused with the
// field's name at every entry point, never replaced by a default.
func TestConfigRefusedNotReplaced(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	for want, cfg := range map[string]ClientConfig{
		"DefaultDeadline -1s":   {DefaultDeadline: -time.Second},
		"Replicas -1":           {Topology: Topology{Replicas: -1}},
		"Retention -1h0m0s":     {Topology: Topology{Retention: -time.Hour}},
		"AckWait -1s":           {Topology: Topology{AckWait: -time.Second}},
		"MaxInFlight -5":        {Topology: Topology{MaxInFlight: -5}},
		"MaxBytes -1":           {Topology: Topology{MaxBytes: -1}},
		"DuplicateWindow -1s":   {Topology: Topology{DuplicateWindow: -time.Second}},
		"DuplicateWindow 2h0m":  {Topology: Topology{Retention: time.Hour, DuplicateWindow: 2 * time.Hour}},
		`LaneLimits["medium"]`:  {Topology: Topology{LaneLimits: map[Lane]int{"medium": 3}}},
		`LaneLimits["slow"] -2`: {Topology: Topology{LaneLimits: map[Lane]int{LaneSlow: -2}}},
	} {
		_, err := NewClient(ctx, b.nc, cfg)
		require.ErrorContains(t, err, want)
		if cfg.DefaultDeadline == 0 {
			_, err = NewWorker(ctx, b.nc, WorkerConfig{Solver: tokenSolver(), Topology: cfg.Topology})
			require.ErrorContains(t, err, want, "the worker checks its topology too")
		}
	}
	_, err := NewWorker(ctx, b.nc, WorkerConfig{Solver: tokenSolver(), ShareTimingsEvery: -time.Second})
	require.ErrorContains(t, err, "ShareTimingsEvery -1s")
}
