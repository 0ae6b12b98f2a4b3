package stream

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream/internal/dispatcher"
	"github.com/captchaq/captchaq/stream/internal/pool"
)

// The server that follows the readings restarts: it reads the windows
// stored last as it starts, as they stand. Readings of two accounts (one
// worker's clock 3 minutes ahead) set no quota after the restart either
// (when the ahead worker's window goes stale: pool's
// TestWindowsSeenByTheBrokersClock).
func TestAFollowerRestartedReadsTheStoredWindowsByTheBrokersClock(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	adm, err := NewAdmin(b.nc, AdminConfig{Topology: b.top})
	require.NoError(t, err)
	follow := func() context.CancelFunc {
		fctx, stop := context.WithCancel(context.Background())
		t.Cleanup(stop)
		require.NoError(t, adm.FollowServicePlan(fctx, nil))
		return stop
	}
	stop := follow()
	store, err := OpenTimings(ctx, b.nc, b.top)
	require.NoError(t, err)
	now := time.Now()
	ahead := now.Add(3 * time.Minute)
	require.NoError(t, store.PutPlanWindow(ctx, "wb", pool.PlanWindow{Limit: 10, Told: 10, ToldAt: now, Account: "bbbb", At: now}))
	require.Eventually(t, func() bool { return readPlan(t, b).Threads == 10 }, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, store.PutPlanWindow(ctx, "wa", pool.PlanWindow{Limit: 6, Told: 6, ToldAt: ahead, Account: "aaaa", At: ahead}))
	require.Eventually(t, func() bool { return readPlan(t, b) == dispatcher.Plan{} }, 10*time.Second, 5*time.Millisecond, "two accounts")
	stop()
	require.NoError(t, store.PutPlanWindow(ctx, "wb", pool.PlanWindow{Limit: 10, Told: 10, ToldAt: now, Account: "bbbb", At: time.Now()}))
	follow()
	// A write the restarted follower sees: still two accounts.
	require.NoError(t, store.PutPlanWindow(ctx, "wb", pool.PlanWindow{Limit: 10, Told: 10, ToldAt: now, Account: "bbbb", At: time.Now()}))
	// Never's last look may still run when the test has ended (CI's race
	// preview: readPlan's require failed on "context canceled"): a look
	// that fails is no quota, and fails nothing.
	js, err := jetStreamOf(b.nc, b.top)
	require.NoError(t, err)
	assert.Never(t, func() bool {
		p, err := dispatcher.ReadPlan(ctx, js)
		return err == nil && p.Threads != 0
	}, 300*time.Millisecond, 5*time.Millisecond, "readings of two accounts after the restart")
	require.Zero(t, readPlan(t, b).Threads, "readings of two accounts after the restart")
}
