package stream

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream/internal/topology"
)

// A raw producer's task whose use_at or not_before can never be met ends at
// once as invalid, naming the field, and the service never hears of it:
//   - use_at and not_before in different forms (one a duration from
//     submission, one an instant) with not_before after use_at, as invalid
//     as in one form (the worker knows the store time), rather than a solve
//     started after the token was to be used;
//   - either further away than the stream keeps a task, which would wait
//     until the stream drops it, without an outcome;
//   - either after the task's own deadline, as Submit refuses it, rather
//     than a task waiting to expire.
//
// The worker looks at waiting tasks again only a minute on: at once is at
// their first delivery.
func TestRawScheduleNeverMetEndsAtOnce(t *testing.T) {
	t.Parallel()
	b := scheduledSetup(t, Topology{})
	ctx := testContext(t)
	b.worker(t, WorkerConfig{ScheduleCheck: time.Minute})
	js, _ := b.raw(t)
	later := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	soon := time.Now().Add(time.Second).UTC().Format(time.RFC3339Nano)
	deadline := time.Now().Add(time.Minute).UTC().Format(time.RFC3339Nano)
	for _, c := range []struct{ id, fields, field string }{
		{"mixed-1", `"use_at":"1s","not_before":"` + later + `"`, "not_before"},
		{"mixed-2", `"use_at":"` + soon + `","not_before":"1h"`, "not_before"},
		{"far-1", `"use_at":"9999-12-31T23:59:59Z"`, "use_at"},
		{"far-2", `"not_before":"2562047h"`, "not_before"},
		{"far-3", `"use_at":"720h"`, "use_at"},
		{"late-nb", `"not_before":"1h","deadline":"` + deadline + `"`, "not_before"},
		{"late-use", `"use_at":"1h","deadline":"` + deadline + `"`, "use_at"},
	} {
		body := fmt.Sprintf(`{"id":%q,"method":"turnstile","params":{"sitekey":"0x4AAAAAAAB","pageurl":"https://shop.example/a"},%s}`,
			c.id, c.fields)
		publishRaw(ctx, t, js, "captcha.tasks.fast.normal."+c.id, body, map[string]string{"Nats-Msg-Id": c.id})
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		out, err := b.client.Wait(wctx, c.id)
		cancel()
		require.ErrorIs(t, err, ErrNotSolved, c.id)
		require.Equal(t, StatusDead, out.Status, c.id)
		require.Equal(t, "invalid-task", out.Reason, c.id)
		require.Contains(t, out.Detail+out.Error, c.field, c.id)
	}
	require.Zero(t, b.api.Stats().InCalls, "the service never heard of them")
}

// The zero instant is a moment like any other in the JSON form: a use_at
// of 0001-01-01T00:00:00Z is not the same as no use_at.
func TestParseWhenZeroInstant(t *testing.T) {
	t.Parallel()
	_, err := ParseTask([]byte(`{"method":"turnstile","params":{},"use_at":"0001-01-01T00:00:00Z"}`))
	require.ErrorIs(t, err, ErrInvalidTask)
	require.Contains(t, err.Error(), "use_at")
}

// A dead letter of a task that was still waiting for its time (canceled
// while scheduled) replays as a task that waits for the same time and is
// then solved: the replay's deadline counts from when it may start, as a
// submission's does, not from the replay, which would expire it before.
func TestReplayOfScheduledTaskKeepsItsTime(t *testing.T) {
	t.Parallel()
	b := scheduledSetup(t, Topology{})
	ctx := testContext(t)
	// A default deadline of a second, so that a replay deadline counted from
	// the replay runs out before not_before.
	client, err := NewClient(ctx, b.nc, ClientConfig{Name: "short-deadline", DefaultDeadline: time.Second})
	require.NoError(t, err)
	b.worker(t, WorkerConfig{ScheduleCheck: 50 * time.Millisecond})

	notBefore := time.Now().Add(4 * time.Second)
	task := turnstileTask("replay-later")
	task.NotBefore = At(notBefore)
	_, err = client.Submit(ctx, task)
	require.NoError(t, err)
	await(ctx, t, b.scheduled, "the scheduled event")
	_, err = client.Cancel(ctx, task.ID, "changed my mind")
	require.NoError(t, err)
	out, err := client.Wait(ctx, task.ID)
	require.ErrorIs(t, err, ErrNotSolved)
	require.Equal(t, "canceled", out.Reason)

	_, err = client.Replay(ctx, task.ID)
	require.NoError(t, err)
	out, err = client.Wait(ctx, task.ID)
	require.NoError(t, err, "%+v", out)
	require.Equal(t, StatusSolved, out.Status)
	require.False(t, out.SolvedAt.Before(notBefore), "solved at %v, before not_before %v", out.SolvedAt, notBefore)
	require.Equal(t, 1, b.api.Stats().Submitted)
}

