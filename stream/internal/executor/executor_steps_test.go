package executor

// What a delivery holds and gives back, and whom it waits for, against
// the fake store of executor_test.go.

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream/wire"
)

// recordAttemptOf stores an attempt of generation gen by worker, not ended:
// that worker was solving the task when the delivery was given again.
func (b *bundle) recordAttemptOf(t *testing.T, id string, gen uint64, worker string) {
	t.Helper()
	ev, err := json.Marshal(wire.Event{Kind: wire.EventAttempt, Gen: gen, Attempts: 1, Worker: worker, Delivery: 1, At: b.x.Now()})
	require.NoError(t, err)
	b.store.mu.Lock()
	b.store.put(wire.EventSubject(id), nil, ev)
	b.store.mu.Unlock()
}

// A redelivery of a task whose last attempt's worker may still be solving
// it waits for that worker: no second payment, nothing recorded, handed
// back for a heartbeat period. It may be: a heartbeat newer than the
// attempt names the task, or the latest heartbeat is older than the
// attempt (the next one says).
func TestExecuteWaitsForALiveHolder(t *testing.T) {
	t.Parallel()
	for name, before := range map[string]bool{"names it": false, "older than the attempt": true} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, solver.Answer{Solution: json.RawMessage(`"tok"`)}, nil)
			m := b.deliver(t, "h1", turnstile, 1)
			if before {
				b.store.heartbeat(t, wire.WorkerInfo{Name: "w2"})
				b.recordAttemptOf(t, "h1", 1, "w2")
			} else {
				b.recordAttemptOf(t, "h1", 1, "w2")
				b.store.heartbeat(t, wire.WorkerInfo{Name: "w2", Tasks: []wire.HeldTask{{ID: "h1", Gen: 1}}})
			}
			again := b.redeliver(1, "h1", m.header, turnstile, 2)
			b.x.Execute(context.Background(), again, noThread{}, noSlot{})

			require.Zero(t, b.solves, "the holder is solving it")
			require.Equal(t, "nak "+wire.HeartbeatEvery.String(), again.how())
			require.Equal(t, []string{"w2"}, workers(b.store.events(t, "h1")))
		})
	}
}

// A holder whose heartbeat is split (too many tasks for one message) is
// waited for when one of its parts names the task, or a part cannot be
// read (it waits a heartbeat period: the next beat says); it is taken over
// from when no part names the task.
func TestExecuteReadsASplitHeartbeat(t *testing.T) {
	t.Parallel()
	other := []wire.HeldTask{{ID: "a", Gen: 1}, {ID: "b", Gen: 1}}
	for name, tc := range map[string]struct {
		parts  [][]wire.HeldTask
		gone   bool // a part the head names is not on the holder's subject
		solves int
	}{
		"named in its second part": {parts: [][]wire.HeldTask{other, {{ID: "s1", Gen: 1}, {ID: "z", Gen: 1}}}},
		"a part unreadable":        {parts: [][]wire.HeldTask{other}, gone: true},
		"named in no part":         {parts: [][]wire.HeldTask{other, {{ID: "s1", Gen: 2}}}, solves: 1},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, solver.Answer{Solution: json.RawMessage(`"tok"`)}, nil)
			m := b.deliver(t, "s1", turnstile, 1)
			b.recordAttemptOf(t, "s1", 1, "w2")
			info := wire.WorkerInfo{Name: "w2"}
			if tc.gone {
				b.store.mu.Lock()
				info.HeldParts = []uint64{b.store.put(wire.HeartbeatSubject("w3"), nil, []byte(`{"name":"w3","part":true,"tasks":[{"id":"s1","gen":1}]}`))}
				b.store.mu.Unlock()
			}
			b.store.splitHeartbeat(t, info, tc.parts...)
			again := b.redeliver(1, "s1", m.header, turnstile, 2)
			b.x.Execute(context.Background(), again, noThread{}, noSlot{})

			require.Equal(t, tc.solves, b.solves)
			if tc.solves == 0 {
				require.Equal(t, "nak "+wire.HeartbeatEvery.String(), again.how())
				require.Equal(t, []string{"w2"}, workers(b.store.events(t, "s1")))
			} else {
				require.Equal(t, "ack", again.how())
				require.Equal(t, []string{"w2", "w1"}, workers(b.store.events(t, "s1")))
			}
		})
	}
}

