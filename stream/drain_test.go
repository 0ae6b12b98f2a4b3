package stream

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream/wire"
)

// Tasks queued among forged copies, more of them than a worker has
// threads: the worker takes the copies in bulk (dispatcher.DrainBatch)
// and hands the tasks past its free threads back to the consumer, and
// takes them again at once, not at its idle check (a minute here): each
// task is solved once, paid once, and every forged copy ends.
func TestDrainedBatchesHandTasksBackUnpaid(t *testing.T) {
	t.Parallel()
	a := attackSetup(t)
	ctx := testContext(t)
	api, sc := emulator(t, fakeapi.Config{SolveTime: fastSolve(100 * time.Millisecond)}, 0.01)
	const tasks, every = 24, 10
	var gens []uint64
	for i := range tasks * every {
		if i%every == every/2 {
			r, err := a.victim.Submit(ctx, turnstileTask(fmt.Sprintf("mixed-%d", i)))
			require.NoError(t, err)
			gens = append(gens, r.Seq)
			continue
		}
		_, err := a.attacker.PublishMsg(ctx, forgedMsg(fmt.Sprintf("copy-%d", i%7), i))
		require.NoError(t, err)
	}
	var forged atomic.Int64
	a.floodWorkerIdle(t, sc, &forged, time.Minute) // 4 threads
	wctx, cancel := context.WithTimeout(ctx, floodBound)
	defer cancel()
	for k, gen := range gens {
		id := fmt.Sprintf("mixed-%d", k*every+every/2)
		out, err := a.victim.waitGen(wctx, id, gen)
		require.NoError(t, err, id)
		require.Equal(t, StatusSolved, out.Status, id)
		require.Len(t, outcomesOf(ctx, t, a.astream, id, gen), 1, "one outcome of %s", id)
	}
	require.Eventually(t, func() bool { return forged.Load() == tasks*(every-1) }, floodBound, 10*time.Millisecond, "every forged copy ends")
	require.Equal(t, tasks, api.Stats().Submitted, "each task paid once")
	require.Eventually(t, func() bool {
		info, err := a.astream.Info(ctx, jetstream.WithSubjectFilter(wire.SubjectTasks+".>"))
		return err == nil && len(info.State.Subjects) == 0
	}, floodBound, 50*time.Millisecond, "no task message left")
}
