package stream

import (
	"context"
	"sync/atomic"
	"time"

	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream/wire"

	"github.com/stretchr/testify/require"
)

func TestSubmitSolveOutcome(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	b.startWorker(t, WorkerConfig{Solver: tokenSolver()})
	ctx := testContext(t)

	out, err := b.client.Solve(ctx, turnstileTask("t1"))
	require.NoError(t, err)
	require.Equal(t, StatusSolved, out.Status)
	require.Equal(t, "tok-0x4AAAAAAAB", out.Text())
	require.Equal(t, 1, out.Attempts)
	require.False(t, out.ExpiresAt.IsZero())
}

func TestSameIDSubmittedTwiceIsOneTask(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	r1, err := b.client.Submit(ctx, turnstileTask("dup"))
	require.NoError(t, err)
	r2, err := b.client.Submit(ctx, turnstileTask("dup"))
	require.NoError(t, err)
	require.False(t, r1.Duplicate)
	require.True(t, r2.Duplicate)
	require.Equal(t, r1.Seq, r2.Seq)
	info, err := b.client.s.Info(ctx, jetstream.WithSubjectFilter(wire.SubjectAllTasks))
	require.NoError(t, err)
	require.Equal(t, map[string]uint64{wire.TaskSubject(LaneFast, wire.PriorityNormal, "dup"): 1}, info.State.Subjects)

	var solves atomic.Int32
	b.startWorker(t, WorkerConfig{Solver: solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
		solves.Add(1)
		return tokenSolver().Solve(ctx, req)
	})})
	out, err := b.client.Wait(ctx, "dup")
	require.NoError(t, err)
	require.Equal(t, StatusSolved, out.Status)
	require.Equal(t, int32(1), solves.Load())
}

func TestWaiterAfterOutcomeExists(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	rw := b.startWorker(t, WorkerConfig{Solver: tokenSolver()})
	r, err := b.client.Submit(ctx, turnstileTask("late"))
	require.NoError(t, err)
	_, err = b.client.Wait(ctx, r.ID)
	require.NoError(t, err)
	rw.stop()
	require.NoError(t, <-rw.done)
	rw.done <- nil // for the cleanup

	// A second waiter, long after the outcome was published.
	out, err := b.client.Wait(ctx, "late")
	require.NoError(t, err)
	require.Equal(t, "tok-0x4AAAAAAAB", out.Text())
}

func TestWaitUnknownTask(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	_, err := b.client.Wait(testContext(t), "never-submitted")
	require.ErrorIs(t, err, ErrNotFound)
	_, err = b.client.Wait(testContext(t), "bad.id")
	require.ErrorContains(t, err, "only letters")
}

func TestInvalidTasksRejectedAndNothingPublished(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	tasks := []Task{
		turnstileTask("ok-1"),
		{ID: "no-url", Method: "turnstile", Params: Params{"sitekey": "0x4AAAAAAAB"}},
		{ID: "bad-method", Method: "telepathy", Params: Params{}},
		{ID: "bad id", Method: "turnstile", Params: Params{"sitekey": "k", "pageurl": "https://a.example/"}},
		{ID: "late", Method: "turnstile", Params: Params{"sitekey": "0x4AAAAAAAB", "pageurl": "https://a.example/"}, Deadline: time.Now().Add(-time.Minute)},
		{ID: "prio", Method: "turnstile", Params: Params{"sitekey": "0x4AAAAAAAB", "pageurl": "https://a.example/"}, Priority: "urgent"},
	}
	_, err := b.client.SubmitAll(ctx, tasks)
	require.ErrorIs(t, err, wire.ErrInvalidTask)
	msg := err.Error()
	for _, want := range []string{"line 2 (id no-url)", "pageurl", "line 3 (id bad-method)", "method", "line 4", "only letters",
		"line 5 (id late)", "deadline", "line 6 (id prio)", "priority"} {
		require.Contains(t, msg, want)
	}
	require.NotContains(t, msg, "line 1")
	info, err := b.client.s.Info(ctx, jetstream.WithSubjectFilter(wire.SubjectRoot+".>"))
	require.NoError(t, err)
	require.Equal(t, map[string]uint64{wire.SubjectAnchor: 1}, info.State.Subjects, "nothing of an invalid batch is published")
}

func TestParseTaskRejectsUnknownFieldsAndBadParams(t *testing.T) {
	t.Parallel()
	_, err := ParseTask([]byte(`{"method":"turnstile","prority":"high","params":{}}`))
	require.ErrorContains(t, err, "prority")
	_, err = ParseTask([]byte(`{"method":"turnstile","params":{"sitekey":[1]}}`))
	require.ErrorContains(t, err, "params.sitekey")
	task, err := ParseTask([]byte(`{"method":"userrecaptcha","params":{"min_score":0.3,"invisible":true}}`))
	require.NoError(t, err)
	require.Equal(t, "0.3", task.Params["min_score"])
	require.Equal(t, "1", task.Params["invisible"])
}
