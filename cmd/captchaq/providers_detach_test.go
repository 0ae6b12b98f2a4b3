package main

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
)

// detachedAtTheFallback starts a worker of 4 threads on a thread plan
// and a per-solve fallback, puts the plan down, and submits n turnstile
// tasks: every one is accepted by the fallback at once, each captcha
// waiting there without a worker thread (max_in_flight's default). It
// stops the worker (stop) once the fallback solved its first captcha (6 s
// at least: three ack waits), none of the tasks redelivered meanwhile;
// a next worker then ends every task, each paid once.
func detachedAtTheFallback(t *testing.T, n int, stop func(first *proc)) {
	t.Helper()
	solve := map[string]fakeapi.Range{solver.KindTurnstile: {Min: 6 * time.Second, Max: 12 * time.Second}}
	tp := startTwoProviders(t, solve, 4)
	client, plan, spare := tp.client, tp.plan, tp.spare
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	// At a poll scale of 0.5 a turnstile captcha is given up 60 s after
	// it was accepted: past the kill, the next worker's wait for the
	// first's heartbeat to lapse and its resume.
	worker := func(name string) *proc {
		return tp.worker(name, "--poll-scale", "0.5", "--threads", "4", "--shutdown-grace", "1s")
	}
	first := worker("detached-first")
	plan.SetFaults(fakeapi.Faults{Outage: true})
	tasks := checkoutTasks("detached", n)
	receipts, err := client.SubmitAll(ctx, tasks)
	require.NoError(t, err)
	require.Eventually(t, func() bool { st := spare.Stats(); return st.Submitted == n && st.Concurrent == n },
		time.Minute, 5*time.Millisecond, "the fallback holds every task's captcha at once (4 threads)")
	require.Eventually(t, func() bool { return spare.Stats().Solved > 0 }, time.Minute, 5*time.Millisecond)
	// Three ack waits and more since the first captcha was accepted: a
	// detached task's lease is kept alive. A lapsed one would have come
	// back to this worker, the only one, which would have said it holds
	// it.
	require.NotContains(t, first.output(), "holds the task: waiting for it", "a detached task's lease lapsed")
	stop(first)
	pending := spare.Stats().Concurrent
	t.Logf("the first worker stopped with %d of %d captchas still at the fallback", pending, n)
	require.Greater(t, pending, n/2)

	worker("detached-next")
	byProvider := map[string]int{}
	require.NoError(t, client.WaitAll(ctx, receipts, func(o stream.Outcome, err error) {
		require.NoError(t, err)
		require.Equal(t, stream.StatusSolved, o.Status, "%+v", o)
		byProvider[o.Provider]++
	}))
	ps, ss := plan.Stats(), spare.Stats()
	t.Logf("plan accepted %d; spare accepted %d, up to %d at once, billed %.5f", ps.Submitted, ss.Submitted, ss.MaxConcurrent, ss.Spent)
	require.Zero(t, ps.Submitted, "the plan was down")
	require.Equal(t, map[string]int{"spare": n}, byProvider)
	require.Equal(t, n, ss.Submitted, "the next worker resumed each captcha: one paid per task")
	require.Empty(t, ss.Repeated())
	require.InDelta(t, float64(n)*1.45/1000, ss.Spent, 1e-9)
	st, err := client.Stats(ctx, 0)
	require.NoError(t, err)
	spend := 0.0
	for _, r := range st.Spend {
		spend += r.Cost
	}
	require.InDelta(t, ss.Spent, spend, 1e-6, "stats' spend is the fallback's bill")
}

// A worker SIGKILLed while 60 captchas wait at the fallback without
// threads: the next worker resumes each, paying for none again.
func TestDetachedCaptchasSurviveAKill(t *testing.T) {
	t.Parallel()
	detachedAtTheFallback(t, 60, func(first *proc) { first.kill() })
}

// A worker stopped (SIGTERM, a grace of 1 s) while 60 captchas wait at
// the fallback without threads: each is handed back with its captcha,
// which the next worker resumes, paying for none again.
func TestDetachedCaptchasHandedBackOnStop(t *testing.T) {
	t.Parallel()
	detachedAtTheFallback(t, 60, func(first *proc) {
		require.NoError(t, first.cmd.Process.Signal(syscall.SIGTERM))
		require.Zero(t, first.wait(time.Minute), first.output())
	})
}
