package stream

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAdminStatsKeepsItsWindowAndClock: Admin.Stats counts the window it
// is given, on the admin's clock (AdminConfig.Now): an admin two hours
// ahead counts a solve just made in a three-hour window, and not in a
// half-hour one.
func TestAdminStatsKeepsItsWindowAndClock(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	b.startWorker(t, WorkerConfig{Solver: tokenSolver()})
	out, err := b.client.Solve(ctx, turnstileTask("counted"))
	require.NoError(t, err)
	require.Equal(t, StatusSolved, out.Status)

	adm, err := NewAdmin(b.nc, AdminConfig{Topology: b.top, Name: "ops", Now: func() time.Time { return time.Now().Add(2 * time.Hour) }})
	require.NoError(t, err)
	st, err := adm.Stats(ctx, 3*time.Hour)
	require.NoError(t, err)
	require.Equal(t, 3*time.Hour, st.Window)
	require.Equal(t, 1, st.Solved)
	st, err = adm.Stats(ctx, 30*time.Minute)
	require.NoError(t, err)
	require.Equal(t, 30*time.Minute, st.Window)
	require.Zero(t, st.Solved, "a solve two hours before the admin's now, outside a half-hour window")
}
