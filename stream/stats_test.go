package stream

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream/wire"
)

func TestStatsCountsQueuesPlanAndOutcomes(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	js, err := jetstream.New(b.nc)
	require.NoError(t, err)
	require.NoError(t, SetPlan(ctx, js.Conn(), Topology{}, 3))

	// First a batch that ends: three solved, one solved on its second
	// attempt, one dead.
	var flaky atomic.Bool
	solve := solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
		switch req.Params["sitekey"] {
		case "bad":
			return solver.Answer{}, &solver.Error{Code: "ERROR_PAGEURL", Class: retry.Permanent, Op: "in.php"}
		case "flaky":
			if flaky.CompareAndSwap(false, true) {
				return solver.Answer{}, &solver.Error{Code: "ERROR_SERVER_ERROR", Class: retry.Transient, Op: "in.php"}
			}
		}
		b, _ := json.Marshal("tok")
		return solver.Answer{Solution: b}, nil
	})
	a := b.startWorker(t, WorkerConfig{Solver: solve, Threads: 2})
	tasks := []Task{turnstileTask("s1"), turnstileTask("s2"), turnstileTask("s3"), turnstileTask("s4"), turnstileTask("s5")}
	tasks[3].Params["sitekey"] = "flaky"
	tasks[4].Params["sitekey"] = "bad"
	receipts, err := b.client.SubmitAll(ctx, tasks)
	require.NoError(t, err)
	require.NoError(t, b.client.WaitAll(ctx, receipts, func(Outcome, error) {}))
	a.stop()
	require.NoError(t, <-a.done)
	a.done <- nil

	// Then one task in flight on a busy worker and three queued behind it.
	started := make(chan string, 1)
	b.startWorker(t, WorkerConfig{Solver: blockingSolver(started), Threads: 1, ShutdownGrace: 50 * time.Millisecond})
	_, err = b.client.Submit(ctx, turnstileTask("busy"))
	require.NoError(t, err)
	<-started
	queued := []Task{turnstileTask("q1"), turnstileTask("q2"), recaptchaTask("q3")}
	queued[2].Priority = "high"
	_, err = b.client.SubmitAll(ctx, queued)
	require.NoError(t, err)

	// The server acknowledges a publish once the stream stored it; its
	// consumers count the new message a moment later. Wait for them.
	var st Stats
	require.Eventually(t, func() bool {
		st, err = b.client.Stats(ctx, time.Hour)
		return err != nil || st.Queued == 3
	}, 5*time.Second, time.Millisecond, "the three queued tasks were never counted")
	require.NoError(t, err)
	require.Equal(t, 1, st.InFlight)
	require.Equal(t, 3, st.PlanThreads)
	require.Equal(t, 1, st.Solving, "the busy solve")
	require.Positive(t, st.OldestQueued)
	for _, q := range st.Queues {
		switch {
		case q.Lane == LaneFast && q.Priority == wire.PriorityNormal:
			require.Equal(t, uint64(2), q.Queued)
			require.Equal(t, 1, q.InFlight)
			require.Equal(t, 1, q.Solving, "the busy solve, counted in its queue")
			require.Zero(t, q.Retrying)
		case q.Lane == LaneSlow && q.Priority == wire.PriorityHigh:
			require.Equal(t, uint64(1), q.Queued)
			require.Positive(t, q.OldestQueued)
		default:
			require.Zero(t, q.Queued, "%s %s", q.Lane, q.Priority)
		}
	}
	require.Equal(t, 4, st.Solved)
	require.Equal(t, 1, st.Dead)
	require.Equal(t, 1, st.Failed, "the flaky task's first attempt")
	require.Equal(t, map[string]int{"permanent": 1}, st.ByReason)
	ts := st.ByMethod["turnstile"]
	require.Equal(t, 4, ts.Solved)
	require.Equal(t, 1, ts.Dead)
	require.GreaterOrEqual(t, ts.P95, ts.P50)
	require.Equal(t, 4, st.LastMinute)
	require.InDelta(t, 4.0, st.PerMinute, 0.01, "four solves in under a minute: a minute is the shortest span")
	for _, q := range st.Queues {
		require.Zero(t, q.LaneLimit, "no lane limit set")
		require.False(t, q.Paused)
	}
	running := 0
	for _, w := range st.Workers {
		if !w.Stopped {
			running++
		}
	}
	require.Equal(t, 1, running, "the running worker announced itself (and the one stopped before it said so)")

	// Half an hour later with nothing solved since, the rate while solving
	// is the same: it does not decay while idle.
	later, err := NewClient(ctx, b.nc, ClientConfig{Now: func() time.Time { return time.Now().Add(30 * time.Minute) }})
	require.NoError(t, err)
	idle, err := later.Stats(ctx, 0)
	require.NoError(t, err)
	require.InDelta(t, st.PerMinute, idle.PerMinute, 0.01)
	require.Equal(t, st.LastSolve, idle.LastSolve)
	require.Zero(t, idle.LastMinute)

	b2, err := json.Marshal(st)
	require.NoError(t, err)
	require.Contains(t, string(b2), `"plan_threads":3`)
	require.Contains(t, string(b2), `"failed_attempts":1`)
}

