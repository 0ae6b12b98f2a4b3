package dispatcher

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream/wire"
)

// TestLookAgainAfterWakesWhenDue: a task handed back with a delay shorter
// than the idle check has its lane looked at when the delay ends (news on
// the lane's feed, the dispatch loop woken), not at the idle check, nor
// long after it is due; one handed back for longer than the idle check is
// left to it.
func TestLookAgainAfterWakesWhenDue(t *testing.T) {
	t.Parallel()
	fast, slow := &Feed{Lane: wire.LaneFast}, &Feed{Lane: wire.LaneSlow}
	dp := New([]*Feed{fast, slow})
	dp.IdleCheck = time.Hour
	start := time.Now()
	dp.LookAgainAfter(100*time.Millisecond, wire.LaneFast)
	select {
	case <-dp.wake:
	case <-time.After(5 * time.Second):
		t.Fatal("no look at the lane when its task came due")
	}
	took := time.Since(start)
	require.GreaterOrEqual(t, took, 100*time.Millisecond, "looked before the task was due")
	require.Less(t, took, 600*time.Millisecond, "looked long after the task was due")
	require.EqualValues(t, 1, fast.News.Load())
	require.Zero(t, slow.News.Load(), "news on another lane")

	// Longer than the idle check: the idle check finds it.
	dp.IdleCheck = 50 * time.Millisecond
	dp.LookAgainAfter(100*time.Millisecond, wire.LaneSlow)
	select {
	case <-dp.wake:
		t.Fatal("a look the idle check makes anyway")
	case <-time.After(400 * time.Millisecond):
	}
	require.Zero(t, slow.News.Load())
}