// A split heartbeat's list is what the worker held before its first part
// was stored: an attempt recorded while the parts were being stored (each
// a write the stream syncs) is not in them, though the last message is
// newer than its record. That heartbeat is older than the attempt, and the
// redelivery waits for the next; as it does for a last message that counts
// more held tasks than its parts name (a list that could not be carried
// whole). Both were taken over before, the captcha paid again. A part
// stored last (its worker killed before its last message) is waited for
// too, until it expires.
func TestExecuteWaitsForASplitHeartbeatOlderThanTheAttempt(t *testing.T) {
	t.Parallel()
	other := []wire.HeldTask{{ID: "a", Gen: 1}, {ID: "b", Gen: 1}}
	for name, tc := range map[string]struct {
		before, after [][]wire.HeldTask // parts stored before and after the attempt's record
		held          int               // the last message's count, over what the parts carry
		killed        bool              // no last message stored
	}{
		"its parts stored before the attempt": {before: [][]wire.HeldTask{other, other}},
		"its first part before the attempt":   {before: [][]wire.HeldTask{other}, after: [][]wire.HeldTask{other}},
		"more held than named":                {after: [][]wire.HeldTask{other, other}, held: 1},
		"killed after a part":                 {killed: true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, solver.Answer{Solution: json.RawMessage(`"tok"`)}, nil)
			m := b.deliver(t, "s1", turnstile, 1)
			info := wire.WorkerInfo{Name: "w2", Held: tc.held}
			storeParts := func(parts [][]wire.HeldTask) {
				for _, p := range parts {
					part := wire.WorkerInfo{Name: "w2", Tasks: p, Part: true}
					data, err := json.Marshal(part)
					require.NoError(t, err)
					b.store.mu.Lock()
					info.HeldParts = append(info.HeldParts, b.store.put(wire.HeartbeatSubject("w2"), nil, data))
					b.store.mu.Unlock()
					info.Held += len(p)
				}
			}
			storeParts(tc.before)
			b.recordAttemptOf(t, "s1", 1, "w2")
			if tc.killed {
				b.store.heartbeat(t, wire.WorkerInfo{Name: "w2", Tasks: other, Part: true})
			} else {
				storeParts(tc.after)
				b.store.heartbeat(t, info)
			}
			again := b.redeliver(1, "s1", m.header, turnstile, 2)
			b.x.Execute(context.Background(), again, noThread{}, noSlot{})

			require.Zero(t, b.solves, "paid again while the holder may be solving it")
			require.Equal(t, "nak "+wire.HeartbeatEvery.String(), again.how())
			require.Equal(t, []string{"w2"}, workers(b.store.events(t, "s1")))
		})
	}
}

// A redelivery of a task whose last attempt's worker has stopped, or whose
// newer heartbeat does not name the task, takes it over: the lost attempt
// stays spent and is marked as such.
func TestExecuteTakesOverFromAGoneHolder(t *testing.T) {
	t.Parallel()
	for name, info := range map[string]wire.WorkerInfo{
		"stopped":       {Name: "w2", Stopped: true, Tasks: []wire.HeldTask{{ID: "g1", Gen: 1}}},
		"not naming it": {Name: "w2", Tasks: []wire.HeldTask{{ID: "other", Gen: 1}}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, solver.Answer{Solution: json.RawMessage(`"tok"`)}, nil)
			m := b.deliver(t, "g1", turnstile, 1)
			b.recordAttemptOf(t, "g1", 1, "w2")
			b.store.heartbeat(t, info)
			again := b.redeliver(1, "g1", m.header, turnstile, 2)
			b.x.Execute(context.Background(), again, noThread{}, noSlot{})

			require.Equal(t, 1, b.solves)
			require.Equal(t, "ack", again.how())
			evs := b.store.events(t, "g1")
			require.Equal(t, []string{"w2", "w1"}, workers(evs))
			require.True(t, evs[1].Crashed, "the second attempt says the first died with its worker")
			out, ok := b.store.outcome(t, "g1")
			require.True(t, ok)
			require.Equal(t, 2, out.Attempts, "the lost attempt stays spent")
		})
	}
}

// countingThread, countingSlot and countingRoom count what a delivery
// takes and gives back.
type countingThread struct {
	mu       sync.Mutex
	released int
}

func (c *countingThread) Release()               { c.mu.Lock(); c.released++; c.mu.Unlock() }
func (c *countingThread) AckWait() time.Duration { return 0 }
func (c *countingThread) KeepAlive()             {}

type countingSlot struct{ solved, detached int }

func (c *countingSlot) Solved() { c.solved++ }
func (c *countingSlot) Detach() { c.detached++ }

type countingRoom struct{ taken, given int }

func (c *countingRoom) Take(context.Context, time.Time) bool { c.taken++; return true }
func (c *countingRoom) Give()                                { c.given++ }

