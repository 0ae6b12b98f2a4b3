package provider_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/streamtest"
)

// outageBacklog runs n reCAPTCHA tasks through the worker of a bed
// whose plan is down (bedPlanDown), and checks that each was solved on
// the fallback and paid once there, none on the plan.
func outageBacklog(t *testing.T, b *bed, n int) {
	t.Helper()
	env, plan, spare := b.env, b.plan, b.spare
	for _, o := range waitAll(t, env.Client, submit(t, env.Client, "crawler", 0, n)) {
		require.Equal(t, stream.StatusSolved, o.Status, "task %s: %s %s", o.ID, o.Error, o.Detail)
		require.Equal(t, "spare", o.Provider)
	}
	ps, ss := plan.api.Stats(), spare.api.Stats()
	require.Zero(t, ps.Submitted, "nothing paid on the primary, which was down")
	require.Equal(t, n, ss.Submitted, "0 lost, 0 paid twice: one captcha per task on the fallback")
	require.Len(t, ss.PerTask, n)
	require.Empty(t, ss.Repeated())
}

// TestFallbackIsNotBoundByTheThreads: while the thread-plan primary is
// down, a backlog of 40 tasks goes to the per-solve fallback, more at
// once than the worker has threads (sized for the plan): a captcha the
// fallback accepted waits there without holding a thread. Before, the
// fallback never had more than the worker's 8 at once, and the backlog
// waited in the queue behind them.
func TestFallbackIsNotBoundByTheThreads(t *testing.T) {
	t.Parallel()
	b := startBed(t, 5*time.Millisecond, time.Second, bedPlanDown())
	const n = 40
	outageBacklog(t, b, n)
	most := b.spare.api.Stats().MaxConcurrent
	t.Logf("the fallback solved up to %d captchas at once, for a worker of %d threads", most, threads)
	require.Greater(t, most, threads, "the fallback's captchas hold no worker thread")
}

// TestMaxInFlightCapsTheFallback: a per-solve provider's max_in_flight
// caps its captchas that wait there without a worker thread; past it a
// captcha keeps its thread, so the fallback has at most threads +
// max_in_flight at once, and more than the threads.
func TestMaxInFlightCapsTheFallback(t *testing.T) {
	t.Parallel()
	const capped = 4
	b := startBed(t, 5*time.Millisecond, time.Second, bedPlanDown(), bedMembers(func(b *bed) { b.spare.member.Entry.MaxInFlight = capped }))
	outageBacklog(t, b, 40)
	most := b.spare.api.Stats().MaxConcurrent
	t.Logf("the fallback solved up to %d captchas at once, for %d threads and max_in_flight %d", most, threads, capped)
	require.Greater(t, most, threads)
	require.LessOrEqual(t, most, threads+capped)
}

// TestPlanQuotaHoldsBesideTheFallback: with a plan-wide quota of 3
// threads (stream.SetPlan) and workers of 8, the primary never has more
// than 3 captchas at once, before, during and after its outage, while
// the fallback takes more than 3 at once during the outage: a captcha at
// the fallback gives its plan thread back. Before, each kept its plan
// thread, and the quota held the fallback to 3.
func TestPlanQuotaHoldsBesideTheFallback(t *testing.T) {
	t.Parallel()
	const quota = 3
	b := startBed(t, 200*time.Millisecond, time.Second, bedEnv(streamtest.WithPlanThreads(quota)))
	env, plan, spare := b.env, b.plan, b.spare
	before := waitAll(t, env.Client, submit(t, env.Client, "shop", 0, 12))
	plan.api.SetFaults(fakeapi.Faults{Outage: true})
	during := waitAll(t, env.Client, submit(t, env.Client, "shop", 12, 24))
	plan.api.SetFaults(fakeapi.Faults{})
	after := waitAll(t, env.Client, submit(t, env.Client, "shop", 36, 12))

	for _, o := range append(append(before, during...), after...) {
		require.Equal(t, stream.StatusSolved, o.Status, "task %s: %s %s", o.ID, o.Error, o.Detail)
	}
	ps, ss := plan.api.Stats(), spare.api.Stats()
	t.Logf("primary: %d accepted, up to %d at once; fallback: %d accepted, up to %d at once", ps.Submitted, ps.MaxConcurrent, ss.Submitted, ss.MaxConcurrent)
	require.LessOrEqual(t, ps.MaxConcurrent, quota, "the plan's quota holds")
	require.Greater(t, ss.MaxConcurrent, quota, "the fallback's captchas hold no plan thread")
	require.Equal(t, 48, ps.Submitted+ss.Submitted, "0 lost, 0 paid twice")
	for key := range ps.PerTask {
		require.NotContains(t, ss.PerTask, key, "a task paid on both providers")
	}
	require.Empty(t, ps.Repeated())
	require.Empty(t, ss.Repeated())
}

