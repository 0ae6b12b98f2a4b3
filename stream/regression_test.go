package stream

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream/wire"
)

// A slow-lane retry that comes due while a fast-lane backlog keeps the only
// thread busy runs soon, not after the whole backlog.
func TestRetryInOneLaneIsNotStarvedByTheOther(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	var slowCalls atomic.Int32
	var fastDone atomic.Int32
	var secondSlowAtFast atomic.Int32
	secondSlowAtFast.Store(-1)
	sv := solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
		if req.Method == "userrecaptcha" {
			if slowCalls.Add(1) == 1 {
				return solver.Answer{}, apiErr("ERROR_SERVER_ERROR", retry.Transient)
			}
			secondSlowAtFast.Store(fastDone.Load())
			return tokenSolver().Solve(ctx, req)
		}
		time.Sleep(20 * time.Millisecond) // the fast captcha's solve time
		fastDone.Add(1)
		return tokenSolver().Solve(ctx, req)
	})
	// Retry delay 300ms >= IdleCheck 100ms: no lookAgainAfter.
	b.startWorker(t, WorkerConfig{Solver: sv, Threads: 1, IdleCheck: 100 * time.Millisecond,
		Policy: retry.Policy{InitialInterval: 300 * time.Millisecond, MaxInterval: 300 * time.Millisecond, NoJitter: true}})
	slow := recaptchaTask("slow1")
	_, err := b.client.Submit(ctx, slow)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return slowCalls.Load() == 1 }, 5*time.Second, 5*time.Millisecond)
	fast := make([]Task, 150) // ~3 s of work at 20 ms each
	for i := range fast {
		fast[i] = turnstileTask(fmt.Sprintf("f%03d", i))
	}
	_, err = b.client.SubmitAll(ctx, fast)
	require.NoError(t, err)
	_, err = b.client.Wait(ctx, "slow1")
	require.NoError(t, err)
	require.Less(t, int(secondSlowAtFast.Load()), 60, "retry due after 300ms waited behind the whole fast backlog")
}

// Two pending dead letters of one id (the id was submitted again after the
// duplicate window): ReplayAll replays only the latest, so one generation
// runs, within its own budget.
func TestReplayAllRunsOneGenerationPerID(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	var permanent atomic.Bool
	permanent.Store(true)
	var calls atomic.Int32
	b.startWorker(t, WorkerConfig{Threads: 4, Solver: solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
		calls.Add(1)
		if permanent.Load() {
			return solver.Answer{}, apiErr("ERROR_PAGEURL", retry.Permanent)
		}
		return solver.Answer{}, apiErr("ERROR_SERVER_ERROR", retry.Transient)
	})})
	r1, err := b.client.Submit(ctx, turnstileTask("g"))
	require.NoError(t, err)
	_, err = b.client.waitGen(ctx, "g", r1.Seq)
	require.ErrorIs(t, err, ErrNotSolved)
	// The same id again, as a producer would after the duplicate window.
	js, err := jetstream.New(b.nc)
	require.NoError(t, err)
	body, err := json.Marshal(turnstileTask("g"))
	require.NoError(t, err)
	ack, err := js.Publish(ctx, "captcha.tasks.fast.normal.g", body, jetstream.WithMsgID("g-again"))
	require.NoError(t, err)
	_, err = b.client.waitGen(ctx, "g", ack.Sequence)
	require.ErrorIs(t, err, ErrNotSolved)

	permanent.Store(false)
	calls.Store(0)
	rs, err := b.client.ReplayAll(ctx, DeadFilter{})
	require.NoError(t, err)
	require.Len(t, rs, 1, "one generation per id")
	out, err := b.client.waitGen(ctx, "g", rs[0].Seq)
	require.ErrorIs(t, err, ErrNotSolved)
	require.Equal(t, string(retry.ReasonAttemptsExhausted), out.Reason)
	require.Equal(t, int32(retry.DefaultMaxAttempts), calls.Load(), "the budget of one generation, not shared")

	// The older letter cannot be replayed over the newer submission.
	old, err := b.client.DeadLetters(ctx, DeadFilter{Pending: true})
	require.NoError(t, err)
	for _, d := range old {
		if d.Gen == r1.Seq {
			_, err := b.client.replay(ctx, d)
			require.ErrorIs(t, err, ErrSuperseded)
		}
	}
}

// A solve whose outcome was never stored (its worker died in between, and the
// token expired before the task came back) ends Wait at the token's expiry
// instead of leaving it waiting for a message that will not come.
func TestWaitEndsAtTokenExpiryWithoutOutcome(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	r, err := b.client.Submit(ctx, turnstileTask("lost"))
	require.NoError(t, err)
	js, err := jetstream.New(b.nc)
	require.NoError(t, err)
	b0, err := json.Marshal(Event{Kind: EventSolved, Gen: r.Seq, Attempts: 1,
		At: time.Now(), ExpiresAt: time.Now().Add(300 * time.Millisecond)})
	require.NoError(t, err)
	_, err = js.Publish(ctx, wire.EventSubject("lost"), b0)
	require.NoError(t, err)
	out, err := b.client.Wait(ctx, r.ID)
	require.ErrorIs(t, err, ErrTokenExpired)
	require.Equal(t, StatusSolved, out.Status)
}
