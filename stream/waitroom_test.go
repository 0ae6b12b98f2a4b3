package stream

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver/fakeapi"
)

// Tasks waiting for their time do not stall the pool: without lane limits
// a lane's consumer hands out at most MaxInFlight tasks at once, and as
// many tasks scheduled an hour on (any producer may submit them) leave the
// lane's due tasks to be solved now, not in an hour.
func TestScheduledTasksDoNotFillMaxInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{MaxInFlight: 5})
	ctx := testContext(t)
	_, sc := emulator(t, fakeapi.Config{SolveTime: fastSolve(time.Second), TimeScale: 0.001}, 0.001)
	obs, scheduled := observed(EventScheduled)
	b.startWorker(t, WorkerConfig{Solver: sc, Observer: obs})
	tasks := make([]Task, 5)
	for i := range tasks {
		tasks[i] = turnstileTask(fmt.Sprintf("later-%d", i))
		tasks[i].NotBefore = In(time.Hour)
	}
	_, err := b.client.SubmitAll(ctx, tasks)
	require.NoError(t, err)
	for range tasks {
		await(ctx, t, scheduled, "a scheduled event")
	}
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	out, err := b.client.Solve(wctx, turnstileTask("due-now"))
	require.NoError(t, err, "a due task is solved while five wait for an hour at a MaxInFlight of five")
	require.Equal(t, StatusSolved, out.Status)
}