// A task whose retry delay ended while its lane is paused waits to be taken
// again: stats counts it as queued, as Tasks lists it, so that the columns
// of stats add up to what task ls and the dashboard show.
func TestStatsCountsRetriesDueInAPausedLaneAsQueued(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	failed := make(chan string, 4)
	solve := solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
		failed <- req.Params["sitekey"]
		return solver.Answer{}, &solver.Error{Code: "ERROR_CAPTCHA_UNSOLVABLE", Class: retry.Transient, Op: "res.php"}
	})
	const delay = 300 * time.Millisecond
	b.startWorker(t, WorkerConfig{Solver: solve, Threads: 4, Policy: retry.Policy{InitialInterval: delay, NoJitter: true}})
	// Paused before the tasks come: nothing is taken, the first waits.
	require.NoError(t, b.client.PauseLane(ctx, LaneSlow, time.Now().Add(time.Hour)))
	_, err := b.client.SubmitAll(ctx, []Task{turnstileTask("r1"), turnstileTask("r2"), recaptchaTask("w1")})
	require.NoError(t, err)
	<-failed
	<-failed
	// Both fast tasks wait out their retry delay; the fast lane is paused
	// before it ends, so they are not taken again.
	require.NoError(t, b.client.PauseLane(ctx, LaneFast, time.Now().Add(time.Hour)))
	var ts []TaskInfo
	require.Eventually(t, func() bool {
		ts, err = b.client.Tasks(ctx, TaskFilter{})
		require.NoError(t, err)
		queued := 0
		for _, ti := range ts {
			if ti.Status == TaskQueued {
				queued++
			}
		}
		return queued == 3
	}, 10*time.Second, 10*time.Millisecond, "the retries' delay never ended: %+v", ts)
	st, err := b.client.Stats(ctx, time.Hour)
	require.NoError(t, err)
	require.Equal(t, uint64(3), st.Queued, "every waiting task is in a column: %+v", st.Queues)
	require.Zero(t, st.Solving)
	require.Zero(t, st.Retrying)
	for _, q := range st.Queues {
		if q.Lane == LaneFast && q.Priority == wire.PriorityNormal {
			require.Equal(t, uint64(2), q.Queued, "%+v", q)
		}
	}

	// Two hours on, with the lanes still paused, the retries' events are
	// older than the hour of stats' window: they are still counted.
	later, err := NewClient(ctx, b.nc, ClientConfig{Now: func() time.Time { return time.Now().Add(2 * time.Hour) }})
	require.NoError(t, err)
	st, err = later.Stats(ctx, time.Hour)
	require.NoError(t, err)
	require.Equal(t, uint64(3), st.Queued, "every waiting task is in a column two hours on: %+v", st.Queues)
	require.Zero(t, st.Solving)
	require.Zero(t, st.Retrying)
	require.Zero(t, st.Failed, "the retries happened before the window")
}
