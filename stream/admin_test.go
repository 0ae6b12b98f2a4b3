package stream

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream/internal/topology"
	"github.com/captchaq/captchaq/stream/wire"
)

// An Admin is made before the topology exists: it makes it, then works on
// it. A call that needs the stream before it exists fails with
// ErrNoTopology and the next one binds. A configuration out of range is
// refused by name.
func TestAdminMadeBeforeTheTopology(t *testing.T) {
	t.Parallel()
	nc := (&bundle{ns: bareServer(t)}).connect(t)
	ctx := testContext(t)

	_, err := NewAdmin(nc, AdminConfig{DefaultDeadline: -time.Second})
	require.ErrorContains(t, err, "admin: DefaultDeadline")
	_, err = NewAdmin(nc, AdminConfig{Topology: Topology{Replicas: -1}})
	require.ErrorContains(t, err, "admin: topology: Replicas")

	adm, err := NewAdmin(nc, AdminConfig{Name: "ops"})
	require.NoError(t, err)
	_, err = adm.DeadLetters(ctx, DeadFilter{})
	require.ErrorIs(t, err, ErrNoTopology, "no stream yet")

	s, err := adm.EnsureTopology(ctx, true)
	require.NoError(t, err)
	_, err = adm.EnsureTimings(ctx)
	require.NoError(t, err)
	require.NoError(t, adm.SetPlan(ctx, 3))
	n, err := adm.PlanThreads(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, n)

	ds, err := adm.DeadLetters(ctx, DeadFilter{})
	require.NoError(t, err, "bound once the stream exists")
	require.Empty(t, ds)

	require.NoError(t, adm.PauseLane(ctx, LaneFast, time.Now().Add(time.Hour)))
	for _, p := range wire.Priorities {
		c, err := s.Consumer(ctx, topology.ConsumerName(LaneFast, p))
		require.NoError(t, err)
		require.True(t, c.CachedInfo().Paused, "%s paused", topology.ConsumerName(LaneFast, p))
	}
	require.NoError(t, adm.ResumeLane(ctx, LaneFast))
	for _, p := range wire.Priorities {
		c, err := s.Consumer(ctx, topology.ConsumerName(LaneFast, p))
		require.NoError(t, err)
		require.False(t, c.CachedInfo().Paused, "%s resumed", topology.ConsumerName(LaneFast, p))
	}
	require.ErrorContains(t, adm.PauseLane(ctx, "medium", time.Now().Add(time.Hour)), `lane "medium"`)
}
