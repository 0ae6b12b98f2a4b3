package stream

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream/wire"
)

// A worker whose clock is a minute behind the client's is listed while it
// beats (`captchaq workers ls`, stats, the dashboard): its heartbeats are
// stored and live on the broker's clock.
func TestWorkerWithASkewedClockIsListed(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	b.startWorker(t, WorkerConfig{Solver: tokenSolver(), Name: "behind", Now: func() time.Time { return time.Now().Add(-time.Minute) }})
	require.Eventually(t, func() bool {
		ws, err := b.client.Workers(ctx)
		require.NoError(t, err)
		return len(ws) == 1
	}, 2*wire.HeartbeatEvery, 20*time.Millisecond)
}
