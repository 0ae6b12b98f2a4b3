package stream

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream/wire"
)

// History counts what ended in each step and what was open at each point,
// from the stream alone; OutcomeRecords say when each outcome was stored.
func TestHistoryAndOutcomeRecords(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	start := time.Now()
	b.startWorker(t, WorkerConfig{Solver: tokenSolver(), Threads: 2})
	require.NoError(t, b.client.PauseLane(ctx, LaneSlow, time.Now().Add(time.Hour)))
	for i := range 2 {
		_, err := b.client.Submit(ctx, recaptchaTask(fmt.Sprintf("open-%d", i)))
		require.NoError(t, err)
	}
	for i := range 3 {
		_, err := b.client.Solve(ctx, turnstileTask(fmt.Sprintf("done-%d", i)))
		require.NoError(t, err)
	}

	// The solved tasks' messages leave the stream just after their
	// outcomes: read once they are gone. (A scan that runs while a message
	// it counted is deleted can be told nothing is pending before its end.)
	require.Eventually(t, func() bool {
		info, err := b.client.s.Info(ctx, jetstream.WithSubjectFilter(wire.SubjectAllTasks))
		return err == nil && len(info.State.Subjects) == 2
	}, 10*time.Second, 5*time.Millisecond)

	h, err := b.client.History(ctx, time.Now().Add(-10*time.Minute), time.Minute)
	require.NoError(t, err)
	require.Len(t, h, 11)
	require.Zero(t, h[0].Open, "nothing was open ten minutes ago")
	require.Equal(t, 2, h[len(h)-1].Open, "the two on the paused lane are open now")
	solved, dead := 0, 0
	for i, p := range h {
		solved, dead = solved+p.Solved, dead+p.Dead
		if i > 0 {
			require.Equal(t, time.Minute, p.At.Sub(h[i-1].At))
		}
	}
	require.Equal(t, 3, solved)
	require.Zero(t, dead)
	_, err = b.client.History(ctx, time.Now().Add(time.Minute), time.Minute)
	require.ErrorContains(t, err, "is not before now")
	_, err = b.client.History(ctx, time.Now().Add(-time.Minute), 0)
	require.ErrorContains(t, err, "step must be positive")

	outs, err := b.client.OutcomeRecords(ctx, start)
	require.NoError(t, err)
	require.Len(t, outs, 3)
	for i, o := range outs {
		require.Equal(t, fmt.Sprintf("done-%d", i), o.ID, "oldest first")
		require.Empty(t, o.Solution, "never a token")
		require.NotZero(t, o.Gen)
		require.False(t, o.At.Before(start))
	}
}
