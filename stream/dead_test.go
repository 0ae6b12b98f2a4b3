package stream

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream/wire"
)

func TestDeadLetterListReplayTracePurge(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	var broken atomic.Bool
	broken.Store(true)
	b.startWorker(t, WorkerConfig{Solver: solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
		if broken.Load() {
			return solver.Answer{}, apiErr("ERROR_PAGEURL", retry.Permanent)
		}
		return tokenSolver().Solve(ctx, req)
	})})

	_, err := b.client.Solve(ctx, turnstileTask("d1"))
	require.ErrorIs(t, err, ErrNotSolved)
	img := Task{ID: "d2", Method: "base64", Params: Params{"body": pngBase64}}
	_, err = b.client.Solve(ctx, img)
	require.ErrorIs(t, err, ErrNotSolved)

	all, err := b.client.DeadLetters(ctx, DeadFilter{})
	require.NoError(t, err)
	require.Len(t, all, 2)
	d := all[0]
	require.Equal(t, "d1", d.ID)
	require.Equal(t, retry.ReasonPermanent, d.Reason)
	require.Equal(t, "ERROR_PAGEURL", d.Error)
	require.Equal(t, 1, d.Attempts)
	require.Equal(t, "shop.example", d.Host)
	require.Equal(t, "captcha.tasks.fast.normal.d1", d.Subject)
	require.False(t, d.FirstFailure.IsZero())
	require.Nil(t, d.Replayed)

	only, err := b.client.DeadLetters(ctx, DeadFilter{Method: "base64"})
	require.NoError(t, err)
	require.Len(t, only, 1)
	require.Equal(t, "d2", only[0].ID)
	_, err = b.client.DeadLetters(ctx, DeadFilter{Reason: "bored"})
	require.ErrorContains(t, err, "bored")

	broken.Store(false)
	r, err := b.client.Replay(ctx, "d1")
	require.NoError(t, err)
	out, err := b.client.Wait(ctx, "d1")
	require.NoError(t, err, "the replayed task is solved and Wait sees the new generation")
	require.Equal(t, 1, out.Attempts, "a replay starts a fresh budget")

	_, err = b.client.Replay(ctx, "d1")
	require.ErrorIs(t, err, ErrAlreadyReplayed)
	// Done tasks leave no task message (it holds the page URL); the worker
	// deletes it in the background once the outcome is stored.
	require.Eventually(t, func() bool { return b.count(t, wire.TaskSubjectsFor("d1")) == 0 }, 10*time.Second, 10*time.Millisecond)

	d, err = b.client.DeadLetterOf(ctx, "d1")
	require.NoError(t, err)
	require.NotNil(t, d.Replayed)
	require.Equal(t, r.Seq, d.Replayed.TaskSeq)

	tr, err := b.client.Trace(ctx, "d1")
	require.NoError(t, err)
	var kinds []string
	replayedAt := -1
	for i, e := range tr {
		if e.Kind == "replayed" { // recorded right after the new task: a fast worker may come first
			replayedAt = i
			continue
		}
		kinds = append(kinds, e.Kind)
	}
	require.Equal(t, []string{"submitted", "attempt", "dead", "dead-letter", "outcome", "submitted", "attempt", "outcome"}, kinds)
	require.Greater(t, replayedAt, 5)
	// Two replays of one letter enqueued one task: two submissions in all.
	require.Equal(t, "test-producer", tr[0].Client)

	pending, err := b.client.ReplayAll(ctx, DeadFilter{Reason: retry.ReasonPermanent})
	require.NoError(t, err)
	require.Len(t, pending, 1, "only d2 was still waiting for a replay")
	_, err = b.client.Wait(ctx, "d2")
	require.NoError(t, err)

	n, err := b.client.PurgeDead(ctx, DeadFilter{})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	left, err := b.client.DeadLetters(ctx, DeadFilter{})
	require.NoError(t, err)
	require.Empty(t, left)
}

// pngBase64 is a 1×1 PNG.
const pngBase64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
