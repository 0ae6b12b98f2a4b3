package upkeep

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream/broker"
	"github.com/captchaq/captchaq/stream/internal/jscall"
	"github.com/captchaq/captchaq/stream/internal/topology"
	"github.com/captchaq/captchaq/stream/wire"
)

// SplitHeld keeps every message of a heartbeat within the stream's
// limit, however many tasks the worker holds: 10000 detached captchas of
// 64-character ids (some 850 KB of list) on the shipped 4 MB server and on
// one of 16 KiB, each message of the split within its bound, the parts
// carrying every task once, in order, and the last message naming the
// parts within the bound too. A list that fits stays in one message.
func TestSplitHeldFitsEveryMessage(t *testing.T) {
	t.Parallel()
	info := wire.WorkerInfo{Name: strings.Repeat("w", 64), Host: "host-1", PID: 4242, Threads: 40, InUse: 40,
		Started: time.Now(), At: time.Now(), ServiceDown: strings.Repeat("x", 200), Held: 10000}
	held := make([]wire.HeldTask, 10000)
	for i := range held {
		held[i] = wire.HeldTask{ID: fmt.Sprintf("%s-%05d", strings.Repeat("t", 58), i), Gen: math.MaxUint64}
	}
	for _, maxPayload := range []int64{4 << 20, 1 << 20, 16 << 10} {
		limit := HeartbeatMessageMax(maxPayload, int32(wire.MaxTaskMessage(maxPayload)))
		lists, carried := SplitHeld(info, held, limit)
		require.Equal(t, len(held), carried, "max_payload %d", maxPayload)
		require.Greater(t, len(lists), 1)
		var all []wire.HeldTask
		head := info
		for i, l := range lists {
			part := info
			part.Tasks, part.Part = l, true
			b, err := json.Marshal(part)
			require.NoError(t, err)
			require.LessOrEqual(t, len(b), limit, "part %d of %d", i, len(lists))
			all = append(all, l...)
			head.HeldParts = append(head.HeldParts, math.MaxUint64)
		}
		require.Equal(t, held, all)
		b, err := json.Marshal(head)
		require.NoError(t, err)
		require.LessOrEqual(t, len(b), limit, "the last message")
		t.Logf("max_payload %d: messages of %d bytes at most, %d parts", maxPayload, limit, len(lists))
	}

	lists, carried := SplitHeld(info, held[:3], HeartbeatMessageMax(1<<20, 0))
	require.Equal(t, [][]wire.HeldTask{held[:3]}, lists, "a short list stays in one message")
	require.Equal(t, 3, carried)

	_, carried = SplitHeld(info, held, 500)
	require.Zero(t, carried, "no message holds even one task")
	_, carried = SplitHeld(info, held, 1200)
	require.Positive(t, carried)
	require.Less(t, carried, len(held), "too many parts for the last message to name")
}

// A list whose heartbeat is exactly the bound stays in one message; one
// byte over, it is split. Before, the commas were counted one too many and
// a heartbeat of exactly the bound was split.
func TestSplitHeldAtTheBoundOfOneMessage(t *testing.T) {
	t.Parallel()
	info := wire.WorkerInfo{Name: "w1", Host: "host-1", PID: 4242, Threads: 40, Held: 50}
	held := make([]wire.HeldTask, 50)
	for i := range held {
		held[i] = wire.HeldTask{ID: fmt.Sprintf("t-%05d", i), Gen: 1}
	}
	whole := info
	whole.Tasks = held
	b, err := json.Marshal(whole)
	require.NoError(t, err)
	lists, carried := SplitHeld(info, held, len(b))
	require.Equal(t, [][]wire.HeldTask{held}, lists, "a heartbeat of %d bytes at a bound of as many", len(b))
	require.Equal(t, len(held), carried)
	lists, carried = SplitHeld(info, held, len(b)-1)
	require.Greater(t, len(lists), 1)
	require.Equal(t, len(held), carried)
}

// A split heartbeat stores every part within its bound and then its last
// message, on a server of max_payload 16 KiB whose stream has passed
// sequence 100 million (months of tasks): 10000 held tasks of 64-character
// ids, each part a copy of the heartbeat with its share of the list. Before,
// each part also carried the sequences of the parts stored before it
// (a copy of the heartbeat as it grew): part 110 or so passed the stream's
// message limit and was refused, and no last message was stored, every
// beat, the worker saying it was not seen alive.
func TestHeartbeatStoresEverySplitMessageWithinItsBound(t *testing.T) {
	t.Parallel()
	held := make([]wire.HeldTask, 10000)
	for i := range held {
		held[i] = wire.HeldTask{ID: fmt.Sprintf("%s-%05d", strings.Repeat("t", 58), i), Gen: 100_000_000 + uint64(i)}
	}
	b := beatOnce(t, 16<<10, 100_000_000, func() []wire.HeldTask { return held })
	require.Empty(t, b.logged)
	require.False(t, b.head.Part, "the last message stored is a part: the heartbeat was not stored whole")
	require.Equal(t, len(held), b.head.Held)
	require.Greater(t, len(b.parts), 100)
	var all []wire.HeldTask
	for _, p := range b.parts {
		require.True(t, p.Part)
		all = append(all, p.Tasks...)
	}
	require.Equal(t, held, all)
}