// A worker whose clock is three minutes off, ahead or behind, starts a task
// with not_before neither early nor late: not_before is an instant on the
// broker's clock, as the deadline is.
func TestScheduleWorkerClockSkew(t *testing.T) {
	t.Parallel()
	for _, skew := range []time.Duration{3 * time.Minute, -3 * time.Minute} {
		t.Run(skew.String(), func(t *testing.T) {
			t.Parallel()
			b := scheduledSetup(t, Topology{})
			ctx := testContext(t)
			b.worker(t, WorkerConfig{Now: func() time.Time { return time.Now().Add(skew) }, ScheduleCheck: 100 * time.Millisecond})
			notBefore := time.Now().Add(2 * time.Second)
			task := turnstileTask("skewed")
			task.NotBefore = At(notBefore)
			_, err := b.client.Submit(ctx, task)
			require.NoError(t, err)
			wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			out, err := b.client.Wait(wctx, task.ID)
			require.NoError(t, err, "solved within 20 s, not a skew late")
			require.Equal(t, StatusSolved, out.Status)
			require.False(t, time.Now().Before(notBefore), "the answer came before not_before")
			require.Equal(t, 1, b.api.Stats().Submitted)
			require.True(t, time.Now().Before(notBefore.Add(10*time.Second)), "not late by the skew")
		})
	}
}

// Tasks waiting for their time do not starve the due tasks of their lane:
// with a lane limit of two, two normal tasks scheduled an hour on leave the
// lane's due tasks to be solved now, not in an hour.
func TestScheduledTasksDoNotFillTheLaneLimit(t *testing.T) {
	t.Parallel()
	b := scheduledSetup(t, Topology{LaneLimits: map[Lane]int{LaneFast: 2}})
	ctx := testContext(t)
	b.worker(t, WorkerConfig{ScheduleCheck: 100 * time.Millisecond})
	for _, id := range []string{"later-a", "later-b"} {
		task := turnstileTask(id)
		task.NotBefore = In(time.Hour)
		_, err := b.client.Submit(ctx, task)
		require.NoError(t, err)
		await(ctx, t, b.scheduled, "a scheduled event")
	}
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	out, err := b.client.Solve(wctx, turnstileTask("due-now"))
	require.NoError(t, err, "a due task of the lane is solved while two wait for an hour")
	require.Equal(t, StatusSolved, out.Status)
}

// Three hundred tasks waiting for their time neither make the worker spin
// (each is delivered once, then not again before ScheduleCheck) nor hold
// up the due tasks, which are solved meanwhile as on an empty queue.
func TestManyScheduledTasksNoSpin(t *testing.T) {
	t.Parallel()
	b := scheduledSetup(t, Topology{})
	ctx := testContext(t)
	b.worker(t, WorkerConfig{Threads: 4})
	const waiting = 300
	tasks := make([]Task, waiting)
	for i := range tasks {
		tasks[i] = turnstileTask(fmt.Sprintf("wait-%03d", i))
		tasks[i].NotBefore = In(time.Hour)
	}
	_, err := b.client.SubmitAll(ctx, tasks)
	require.NoError(t, err)
	for range waiting {
		await(ctx, t, b.scheduled, "a scheduled event")
	}
	start := time.Now()
	for i := range 5 {
		out, err := b.client.Solve(ctx, turnstileTask(fmt.Sprintf("due-%d", i)))
		require.NoError(t, err)
		require.Equal(t, StatusSolved, out.Status)
	}
	took := time.Since(start)
	js, _ := b.raw(t)
	c, err := js.Consumer(ctx, b.top.withDefaults().Stream, topology.ConsumerName(LaneFast, PriorityNormal))
	require.NoError(t, err)
	info, err := c.Info(ctx)
	require.NoError(t, err)
	t.Logf("5 due tasks solved in %v beside %d waiting; consumer delivered %d, redelivered %d, pending ack %d",
		took, waiting, info.Delivered.Consumer, info.NumRedelivered, info.NumAckPending)
	require.LessOrEqual(t, info.Delivered.Consumer, uint64(waiting+5+10), "each waiting task delivered once in the first minute")
	require.Less(t, took, 10*time.Second)
}

