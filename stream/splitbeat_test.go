package stream

import (
	"encoding/json"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/internal/logbuf"
	"github.com/captchaq/captchaq/stream/wire"
)

// A worker's heartbeat split in two messages, its part stored before the
// attempt it recorded and its last message after: the part's list was read
// before the attempt, and names other tasks. The task delivered again to
// another worker (its ack wait passed) waits for the holder, and is not
// solved again. Before, the last message, newer than the attempt and
// naming no part that held the task, had it taken over: solved (paid) a
// second time.
func TestSplitHeartbeatOlderThanTheAttemptIsWaitedFor(t *testing.T) {
	t.Parallel()
	b, js, _, r := frozenTask(t, "split")
	ctx := testContext(t)
	now := time.Now()
	beat := func(wi WorkerInfo) uint64 {
		data, err := json.Marshal(wi)
		require.NoError(t, err)
		ack, err := js.Publish(ctx, heartbeatSubject(wi.Name), data, jetstream.WithMsgTTL(wire.HeartbeatTTL))
		require.NoError(t, err)
		return ack.Sequence
	}
	others := []HeldTask{{ID: "a", Gen: 1}, {ID: "b", Gen: 1}}
	part := beat(WorkerInfo{Name: "holder", At: now, Held: 2, Part: true, Tasks: others})
	publishRecord(ctx, t, js, wire.EventSubject("split"), r.Seq, Event{Kind: EventAttempt, Gen: r.Seq, Attempts: 1, Delivery: 1, Worker: "holder", At: now})
	beat(WorkerInfo{Name: "holder", At: now, Held: 2, HeldParts: []uint64{part}})

	var solves atomic.Int32
	var logs logbuf.Buffer
	b.startWorker(t, WorkerConfig{Solver: countingSolver(&solves), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	waited := func() bool { return strings.Contains(logs.String(), "holds the task: waiting for it") }
	require.Eventually(t, func() bool { return waited() || solves.Load() > 0 }, 10*time.Second, 10*time.Millisecond)
	require.Zero(t, solves.Load(), "solved again while its holder may be solving it")
	require.True(t, waited())
}
