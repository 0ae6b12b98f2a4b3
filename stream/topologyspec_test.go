package stream

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream/internal/dispatcher"
	"github.com/captchaq/captchaq/stream/internal/room"
	"github.com/captchaq/captchaq/stream/internal/topology"
	"github.com/captchaq/captchaq/stream/wire"
)

// The broker objects are what Topology's fields say, read back from the
// server and checked against the fields themselves (not against the
// configuration the code makes, which would agree with any mistake): the
// stream's MaxAge is Retention, its duplicate window DuplicateWindow, it
// refuses at MaxBytes rather than drop; each normal-priority consumer of a
// lane with a limit hands out that many tasks, every other MaxInFlight,
// and the waiting room any number. An update brings existing consumers to
// a changed topology; a create without update leaves them as they are.
func TestTopologyObjectsAreWhatTheTopologySays(t *testing.T) {
	t.Parallel()
	ns := bareServer(t)
	ctx := testContext(t)
	js := bareJetStream(t, ns)
	top := Topology{Retention: 3 * time.Hour, DuplicateWindow: 7 * time.Minute, MaxBytes: 1 << 20, MaxInFlight: 40, LaneLimits: map[Lane]int{LaneSlow: 6}}
	s, err := EnsureTopology(ctx, js.Conn(), top, false)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, 3*time.Hour, info.Config.MaxAge, "Retention")
	require.Equal(t, 7*time.Minute, info.Config.Duplicates, "DuplicateWindow")
	require.Equal(t, int64(1<<20), info.Config.MaxBytes)
	require.Equal(t, jetstream.DiscardNew, info.Config.Discard, "full: refuse, never drop an accepted task")
	require.Equal(t, jetstream.WorkQueuePolicy, info.Config.Retention)

	limits := func(s jetstream.Stream) map[string]int {
		out := map[string]int{}
		for _, wc := range topology.WorkerConsumers() {
			c, err := s.Consumer(ctx, topology.ConsumerName(wc.Lane, wc.Priority))
			require.NoError(t, err)
			out[fmt.Sprintf("%s/%s", wc.Lane, wc.Priority)] = c.CachedInfo().Config.MaxAckPending
		}
		c, err := s.Consumer(ctx, wire.WaitingRoomConsumer)
		require.NoError(t, err)
		out["waiting room"] = c.CachedInfo().Config.MaxAckPending
		return out
	}
	require.Equal(t, map[string]int{"fast/high": 40, "slow/high": 40, "fast/normal": 40, "slow/normal": 6, "waiting room": -1}, limits(s))

	changed := top
	changed.MaxInFlight, changed.LaneLimits = 25, map[Lane]int{LaneFast: 3}
	s, err = EnsureTopology(ctx, js.Conn(), changed, false)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"fast/high": 40, "slow/high": 40, "fast/normal": 40, "slow/normal": 6, "waiting room": -1}, limits(s),
		"without update, what exists is left as it is")
	s, err = EnsureTopology(ctx, js.Conn(), changed, true)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"fast/high": 25, "slow/high": 25, "fast/normal": 3, "slow/normal": 25, "waiting room": -1}, limits(s),
		"an update brings them to the topology")

	// The plan holds exactly its threads, and no room for one more, even
	// for an admin's publish; set again to fewer, it holds that many.
	for _, threads := range []int{3, 2} {
		require.NoError(t, SetPlan(ctx, js.Conn(), top, threads))
		_, err = js.Publish(ctx, dispatcher.PlanSubject, []byte("extra"))
		require.Error(t, err, "a thread more than the plan's %d", threads)
		plan, err := js.Stream(ctx, dispatcher.PlanStream)
		require.NoError(t, err)
		require.Equal(t, uint64(threads), plan.CachedInfo().State.Msgs)
	}
}

// A producer keeps room for the records of every task queued or handed
// out, and no more: when it refuses, the tasks the stream holds and the room
// reserved for each fit it, and the one refused would not have. Run with
// no worker, and with a worker holding three tasks (handed out, not
// pending).
func TestProducerKeepsRoomForEveryQueuedTaskExactly(t *testing.T) {
	t.Parallel()
	for _, inFlight := range []int{0, 3} {
		t.Run(fmt.Sprintf("%d in flight", inFlight), func(t *testing.T) {
			t.Parallel()
			const maxBytes = 96 << 10
			b := setup(t, Topology{MaxBytes: maxBytes})
			ctx := testContext(t)
			if inFlight > 0 {
				started := make(chan string, inFlight)
				b.startWorker(t, WorkerConfig{Solver: blockingSolver(started), Threads: inFlight, ShutdownGrace: 100 * time.Millisecond})
				for i := range inFlight {
					_, err := b.client.Submit(ctx, turnstileTask(fmt.Sprintf("held%d", i)))
					require.NoError(t, err)
				}
				for range inFlight {
					<-started
				}
			}
			// A producer of its own, whose first reading finds them handed out.
			filler, err := NewClient(ctx, b.connect(t), ClientConfig{Name: "filler"})
			require.NoError(t, err)
			n := inFlight
			var full error
			for i := range 1000 {
				if _, err := filler.Submit(ctx, turnstileTask(fmt.Sprintf("r%03d", i))); err != nil {
					full = err
					break
				}
				n++
			}
			require.ErrorIs(t, full, ErrStreamFull)
			require.Greater(t, n, inFlight+3)
			info, err := b.client.s.Info(ctx, jetstream.WithSubjectFilter(wire.SubjectAllTasks))
			require.NoError(t, err)
			queued := 0
			for _, k := range info.State.Subjects {
				queued += int(k)
			}
			require.Equal(t, n, queued, "every task accepted waits or runs")
			used := int64(info.State.Bytes)
			perTask := used / int64(n) // the tasks are alike, a few bytes apart
			require.LessOrEqual(t, used+int64(n)*room.ReservePerTask, int64(maxBytes),
				"%d tasks in %d bytes: room kept for each one's records", n, used)
			require.Greater(t, used+perTask+16+int64(n+1)*room.ReservePerTask, int64(maxBytes),
				"%d tasks in %d bytes: the next one fitted with its room, and was refused", n, used)
		})
	}
}