// TestQuotaHeldAtASilentPlanFailsOver: with a plan-wide quota of 3 threads
// all held by captchas at the primary when it goes silent, the next tasks
// still go to the fallback: a captcha its provider holds in silence gives
// back its plan thread with its worker thread. Before, the quota had no
// thread to give while the outage lasted, and the fallback took nothing
// (0 of 6 in 20 s). Every task is solved once the primary is back, each
// paid once.
func TestQuotaHeldAtASilentPlanFailsOver(t *testing.T) {
	t.Parallel()
	const quota = 3
	b := startBed(t, 3*time.Second, 100*time.Millisecond, bedEnv(streamtest.WithPlanThreads(quota)))
	env, plan, spare := b.env, b.plan, b.spare
	ids := submit(t, env.Client, "shop", 0, quota)
	require.Eventually(t, func() bool { return plan.api.Stats().Concurrent == quota }, 30*time.Second, time.Millisecond,
		"the quota's threads all hold captchas at the primary")
	plan.api.SetFaults(fakeapi.Faults{Outage: true})
	ids = append(ids, submit(t, env.Client, "shop", quota, 6)...)
	require.Eventually(t, func() bool { return spare.api.Stats().Submitted == 6 }, 20*time.Second, time.Millisecond,
		"the fallback takes the tasks that came during the outage")
	plan.api.SetFaults(fakeapi.Faults{})
	for _, o := range waitAll(t, env.Client, ids) {
		require.Equal(t, stream.StatusSolved, o.Status, "task %s: %s %s", o.ID, o.Error, o.Detail)
	}
	ps, ss := plan.api.Stats(), spare.api.Stats()
	require.Equal(t, quota, ps.Submitted, "the primary's captchas stay there, polled when it is back")
	require.Equal(t, 6, ss.Submitted)
	for key := range ps.PerTask {
		require.NotContains(t, ss.PerTask, key, "a task paid on both providers")
	}
	require.Empty(t, ps.Repeated())
	require.Empty(t, ss.Repeated())
}

// TestThreadsInUseWithHeldAndDetachedCaptchas: the heartbeat's threads in
// use (stats, workers ls) count the threads that hold a task, within
// --threads, while captchas held by a silent plan have given theirs back
// and a fallback's captchas wait without one. All 8 threads hold captchas
// at the plan when it goes silent; the fallback, at max_in_flight 1, then
// takes 4 tasks: one waits there without a thread, three hold one each.
func TestThreadsInUseWithHeldAndDetachedCaptchas(t *testing.T) {
	t.Parallel()
	b := startBed(t, 3*time.Second, 10*time.Second, bedMembers(func(b *bed) { b.spare.member.Entry.MaxInFlight = 1 }),
		bedWorker(stream.WorkerConfig{Threads: threads, Name: "counted"}))
	env, plan, spare := b.env, b.plan, b.spare
	ids := submit(t, env.Client, "shop", 0, threads)
	require.Eventually(t, func() bool { return plan.api.Stats().Concurrent == threads }, 30*time.Second, time.Millisecond,
		"every thread holds a captcha at the plan")
	plan.api.SetFaults(fakeapi.Faults{Outage: true})
	ids = append(ids, submit(t, env.Client, "shop", threads, 4)...)
	require.Eventually(t, func() bool { return spare.api.Stats().Concurrent == 4 }, 30*time.Second, time.Millisecond,
		"the fallback takes the tasks that came during the outage")
	mark := time.Now()
	var info stream.WorkerInfo
	require.Eventually(t, func() bool {
		ws, err := env.Client.Workers(context.Background())
		if err != nil || len(ws) != 1 || !ws[0].At.After(mark) {
			return false
		}
		info = ws[0]
		return true
	}, 30*time.Second, 10*time.Millisecond, "a heartbeat after the fallback took its 4")
	t.Logf("threads in use %d of %d: 8 at the silent plan, 1 detached, 3 on threads", info.InUse, info.Threads)
	require.LessOrEqual(t, info.InUse, threads, "threads in use past --threads")
	require.Equal(t, 3, info.InUse, "the three fallback captchas past max_in_flight hold their threads; the plan's held and the detached one none")
	plan.api.SetFaults(fakeapi.Faults{})
	for _, o := range waitAll(t, env.Client, ids) {
		require.Equal(t, stream.StatusSolved, o.Status, "task %s: %s %s", o.ID, o.Error, o.Detail)
	}
	ps, ss := plan.api.Stats(), spare.api.Stats()
	require.Equal(t, threads, ps.Submitted)
	require.Equal(t, 4, ss.Submitted)
	require.Empty(t, ps.Repeated())
	require.Empty(t, ss.Repeated())
}

