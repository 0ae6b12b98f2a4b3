package stream

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream/wire"
)

// These tests flood the pool with forged task messages shaped otherwise
// than flood_test.go does, as producers with the shipped nats.conf role
// can, and hold another producer's task to the bound docs/security.md
// states (floodBound).

// sustainedFlood publishes forged messages made by shape, perSecond of
// them from one producer connection (in batches every 50 ms), until stop
// is closed; it returns how many were stored so far.
func (a *attack) sustainedFlood(t *testing.T, perSecond int, shape func(i int) *nats.Msg, stop <-chan struct{}) func() int64 {
	t.Helper()
	var sent atomic.Int64
	nc, _ := roleConn(t, a.ns, "producer")
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		batch, i := max(1, perSecond/20), 0
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			for range batch {
				if _, err := js.PublishMsgAsync(shape(i)); err != nil {
					return
				}
				i++
			}
			select {
			case <-js.PublishAsyncComplete():
				sent.Add(int64(batch))
			case <-stop:
				return
			}
		}
	}()
	t.Cleanup(func() { <-done })
	return sent.Load
}

// A producer's normal-priority task, queued first, and a flood of forged
// messages that starts after it and goes on at floodRate a second (more
// than the pool acks while the broker also stores the flood): in the
// task's own priority the flood is behind it and costs it nothing; at high
// priority, every forged copy, published after it, takes a thread before
// it. The stated bound counts the messages queued ahead of a task when the
// pool starts (here, none in its priority and a tenth of floodRate in the
// other); a flood published after it must not hold it back for as long as
// the flood lasts.
func TestHighPriorityFloodDoesNotStarveANormalTask(t *testing.T) {
	t.Parallel()
	floodRate := 2000
	if v, err := strconv.Atoi(os.Getenv("CAPTCHAQ_FLOOD_RATE")); err == nil {
		floodRate = v
	}
	for _, prio := range []wire.Priority{wire.PriorityNormal, wire.PriorityHigh} {
		t.Run(string(prio), func(t *testing.T) {
			if prio == wire.PriorityHigh && os.Getenv("CAPTCHAQ_KNOWN_HOLES") != "1" {
				t.Skip("known hole: a forged high-priority flood faster than the pool acks it holds every normal task back for as long as it lasts " +
					"(high priority is strict: wire contract); CAPTCHAQ_KNOWN_HOLES=1 runs it")
			}
			a := attackSetup(t)
			ctx := testContext(t)
			api, sc := emulator(t, fakeapi.Config{SolveTime: fastSolve(100 * time.Millisecond)}, 0.01)
			r, err := a.victim.Submit(ctx, turnstileTask("innocent-1"))
			require.NoError(t, err)

			stop := make(chan struct{})
			var once sync.Once
			halt := func() { once.Do(func() { close(stop) }) }
			defer halt()
			sent := a.sustainedFlood(t, floodRate, func(i int) *nats.Msg {
				id := fmt.Sprintf("flood-%d", i%64)
				m := nats.NewMsg(wire.TaskSubject(wire.LaneFast, prio, id))
				m.Data = []byte(turnstileBody)
				m.Header.Set(wire.HeaderMsgID, fmt.Sprintf("%s-forged-%d", id, i))
				return m
			}, stop)
			require.Eventually(t, func() bool { return sent() >= int64(floodRate/10) }, floodBound, 10*time.Millisecond, "the flood is under way")

			var forged atomic.Int64
			start := time.Now()
			atStart := sent()
			a.floodWorker(t, sc, &forged)
			wctx, cancel := context.WithTimeout(ctx, floodBound+10*time.Second)
			defer cancel()
			out, err := a.victim.waitGen(wctx, "innocent-1", r.Seq)
			took := time.Since(start)
			halt()
			t.Logf("%s flood at %d/s: innocent task %v after %s; %d forged stored before the pool started, %d after, %d ended by the pool",
				prio, floodRate, err, took.Round(time.Millisecond), atStart, sent()-atStart, forged.Load())
			require.NoError(t, err, "the innocent task's outcome while the flood goes on")
			require.Equal(t, StatusSolved, out.Status)
			require.LessOrEqual(t, took, floodBound, "the innocent task's outcome within the bound")
			require.Equal(t, 1, api.Stats().Submitted, "only the innocent task is paid for")
		})
	}
}