// Whatever a raw producer puts in use_at or not_before, the worker ends the
// task at once as invalid naming the field, and the service never hears of
// it, a deadline before not_before too.
func TestRawScheduleBadValues(t *testing.T) {
	t.Parallel()
	b := scheduledSetup(t, Topology{})
	ctx := testContext(t)
	b.worker(t, WorkerConfig{ScheduleCheck: 50 * time.Millisecond})
	js, _ := b.raw(t)
	cases := []struct{ field, value string }{
		{"use_at", `null`}, {"use_at", `42`}, {"use_at", `{}`}, {"use_at", `[]`}, {"use_at", `true`},
		{"use_at", `"0s"`}, {"not_before", `"-1s"`}, {"not_before", `"soon"`}, {"use_at", `"1e400h"`},
		{"use_at", `"99999999999h"`}, {"not_before", `"2026-13-45T99:00:00Z"`}, {"use_at", `""`},
		{"not_before", `"0001-01-01T00:00:00Z"`},
	}
	for i, c := range cases {
		id := fmt.Sprintf("bad-%d", i)
		body := fmt.Sprintf(`{"id":%q,"method":"turnstile","params":{"sitekey":"0x4AAAAAAAB","pageurl":"https://shop.example/a"},%q:%s}`, id, c.field, c.value)
		publishRaw(ctx, t, js, "captcha.tasks.fast.normal."+id, body, map[string]string{"Nats-Msg-Id": id})
	}
	both := `{"id":"bad-both","method":"turnstile","params":{"sitekey":"0x4AAAAAAAB","pageurl":"https://shop.example/a"},"use_at":"1m","not_before":"2m"}`
	publishRaw(ctx, t, js, "captcha.tasks.fast.normal.bad-both", both, map[string]string{"Nats-Msg-Id": "bad-both"})
	cases = append(cases, struct{ field, value string }{"not_before", "both"})
	for i, c := range cases {
		id := fmt.Sprintf("bad-%d", i)
		if c.value == "both" {
			id = "bad-both"
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		out, err := b.client.Wait(wctx, id)
		cancel()
		require.ErrorIs(t, err, ErrNotSolved, "%s %s", c.field, c.value)
		require.Equal(t, "invalid-task", out.Reason, "%s %s", c.field, c.value)
		require.Contains(t, out.Detail+out.Error, c.field, "%s %s", c.field, c.value)
	}

	deadline := time.Now().Add(time.Second).UTC().Format(time.RFC3339Nano)
	early := fmt.Sprintf(`{"id":"early-deadline","method":"turnstile","params":{"sitekey":"0x4AAAAAAAB","pageurl":"https://shop.example/a"},"not_before":"1h","deadline":%q}`, deadline)
	publishRaw(ctx, t, js, "captcha.tasks.fast.normal.early-deadline", early, map[string]string{"Nats-Msg-Id": "early-deadline"})
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := b.client.Wait(wctx, "early-deadline")
	require.ErrorIs(t, err, ErrNotSolved)
	require.Equal(t, "invalid-task", out.Reason)
	require.Contains(t, out.Detail, "not_before")
	require.Zero(t, b.api.Stats().InCalls, "the service never heard of them")
}

// A second submission of an id with another use_at or not_before is the
// duplicate it is (the first stands, and the task is solved once), and its
// caller is told so, as Solve is told of a duplicate that is not its own:
// ErrIDTaken, naming the field. The same submission again (a retry, "in
// 1s" again a moment later) is a duplicate without an error.
func TestDuplicateSubmitOtherUseAt(t *testing.T) {
	t.Parallel()
	b := scheduledSetup(t, Topology{})
	ctx := testContext(t)
	first := turnstileTask("dup")
	first.UseAt = In(time.Second)
	r1, err := b.client.Submit(ctx, first)
	require.NoError(t, err)

	again, err := b.client.Submit(ctx, first)
	require.NoError(t, err, "the same submission again")
	require.True(t, again.Duplicate)

	for field, task := range map[string]Task{"use_at": turnstileTask("dup"), "not_before": turnstileTask("dup")} {
		task.UseAt = In(time.Hour)
		if field == "not_before" {
			task.UseAt, task.NotBefore = In(time.Second), In(500*time.Millisecond)
		}
		r2, err := b.client.Submit(ctx, task)
		require.ErrorIs(t, err, ErrIDTaken, field)
		require.ErrorContains(t, err, field)
		require.True(t, r2.Duplicate, "the second submission is a duplicate")
		require.Equal(t, r1.Seq, r2.Seq)
		rs, err := b.client.SubmitAll(ctx, []Task{task})
		require.ErrorIs(t, err, ErrIDTaken, field)
		require.ErrorContains(t, err, field)
		require.Len(t, rs, 1)
		require.True(t, rs[0].Duplicate)
	}

	// The worker starts once the duplicates were compared with the stored
	// task (a task that ended is erased, and nothing is compared then).
	b.worker(t, WorkerConfig{ScheduleCheck: 100 * time.Millisecond})
	out, err := b.client.Wait(ctx, "dup")
	require.NoError(t, err)
	require.Equal(t, StatusSolved, out.Status)
	require.WithinDuration(t, time.Now(), out.UseAt, 30*time.Second, "the first use_at stands")
	require.Equal(t, 1, b.api.Stats().Submitted)
}

// An outcome's solved_at is on the same clock as its use_at and
// expires_at (the broker's), so that a producer comparing them learns
// whether the token arrived before use, whatever the worker's clock says.
func TestSolvedAtOnTheBrokersClock(t *testing.T) {
	t.Parallel()
	b := scheduledSetup(t, Topology{})
	ctx := testContext(t)
	b.worker(t, WorkerConfig{Now: func() time.Time { return time.Now().Add(3 * time.Minute) }})
	task := turnstileTask("skewed-jit")
	task.UseAt = In(3 * time.Second)
	r, err := b.client.Submit(ctx, task)
	require.NoError(t, err)
	out, err := b.client.Wait(ctx, r.ID)
	require.NoError(t, err)
	now := time.Now()
	require.WithinDuration(t, now, out.SolvedAt, 10*time.Second, "solved_at on the broker's clock (the worker's is 3 min ahead)")
	require.WithinDuration(t, out.UseAt, out.SolvedAt, 10*time.Second, "solved_at and use_at on one clock")
}