// TestPlanBackWithItsQuotaGivenAway: a plan of 3 threads (its emulator
// refuses a 4th captcha at once), a plan-wide quota of 3, every quota
// thread given back by captchas held at the plan while it was silent.
// The plan answers again while those 3 are still being solved, and 6
// more tasks come: the quota hands out 3 threads the plan does not have.
// Every task is solved, each paid once, the plan never past its 3; its
// refusals pay nothing.
func TestPlanBackWithItsQuotaGivenAway(t *testing.T) {
	t.Parallel()
	const quota = 3
	b := startBed(t, 3*time.Second, 100*time.Millisecond, bedPlanThreads(quota), bedEnv(streamtest.WithPlanThreads(quota)))
	env, plan, spare := b.env, b.plan, b.spare
	ids := submit(t, env.Client, "shop", 0, quota)
	require.Eventually(t, func() bool { return plan.api.Stats().Concurrent == quota }, 30*time.Second, time.Millisecond)
	plan.api.SetFaults(fakeapi.Faults{Outage: true})
	ids = append(ids, submit(t, env.Client, "shop", quota, 6)...)
	require.Eventually(t, func() bool { return spare.api.Stats().Submitted == 6 }, 20*time.Second, time.Millisecond)
	probed := plan.api.Stats().Codes["ERROR_WRONG_CAPTCHA_ID"]
	plan.api.SetFaults(fakeapi.Faults{})
	require.Eventually(t, func() bool { return plan.api.Stats().Codes["ERROR_WRONG_CAPTCHA_ID"] > probed }, 30*time.Second, time.Millisecond,
		"the worker's probe finds the plan back")
	require.Equal(t, quota, plan.api.Stats().Concurrent, "the plan's 3 are still being solved as it answers again")
	ids = append(ids, submit(t, env.Client, "shop", quota+6, 6)...)
	for _, o := range waitAll(t, env.Client, ids) {
		require.Equal(t, stream.StatusSolved, o.Status, "task %s: %s %s", o.ID, o.Error, o.Detail)
	}
	ps, ss := plan.api.Stats(), spare.api.Stats()
	t.Logf("plan: %d accepted, up to %d at once, codes %v; fallback: %d accepted, billed %.5f", ps.Submitted, ps.MaxConcurrent, ps.Codes, ss.Submitted, ss.Spent)
	require.LessOrEqual(t, ps.MaxConcurrent, quota)
	require.Equal(t, len(ids), ps.Submitted+ss.Submitted, "0 lost, 0 paid twice")
	for key := range ps.PerTask {
		require.NotContains(t, ss.PerTask, key, "a task paid on both providers")
	}
	require.Empty(t, ps.Repeated())
	require.Empty(t, ss.Repeated())
	require.InDelta(t, float64(ss.Submitted)*spareBilling.Per1000["userrecaptcha"]/1000, ss.Spent, 1e-9, "the fallback bills what it accepted")
}

