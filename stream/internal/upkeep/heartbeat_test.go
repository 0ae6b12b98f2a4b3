package upkeep

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
