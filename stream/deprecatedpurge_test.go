package stream

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
)

// TestDeprecatedPurgeDeadKeepsItsFilter: Client.PurgeDead and
// Client.ReplayWhere, now wrappers of Admin's, touch only the dead letters
// their filter selects.
func TestDeprecatedPurgeDeadKeepsItsFilter(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	b.startWorker(t, WorkerConfig{Solver: solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
		return solver.Answer{}, apiErr("ERROR_PAGEURL", retry.Permanent)
	})})
	_, err := b.client.Solve(ctx, turnstileTask("pd1"))
	require.ErrorIs(t, err, ErrNotSolved)
	_, err = b.client.Solve(ctx, Task{ID: "pd2", Method: "base64", Params: Params{"body": pngBase64}})
	require.ErrorIs(t, err, ErrNotSolved)

	n, err := b.client.PurgeDead(ctx, DeadFilter{Method: "turnstile"})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	left, err := b.client.DeadLetters(ctx, DeadFilter{})
	require.NoError(t, err)
	require.Len(t, left, 1)
	require.Equal(t, "pd2", left[0].ID)

	_, err = b.client.Solve(ctx, turnstileTask("pd3"))
	require.ErrorIs(t, err, ErrNotSolved)
	rs, err := b.client.ReplayWhere(ctx, func(d DeadLetter) bool { return d.ID == "pd3" })
	require.NoError(t, err)
	require.Len(t, rs, 1, "replayed: %+v", rs)
	require.Equal(t, "pd3", rs[0].ID)
}