// TestDetachedPastTheirDeadlineGiveTheirPlacesBack: two tasks whose
// deadline passes while their captchas wait at the fallback without
// threads (max_in_flight 2) end dead, each paid once, and give their
// places back: of 12 tasks after them, 10 have captchas at the fallback
// at once (8 threads, 2 places) beside the 2 given up.
func TestDetachedPastTheirDeadlineGiveTheirPlacesBack(t *testing.T) {
	t.Parallel()
	b := startBed(t, 5*time.Millisecond, 5*time.Second, bedPlanDown(), bedMembers(func(b *bed) { b.spare.member.Entry.MaxInFlight = 2 }))
	env, plan, spare := b.env, b.plan, b.spare
	var late []string
	for i := range 2 {
		r, err := env.Client.Submit(t.Context(), stream.Task{ID: fmt.Sprintf("late-%d", i), Method: "userrecaptcha",
			Params: taskParams(100 + i), Deadline: time.Now().Add(1500 * time.Millisecond)})
		require.NoError(t, err)
		late = append(late, r.ID)
	}
	for _, id := range late {
		_, err := env.Client.Wait(t.Context(), id)
		require.ErrorContains(t, err, "DEADLINE_PASSED")
	}
	require.Equal(t, 2, spare.api.Stats().Concurrent, "the two late captchas are still being solved")
	ids := submit(t, env.Client, "crawler", 0, 12)
	require.Eventually(t, func() bool { return spare.api.Stats().Concurrent == 12 }, 30*time.Second, time.Millisecond,
		"the places of the late tasks were given back")
	for _, o := range waitAll(t, env.Client, ids) {
		require.Equal(t, stream.StatusSolved, o.Status, "task %s: %s %s", o.ID, o.Error, o.Detail)
	}
	ss := spare.api.Stats()
	require.Equal(t, 14, ss.Submitted, "each paid once, the late ones too")
	require.Empty(t, ss.Repeated())
	require.Zero(t, plan.api.Stats().Submitted)
}

// detachedThrough has 10 captchas wait at the fallback without threads
// (2 threads, the plan down), puts faults on the fallback until the
// worker has polled it more times than polls, then lifts them: each task
// is solved on the captcha it has, none submitted again.
func detachedThrough(t *testing.T, faults fakeapi.Faults, polls int) {
	t.Helper()
	b := startBed(t, 5*time.Millisecond, 2*time.Second, bedPlanDown(), bedWorker(stream.WorkerConfig{Threads: 2}))
	env, plan, spare := b.env, b.plan, b.spare
	ids := submit(t, env.Client, "crawler", 0, 10)
	require.Eventually(t, func() bool { return spare.api.Stats().Concurrent == 10 }, 30*time.Second, time.Millisecond)
	polls += spare.api.Stats().ResCalls
	spare.api.SetFaults(faults)
	require.Eventually(t, func() bool { return spare.api.Stats().ResCalls > polls }, 30*time.Second, time.Millisecond,
		"the worker goes on polling through the faults")
	spare.api.SetFaults(fakeapi.Faults{})
	for _, o := range waitAll(t, env.Client, ids) {
		require.Equal(t, stream.StatusSolved, o.Status, "task %s: %s %s", o.ID, o.Error, o.Detail)
	}
	ss := spare.api.Stats()
	t.Logf("fallback: %d accepted, %d polls, codes %v", ss.Submitted, ss.ResCalls, ss.Codes)
	require.Equal(t, 10, ss.Submitted, "each paid once")
	require.Empty(t, ss.Repeated())
	require.Zero(t, plan.api.Stats().Submitted)
}

// TestDetachedThroughAFallbackAnsweringGarbage: the fallback answers
// garbage to every call, 30 polls of its 10 captchas among them.
func TestDetachedThroughAFallbackAnsweringGarbage(t *testing.T) {
	t.Parallel()
	detachedThrough(t, fakeapi.Faults{Garbage: 1}, 30)
}

// TestDetachedThroughAHangingFallback: the fallback holds every reply
// back for 20 s, 10 polls of its 10 captchas among them.
func TestDetachedThroughAHangingFallback(t *testing.T) {
	t.Parallel()
	detachedThrough(t, fakeapi.Faults{Slow: 1, SlowDelay: 20 * time.Second}, 10)
}
