package pool

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The server's follower judges each worker's window by when the broker
// stored the write that set it: a worker 3 minutes ahead counts while it
// writes and is gone WindowFresh after its last write, by the broker's
// clock; a reading told beyond the broker's clock counts its account,
// not its plan; a window dated in the past is as old as it says.
func TestWindowsSeenByTheBrokersClock(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	ahead := t0.Add(3 * time.Minute)
	windows := func(a, b PlanWindow) map[string]PlanWindow { return map[string]PlanWindow{"wa": a, "wb": b} }
	wa := PlanWindow{Limit: 6, Told: 6, ToldAt: ahead, At: ahead, Account: "aaaa"}
	wb := func(at time.Time) PlanWindow {
		return PlanWindow{Limit: 10, Told: 10, ToldAt: at, At: at, Account: "bbbb"}
	}
	seen := windowsSeen{}

	ws := windows(wa, wb(t0))
	seen.fresh(ws, t0)
	told, accounts := ServiceReading(ws)
	require.Equal(t, [2]int{0, 2}, [2]int{told, accounts}, "the ahead worker counts its account")

	// B writes on; A is silent: A is gone WindowFresh after its write.
	at := t0.Add(WindowFresh + time.Second)
	ws = windows(wa, wb(at))
	seen.fresh(ws, at)
	told, accounts = ServiceReading(ws)
	require.Equal(t, [2]int{10, 1}, [2]int{told, accounts}, "A silent for WindowFresh by the broker's clock")

	// A reading from a century ahead, alone: its account, no plan.
	liar := PlanWindow{Limit: 1 << 30, Told: 1 << 30, ToldAt: t0.AddDate(100, 0, 0), At: t0.AddDate(100, 0, 0)}
	ws = map[string]PlanWindow{"liar": liar}
	seen = windowsSeen{}
	seen.fresh(ws, t0)
	told, accounts = ServiceReading(ws)
	require.Equal(t, [2]int{0, 1}, [2]int{told, accounts})
	// Beside an honest reading of its account, the honest one is the plan.
	ws = map[string]PlanWindow{"liar": liar, "w1": {Limit: 6, Told: 6, ToldAt: t0, At: t0}}
	seen.fresh(ws, t0)
	told, _ = ServiceReading(ws)
	require.Equal(t, 6, told)

	// A window dated an hour back is stale, whenever it was stored.
	ws = map[string]PlanWindow{"old": {Limit: 3, Told: 3, ToldAt: t0.Add(-time.Hour), At: t0.Add(-time.Hour)}}
	seen.fresh(ws, t0)
	require.Empty(t, ws)
}