// A server of max_payload 2 KiB takes messages of 1 KiB on its stream: a
// heartbeat naming 3 tasks of 64-character ids (some 500 bytes) fits one.
// Before, 1 KiB was kept for the message's headers (some 30 bytes), a
// heartbeat had room for 1 byte and named no task, saying so at error
// level; the executor then took each over.
func TestHeartbeatOnATinyServerNamesWhatFits(t *testing.T) {
	t.Parallel()
	held := make([]wire.HeldTask, 3)
	for i := range held {
		held[i] = wire.HeldTask{ID: fmt.Sprintf("%s-%05d", strings.Repeat("t", 58), i), Gen: 1}
	}
	b := beatOnce(t, 2<<10, 0, func() []wire.HeldTask { return held })
	require.Empty(t, b.logged)
	require.Equal(t, held, b.head.Tasks)
	require.Equal(t, len(held), b.head.Held)
}

// A split heartbeat's last message names the tasks held since its list
// was read (SplitHeld takes some 16 ms for 10000 tasks, each part a
// stored write): an attempt recorded before the first part was stored is
// one, and the executor takes a split heartbeat as old as its first part,
// so every attempt recorded before it must be named. Before, the last
// message named none (Tasks empty, Held 1000), and a task whose attempt
// was recorded meanwhile was taken over and paid again.
func TestSplitHeartbeatNamesTasksHeldSinceItsList(t *testing.T) {
	t.Parallel()
	held := make([]wire.HeldTask, 1000)
	for i := range held {
		held[i] = wire.HeldTask{ID: fmt.Sprintf("%s-%05d", strings.Repeat("t", 58), i), Gen: 1}
	}
	late := wire.HeldTask{ID: "late", Gen: 7}
	reads := 0
	b := beatOnce(t, 16<<10, 0, func() []wire.HeldTask {
		if reads++; reads == 1 {
			return held
		}
		return append(slices.Clone(held), late)
	})
	require.Empty(t, b.logged)
	require.Greater(t, len(b.parts), 1)
	require.Equal(t, []wire.HeldTask{late}, b.head.Tasks)
	require.Equal(t, len(held)+1, b.head.Held)
}

// stored is a heartbeat as beatOnce stored it: its last message, its
// parts, and what the worker logged.
type stored struct {
	head   wire.WorkerInfo
	parts  []wire.WorkerInfo
	logged string
}

// beatOnce stores one heartbeat of a worker holding held on a server of
// maxPayload, its stream past sequence firstSeq, and reads it back, each
// message checked against the bound the worker keeps to.
func beatOnce(t *testing.T, maxPayload int32, firstSeq uint64, held func() []wire.HeldTask) stored {
	t.Helper()
	nc, js := startBroker(t, broker.Config{StoreDir: t.TempDir(), LazySync: true, MaxPayload: maxPayload})
	ctx := t.Context()
	s, _, err := topology.EnsureStreams(ctx, js, topology.Spec{Stream: "CAPTCHA", Retention: time.Hour, DuplicateWindow: time.Minute,
		AckWait: time.Minute, Memory: true, MaxPayload: int64(maxPayload)}, false)
	require.NoError(t, err)
	if firstSeq > 0 {
		require.NoError(t, s.Purge(ctx, jetstream.WithPurgeSequence(firstSeq)))
	}
	var logged strings.Builder
	h := &Heartbeat{Info: wire.WorkerInfo{Name: "w1", Host: "host-1", PID: 4242, Threads: 40, Started: time.Now()},
		Now: time.Now, InUse: func() int { return 40 }, Held: held,
		JS: js, Stream: s, Reach: &jscall.Reach{}, Clock: &jscall.BrokerClock{},
		Log:        slog.New(slog.NewTextHandler(&logged, nil)),
		MaxMessage: HeartbeatMessageMax(nc.MaxPayload(), s.CachedInfo().Config.MaxMsgSize)}
	info := h.Info
	h.beat(ctx, &info)

	var out stored
	last, err := s.GetLastMsgForSubject(ctx, wire.HeartbeatSubject("w1"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(last.Data, &out.head))
	require.LessOrEqual(t, len(last.Data), h.MaxMessage)
	for i, seq := range out.head.HeldParts {
		m, err := s.GetMsg(ctx, seq)
		require.NoError(t, err)
		require.LessOrEqual(t, len(m.Data), h.MaxMessage, "part %d of %d", i, len(out.head.HeldParts))
		var part wire.WorkerInfo
		require.NoError(t, json.Unmarshal(m.Data, &part))
		out.parts = append(out.parts, part)
	}
	out.logged = logged.String()
	return out
}
