package stream

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLaneAtItsLimitTakesTheNextTaskOnTheAck: with a lane held to one task
// in solving and a thread idle, the lane's next task starts as soon as the
// one before it is recorded (its ack makes the room), not at the idle check
// (an hour here). The solve frees its thread before it is recorded, so the
// idle thread has looked at the lane, found it at its limit, and is
// waiting when the room comes.
func TestLaneAtItsLimitTakesTheNextTaskOnTheAck(t *testing.T) {
	t.Parallel()
	t.Run("encrypted store", func(t *testing.T) {
		t.Parallel()
		laneLimitNextTask(t, setup)
	})
	// On a plaintext store the ack comes after the erasure, in the
	// background, after the task's thread and its lane were given back.
	t.Run("plaintext store", func(t *testing.T) {
		t.Parallel()
		laneLimitNextTask(t, setupPlaintext)
	})
}

func laneLimitNextTask(t *testing.T, setup func(*testing.T, Topology) *bundle) {
	top := Topology{LaneLimits: map[Lane]int{LaneSlow: 1}}
	b := setup(t, top)
	ctx := testContext(t)
	b.startWorker(t, WorkerConfig{Solver: tokenSolver(), Threads: 2, IdleCheck: time.Hour})
	tasks := make([]Task, 4)
	for i := range tasks {
		tasks[i] = recaptchaTask(fmt.Sprintf("limited-%d", i))
	}
	receipts, err := b.client.SubmitAll(ctx, tasks)
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, b.client.WaitAll(wctx, receipts, func(o Outcome, err error) {
		require.NoError(t, err, "a task of a lane at its limit waited for the idle check after the lane had room")
		require.Equal(t, StatusSolved, o.Status, o.ID)
	}))
}