// A delivery holds its task in the worker's heartbeat from before the
// attempt is recorded to its end, solves within the task's deadline, frees
// the plan thread and the worker thread once the service is done, and
// gives back the room its records took; the token lives its method's
// lifetime.
func TestExecuteHoldsAndGivesBack(t *testing.T) {
	t.Parallel()
	b := setup(t, solver.Answer{}, nil)
	deadline := b.x.Now().Add(7 * time.Minute)
	var held bool
	var solveDeadline time.Time
	b.x.Solver = solver.Func(func(ctx context.Context, _ solver.Request) (solver.Answer, error) {
		held = b.x.Held.Has(wire.HeldTask{ID: "o1", Gen: 1})
		solveDeadline, _ = ctx.Deadline()
		return solver.Answer{Solution: json.RawMessage(`"tok"`), CaptchaID: "c9"}, nil
	})
	room, th, sl := &countingRoom{}, &countingThread{}, &countingSlot{}
	b.x.Room = room
	task, err := json.Marshal(wire.Task{ID: "o1", Method: "turnstile", Deadline: deadline,
		Params: wire.Params{"sitekey": "k", "pageurl": "https://shop.example/p"}})
	require.NoError(t, err)
	m := b.deliver(t, "o1", string(task), 1)
	b.x.Execute(context.Background(), m, th, sl)

	require.Equal(t, "ack", m.how())
	require.True(t, held, "the heartbeat names the task while the service works on it")
	require.False(t, b.x.Held.Has(wire.HeldTask{ID: "o1", Gen: 1}), "and no longer once it ended")
	require.True(t, solveDeadline.Equal(deadline), "the solve ends at the task's deadline: %s", solveDeadline)
	require.Equal(t, 1, th.released, "the plan thread is given back")
	require.Equal(t, 1, sl.solved, "the worker thread is free for the next task")
	require.Equal(t, [2]int{1, 1}, [2]int{room.taken, room.given}, "the room taken is given back")
	tok, found, _ := b.store.Token(context.Background(), "o1", 1)
	require.True(t, found)
	require.True(t, tok.Out.ExpiresAt.Equal(b.x.Now().Add(300*time.Second)), "a turnstile token lives 300 s: %s", tok.Out.ExpiresAt)
}

// A retry is handed back for its delay, and the dispatcher is told to look
// at the task's lane again when it comes due.
func TestExecuteRetryLooksAgain(t *testing.T) {
	t.Parallel()
	b := setup(t, solver.Answer{}, &solver.Error{Code: "ERROR_CAPTCHA_UNSOLVABLE", Class: solver.Classify("ERROR_CAPTCHA_UNSOLVABLE"), Op: "res.php"})
	var looked []string
	b.hooks.lookAgain = func(d time.Duration, lane wire.Lane) { looked = append(looked, "nak "+d.String()+" "+string(lane)) }
	m := b.deliver(t, "l1", turnstile, 1)
	b.x.Execute(context.Background(), m, noThread{}, noSlot{})

	require.Equal(t, []string{m.how() + " " + string(wire.LaneFast)}, looked)
}

// A task that is not due, delivered by its lane's consumer on a stream
// without a waiting room (no Mover), is handed back until it is due, and
// the dispatcher is told to look at its lane then through its own
// LookAgainAfter, which looks only when that is sooner than its idle check.
func TestExecuteNotDueLooksAgainThroughTheDispatcher(t *testing.T) {
	t.Parallel()
	b := setup(t, solver.Answer{Solution: json.RawMessage(`"tok"`)}, nil)
	b.x.ScheduleCheck = time.Minute
	var looked []string
	b.hooks.lookAgain = func(d time.Duration, lane wire.Lane) { looked = append(looked, "nak "+d.String()+" "+string(lane)) }
	due := b.x.Now().Add(30 * time.Second).Format(time.RFC3339)
	m := b.deliver(t, "s1", `{"method":"turnstile","not_before":"`+due+`","params":{"sitekey":"k","pageurl":"https://shop.example/p"}}`, 1)
	b.x.Execute(context.Background(), m, noThread{}, noSlot{})

	require.Zero(t, b.solves, "not due")
	require.Equal(t, "nak 30s", m.how())
	require.Equal(t, []string{"nak 30s " + string(wire.LaneFast)}, looked)
	require.Equal(t, []wire.EventKind{wire.EventScheduled}, kinds(b.store.events(t, "s1")))
}

// TestExecuteNotDueComesBackWithinTheScheduleCheck: a task due in 30 s on
// a worker whose ScheduleCheck is 10 s is handed back for 10 s, not 30,
// so that a cancel ends it within the schedule check.
func TestExecuteNotDueComesBackWithinTheScheduleCheck(t *testing.T) {
	t.Parallel()
	b := setup(t, solver.Answer{Solution: json.RawMessage(`"tok"`)}, nil)
	b.x.ScheduleCheck = 10 * time.Second
	var looked []string
	b.hooks.lookAgain = func(d time.Duration, lane wire.Lane) { looked = append(looked, d.String()) }
	due := b.x.Now().Add(30 * time.Second).Format(time.RFC3339)
	m := b.deliver(t, "s1", `{"method":"turnstile","not_before":"`+due+`","params":{"sitekey":"k","pageurl":"https://shop.example/p"}}`, 1)
	b.x.Execute(context.Background(), m, noThread{}, noSlot{})

	require.Zero(t, b.solves, "not due")
	require.Equal(t, "nak 10s", m.how())
	require.Equal(t, []string{"10s"}, looked)
}
