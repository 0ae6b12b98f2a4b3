package stream

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream/wire"
)

// Ongoing floods whose headers hold (wire.HeadersForged finds nothing), so
// that the drain never takes them in bulk: replay-shaped copies naming dead
// letters that do not exist, and moved-copy-shaped ones naming a generation
// no worker moved. Each is forged only by the task's records, read one per
// free thread, while the producer keeps the broker storing. 1,000 are
// queued ahead of another producer's task and the flood goes on behind it,
// as TestOngoingFloodStaysWithinTheBound's "1,000 ahead" does with copies
// the headers show forged.
func TestOngoingFloodOfHeaderValidCopies(t *testing.T) {
	t.Parallel()
	now := time.Now().UTC().Format(time.RFC3339Nano)
	shapes := map[string]func(i int) *nats.Msg{
		"replays under one id": func(i int) *nats.Msg {
			m := nats.NewMsg(wire.TaskSubject(wire.LaneFast, wire.PriorityNormal, "replayed-1"))
			m.Data = []byte(turnstileBody)
			m.Header.Set(wire.HeaderReplayedBy, fmt.Sprint(i+1))
			m.Header.Set(wire.HeaderMsgID, wire.ReplayMsgID("replayed-1", fmt.Sprint(i+1)))
			return m
		},
		"moved copies under one id": func(i int) *nats.Msg {
			m := forgedMsg("moved-1", i)
			m.Header.Set(wire.HeaderGen, "1")
			m.Header.Set(wire.HeaderSubmitted, now)
			return m
		},
		"replays mixed with header-forged copies": func(i int) *nats.Msg {
			if i%2 == 0 {
				return forgedMsg("mixed-1", i)
			}
			m := nats.NewMsg(wire.TaskSubject(wire.LaneFast, wire.PriorityNormal, "mixed-1"))
			m.Data = []byte(turnstileBody)
			m.Header.Set(wire.HeaderReplayedBy, fmt.Sprint(i+1))
			m.Header.Set(wire.HeaderMsgID, wire.ReplayMsgID("mixed-1", fmt.Sprint(i+1)))
			return m
		},
	}
	for name, shape := range shapes {
		t.Run(name, ongoingFlood{name: name, prio: wire.PriorityNormal, rate: 5000, ahead: 1000, shape: shape}.hold)
	}
}

// Genuine moved copies (scheduled tasks a worker moves back to their lane
// when due) arriving amid forged copies that keep the drain on, with the
// threads busy: each is judged on the records beside the threads, handed
// back and then taken by a thread: every scheduled task is solved and
// paid once, and every forged copy ends.
func TestGenuineMovedCopiesAmidADrain(t *testing.T) {
	t.Parallel()
	a := attackSetup(t)
	ctx := testContext(t)
	api, sc := emulator(t, fakeapi.Config{SolveTime: fastSolve(200 * time.Millisecond)}, 0.01)
	const scheduled = 24
	notBefore := At(time.Now().Add(2 * time.Second))
	var receipts []Receipt
	for i := range scheduled {
		task := turnstileTask(fmt.Sprintf("due-%d", i))
		task.NotBefore = notBefore
		r, err := a.victim.Submit(ctx, task)
		require.NoError(t, err)
		receipts = append(receipts, r)
	}
	var forged atomic.Int64
	a.floodWorker(t, sc, &forged)
	// Forged copies while the scheduled tasks come due and after.
	stop := make(chan struct{})
	var once sync.Once
	halt := func() { once.Do(func() { close(stop) }) }
	defer halt()
	sent := a.sustainedFlood(t, 1000, func(i int) *nats.Msg { return forgedMsg("drain-1", i) }, stop)
	for _, r := range receipts {
		wctx, cancel := context.WithTimeout(ctx, floodBound)
		out, err := a.victim.waitGen(wctx, r.ID, r.Seq)
		cancel()
		require.NoError(t, err, "scheduled task %s", r.ID)
		require.Equal(t, StatusSolved, out.Status, "scheduled task %s", r.ID)
	}
	halt()
	require.Eventually(t, func() bool { return taskMessagesLeft(ctx, t, a.astream, "drain-1") == 0 }, floodBound, 50*time.Millisecond, "every forged copy ends")
	require.Equal(t, scheduled, api.Stats().Submitted, "each scheduled task paid once")
	t.Logf("%d scheduled tasks solved amid %d forged copies (%d ended)", scheduled, sent(), forged.Load())
}
