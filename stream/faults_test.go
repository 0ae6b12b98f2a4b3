package stream

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream/wire"
)

// The retry paths, end to end: a real worker, real JetStream and
// real HTTP to the service's emulator (solver/fakeapi) with injected faults.
// Solve times are tens of milliseconds and the client polls at 1/1000 of the
// production schedule (a 5-s first poll is 5 ms).

// fastSolve makes every captcha of every kind take d at the emulator.
func fastSolve(d time.Duration) map[string]fakeapi.Range {
	out := map[string]fakeapi.Range{}
	for kind := range fakeapi.DefaultSolveTimes() {
		out[kind] = fixed(d)
	}
	return out
}

// kinds returns the kinds of evs, in order.
func kinds(evs []Event) []EventKind {
	out := make([]EventKind, len(evs))
	for i, ev := range evs {
		out[i] = ev.Kind
	}
	return out
}

// requireRetriesWaited checks every retry event of a generation: it names
// the failed attempt, carries the policy's delay for it, and the next
// attempt started no sooner than that delay after it.
func requireRetriesWaited(t *testing.T, p retry.Policy, evs []Event) {
	t.Helper()
	for i, ev := range evs {
		if ev.Kind != EventRetry {
			continue
		}
		require.Equal(t, p.Delay(ev.Attempts).Milliseconds(), ev.DelayMS, "retry after attempt %d: %+v", ev.Attempts, ev)
		require.Less(t, i+1, len(evs), "a retry is followed by an attempt: %v", kinds(evs))
		next := evs[i+1]
		require.Equal(t, EventAttempt, next.Kind, "%v", kinds(evs))
		require.Equal(t, ev.Attempts+1, next.Attempts)
		require.GreaterOrEqual(t, next.At.Sub(ev.At), time.Duration(ev.DelayMS)*time.Millisecond,
			"attempt %d started before the retry delay was over", next.Attempts)
	}
}

func TestFaultTransientErrorsRecover(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	// Three replies in a row that are no word from the service begin an
	// outage, and at 42 % such replies that happens every few calls: a
	// task that meets several in a row snoozes 5, 10, 20 s … (a capacity
	// wait, no attempt spent), so the run takes 5–40 s, not the usual
	// minute's bound.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// About 42% of all requests, in.php and res.php alike, fail: an HTTP 500
	// page, an HTML page with status 200, or a truncated body.
	api, sc := emulator(t, fakeapi.Config{Seed: 4, SolveTime: fastSolve(10 * time.Millisecond),
		Faults: fakeapi.Faults{HTTP500: 0.2, HTML: 0.15, Garbage: 0.15}}, 0.001)
	// A budget large enough that no task runs out of it (0.45^20 per task),
	// exact delays so that the events can be checked against the policy.
	p := retry.Policy{MaxAttempts: 20, InitialInterval: 10 * time.Millisecond, MaxInterval: 40 * time.Millisecond, NoJitter: true}
	b.startWorker(t, WorkerConfig{Solver: sc, Threads: 4, Policy: p})

	tasks := make([]Task, 20)
	for i := range tasks {
		tasks[i] = turnstileTask(fmt.Sprintf("t%02d", i))
	}
	receipts, err := b.client.SubmitAll(ctx, tasks)
	require.NoError(t, err)
	solved := map[string]Outcome{}
	require.NoError(t, b.client.WaitAll(ctx, receipts, func(o Outcome, err error) {
		require.NoError(t, err, "task %s: %+v", o.ID, o)
		solved[o.ID] = o
	}))
	require.Len(t, solved, len(tasks))

	retries, attempts := 0, 0
	for id, out := range solved {
		require.Equal(t, StatusSolved, out.Status, id)
		require.NotEmpty(t, out.Solution, id)
		evs := b.events(t, id)
		n, snoozed := 0, 0
		for _, ev := range evs {
			switch ev.Kind {
			case EventAttempt:
				n++
			case EventAccepted, EventHeld, EventAnswered:
				// The captcha of an attempt, and its polls failing and
				// answered again: kept, not paid again.
				require.NotEmpty(t, ev.CaptchaID, "%s: %+v", id, ev)
			case EventRetry:
				retries++
				require.Equal(t, retry.Transient.String(), ev.Class, "%s: %+v", id, ev)
				require.Contains(t, []string{solver.HTTPCode(500), solver.CodeBadReply}, ev.Code, "%s: %+v", id, ev)
			case EventSnooze:
				// Three replies in a row that are no word from the
				// service (HTTP 5xx, an HTML page, a body that cannot be
				// read) begin an outage: the third, and in.php during it
				// (which sends nothing), snooze the task as a capacity
				// wait, spending no attempt.
				require.Equal(t, retry.Capacity.String(), ev.Class, "%s: %+v", id, ev)
				require.Contains(t, []string{solver.CodeUnreachable, solver.HTTPCode(500), solver.CodeBadReply}, ev.Code, "%s: %+v", id, ev)
				snoozed++
			default:
				t.Fatalf("%s: only attempts, retries and outage snoozes, then the outcome: %v", id, kinds(evs))
			}
		}
		// The solving attempt and the news of its captcha are the last
		// events; its outcome records the solve.
		lastAttempt := -1
		for i, ev := range evs {
			if ev.Kind == EventAttempt {
				lastAttempt = i
			}
		}
		require.Greater(t, len(evs)-1, lastAttempt, "%s: %v", id, kinds(evs))
		require.Equal(t, EventAccepted, evs[lastAttempt+1].Kind, "%s: %v", id, kinds(evs))
		for _, ev := range evs[lastAttempt+1:] {
			require.Equal(t, out.CaptchaID, ev.CaptchaID, "%s: %v", id, kinds(evs))
		}
		require.Equal(t, n-snoozed, out.Attempts, "%s: the outcome counts every attempt but those the outage snoozed: %v", id, kinds(evs))
		requireRetriesWaited(t, p, evs)
		require.Zero(t, b.count(t, wire.DeadSubject(id)), id)
		attempts += n
	}
	st := api.Stats()
	t.Logf("%d tasks, %d attempts, %d retries; emulator: %d in.php, %d res.php, faults %v", len(tasks), attempts, retries,
		st.InCalls, st.ResCalls, st.Codes)
	require.Positive(t, retries, "with 42%% of the requests failing some attempt must have failed")
	for _, code := range []string{fakeapi.CodeHTTP500, fakeapi.CodeHTML, fakeapi.CodeGarbage} {
		require.Positive(t, st.Codes[code], "fault %s was injected", code)
	}
	// Every task's answer was picked up at the service; beyond those, only
	// a captcha whose attempt failed can have been picked up too: a batch
	// poll in flight may list it ready just as its waiter, after failed
	// polls of its own, gives it up (an answer no outcome uses).
	require.GreaterOrEqual(t, st.Solved, len(tasks), "each task's answer picked up")
	require.LessOrEqual(t, st.Solved, len(tasks)+retries, "no answer picked up outside a failed attempt")
	require.LessOrEqual(t, st.Submitted, attempts, "no captcha reached the service outside a recorded attempt")
}

func TestFaultPermanentErrorDeadLettersOnFirstAttempt(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name          string
		rule          fakeapi.Rule
		wantSubmitted int // captchas the service accepted for the bad task
	}{
		{"rejected by in.php", fakeapi.Rule{Param: "pageurl", Contains: "bad.example", Code: "ERROR_PAGEURL"}, 0},
		{"rejected when polled", fakeapi.Rule{Param: "pageurl", Contains: "bad.example", Code: "ERROR_BAD_TOKEN_OR_PAGEURL", OnPoll: true}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, Topology{})
			ctx := testContext(t)
			api, sc := emulator(t, fakeapi.Config{SolveTime: fastSolve(10 * time.Millisecond),
				Faults: fakeapi.Faults{Rules: []fakeapi.Rule{tc.rule}}}, 0.001)
			b.startWorker(t, WorkerConfig{Solver: sc})

			bad := turnstileTask("bad")
			bad.Params["pageurl"] = "https://bad.example/account/12345/checkout"
			receipts, err := b.client.SubmitAll(ctx, []Task{bad, turnstileTask("good")})
			require.NoError(t, err)
			outs := map[string]Outcome{}
			require.NoError(t, b.client.WaitAll(ctx, receipts, func(o Outcome, err error) {
				if o.ID == "bad" {
					require.ErrorIs(t, err, ErrNotSolved)
				} else {
					require.NoError(t, err)
				}
				outs[o.ID] = o
			}))

			out := outs["bad"]
			require.Equal(t, StatusDead, out.Status)
			require.Equal(t, string(retry.ReasonPermanent), out.Reason)
			require.Equal(t, tc.rule.Code, out.Error)
			require.Equal(t, 1, out.Attempts)
			want := []EventKind{EventAttempt, EventDead}
			if tc.wantSubmitted > 0 {
				want = []EventKind{EventAttempt, EventAccepted, EventDead} // refused at res.php: in.php accepted it
			}
			require.Equal(t, want, kinds(b.events(t, "bad")), "no retry")

			d, err := b.client.DeadLetterOf(ctx, "bad")
			require.NoError(t, err)
			require.Equal(t, retry.ReasonPermanent, d.Reason)
			require.Equal(t, tc.rule.Code, d.Error)
			require.Equal(t, 1, d.Attempts)
			require.Equal(t, "bad.example", d.Host)
			require.Equal(t, 1, b.count(t, wire.DeadSubject("bad")))

			require.Equal(t, StatusSolved, outs["good"].Status, "the rule hits only the bad page")
			require.Zero(t, b.count(t, wire.DeadSubject("good")))
			st := api.Stats()
			require.Equal(t, 1, st.Codes[tc.rule.Code], "the service was asked about the bad task once")
			require.Equal(t, 1+tc.wantSubmitted, st.Submitted)
		})
	}
}

func TestFaultUnsolvableEveryTimeExhaustsAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	api, sc := emulator(t, fakeapi.Config{SolveTime: fastSolve(10 * time.Millisecond),
		Faults: fakeapi.Faults{Unsolvable: 1}}, 0.001)
	p := retry.Policy{MaxAttempts: 4, InitialInterval: 10 * time.Millisecond, MaxInterval: 20 * time.Millisecond, NoJitter: true}
	b.startWorker(t, WorkerConfig{Solver: sc, Policy: p})

	out, err := b.client.Solve(ctx, turnstileTask("hopeless"))
	require.ErrorIs(t, err, ErrNotSolved)
	require.Equal(t, StatusDead, out.Status)
	require.Equal(t, string(retry.ReasonAttemptsExhausted), out.Reason)
	require.Equal(t, "ERROR_CAPTCHA_UNSOLVABLE", out.Error)
	require.Equal(t, p.MaxAttempts, out.Attempts)

	evs := b.events(t, "hopeless")
	require.Equal(t, []EventKind{EventAttempt, EventAccepted, EventRetry, EventAttempt, EventAccepted, EventRetry,
		EventAttempt, EventAccepted, EventRetry, EventAttempt, EventAccepted, EventDead}, kinds(evs))
	for _, ev := range evs {
		if ev.Kind == EventRetry {
			require.Equal(t, retry.Resubmit.String(), ev.Class)
			require.Equal(t, "ERROR_CAPTCHA_UNSOLVABLE", ev.Code)
		}
	}
	requireRetriesWaited(t, p, evs)

	d, err := b.client.DeadLetterOf(ctx, "hopeless")
	require.NoError(t, err)
	require.Equal(t, retry.ReasonAttemptsExhausted, d.Reason)
	require.Equal(t, p.MaxAttempts, d.Attempts)
	require.Equal(t, "ERROR_CAPTCHA_UNSOLVABLE", d.Error)
	require.False(t, d.FirstFailure.After(d.LastFailure))

	st := api.Stats()
	require.Equal(t, p.MaxAttempts, st.InCalls, "exactly one in.php submission per attempt, none after the budget")
	require.Equal(t, p.MaxAttempts, st.Submitted)
	require.Equal(t, p.MaxAttempts, st.Failed)
	require.Zero(t, st.Solved)
}

func TestFaultCapacityOutageLongerThanBackoffBudget(t *testing.T) {
	t.Parallel()
	// The whole backoff budget, MaxAttempts × MaxInterval, is 30 ms; the
	// service has no free thread for far longer than that.
	p := retry.Policy{MaxAttempts: 3, InitialInterval: 5 * time.Millisecond, MaxInterval: 10 * time.Millisecond, NoJitter: true,
		CapacityDelay: 10 * time.Millisecond, CapacityMaxDelay: 40 * time.Millisecond}
	budget := time.Duration(p.MaxAttempts) * p.MaxInterval

	// check verifies a task that met a capacity outage: solved with one
	// attempt, after more capacity errors than the attempt budget, without
	// a single retry or dead letter.
	check := func(t *testing.T, b *bundle, api *fakeapi.Server, out Outcome, code string) {
		t.Helper()
		require.Equal(t, StatusSolved, out.Status)
		require.Equal(t, 1, out.Attempts, "capacity errors never spend attempts")
		evs := b.events(t, out.ID)
		var snoozes []Event
		for _, ev := range evs {
			require.NotEqual(t, EventRetry, ev.Kind, "%v", kinds(evs))
			if ev.Kind == EventSnooze {
				snoozes = append(snoozes, ev)
				require.Zero(t, ev.Attempts, "%+v", ev)
				require.Equal(t, code, ev.Code)
				require.Equal(t, retry.Capacity.String(), ev.Class)
				require.Equal(t, p.SnoozeDelay(ev.Snoozes).Milliseconds(), ev.DelayMS)
			}
		}
		require.Greater(t, len(snoozes), p.MaxAttempts, "the outage outlasted the attempt budget: %v", kinds(evs))
		require.Greater(t, snoozes[len(snoozes)-1].At.Sub(snoozes[0].At), budget, "the outage outlasted the backoff budget")
		require.Equal(t, EventAttempt, evs[len(evs)-2].Kind, "the solving attempt and its captcha are the last events: %v", kinds(evs))
		require.Equal(t, EventAccepted, evs[len(evs)-1].Kind, "the solving attempt and its captcha are the last events: %v", kinds(evs))
		require.Zero(t, b.count(t, wire.DeadSubject(out.ID)))
		require.Equal(t, len(snoozes), api.Stats().Codes[code], "every capacity error became a snooze")
	}

	t.Run("plan full", func(t *testing.T) {
		t.Parallel()
		b := setup(t, Topology{})
		ctx := testContext(t)
		const outage = 600 * time.Millisecond
		api, sc := emulator(t, fakeapi.Config{Threads: 1, NoSlotCode: true, SolveTime: map[string]fakeapi.Range{
			fakeapi.KindRecaptcha: fixed(outage), fakeapi.KindTurnstile: fixed(10 * time.Millisecond)}}, 0.001)
		// Another user of the account takes the plan's only thread for the
		// whole outage.
		start := time.Now()
		_, err := sc.Submit(ctx, solver.Request{Method: "userrecaptcha",
			Params: map[string]string{"googlekey": "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-", "pageurl": "https://other.example/"}})
		require.NoError(t, err)
		require.Greater(t, outage, 10*budget)
		b.startWorker(t, WorkerConfig{Solver: sc, Policy: p})

		out, err := b.client.Solve(ctx, turnstileTask("busy"))
		require.NoError(t, err)
		require.GreaterOrEqual(t, out.SolvedAt.Sub(start), outage, "solved only once the thread was free again")
		check(t, b, api, out, "ERROR_NO_SLOT_AVAILABLE")
		require.Equal(t, 1, api.Stats().MaxConcurrent, "the plan's one thread was never exceeded")
	})

	t.Run("no free threads injected", func(t *testing.T) {
		t.Parallel()
		b := setup(t, Topology{})
		ctx := testContext(t)
		// CaptchaAI's "no free threads" for every task, until the test lifts it.
		api, sc := emulator(t, fakeapi.Config{SolveTime: fastSolve(10 * time.Millisecond),
			Faults: fakeapi.Faults{Rules: []fakeapi.Rule{{Code: "ERROR_ZERO_BALANCE"}}}}, 0.001)
		snoozed := make(chan struct{}, 100)
		b.startWorker(t, WorkerConfig{Solver: sc, Policy: p, Observer: ObserverFunc(func(o Observation) {
			if o.Kind == EventSnooze {
				snoozed <- struct{}{}
			}
		})})
		r, err := b.client.Submit(ctx, turnstileTask("zero"))
		require.NoError(t, err)
		for range 4 * p.MaxAttempts {
			select {
			case <-snoozed:
			case <-ctx.Done():
				t.Fatal("no capacity errors seen")
			}
		}
		api.SetFaults(fakeapi.Faults{})
		out, err := b.client.Wait(ctx, r.ID)
		require.NoError(t, err)
		check(t, b, api, out, "ERROR_ZERO_BALANCE")
	})
}

func TestFaultDeadLetteredTasksReplayedAndSolved(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	api, sc := emulator(t, fakeapi.Config{SolveTime: fastSolve(10 * time.Millisecond), Faults: fakeapi.Faults{
		Unsolvable: 1,
		Rules:      []fakeapi.Rule{{Param: "pageurl", Contains: "bad.example", Code: "ERROR_PAGEURL"}},
	}}, 0.001)
	p := retry.Policy{MaxAttempts: 2, InitialInterval: 10 * time.Millisecond, MaxInterval: 20 * time.Millisecond, NoJitter: true}
	b.startWorker(t, WorkerConfig{Solver: sc, Policy: p})

	perm := turnstileTask("perm")
	perm.Params["pageurl"] = "https://bad.example/login"
	receipts, err := b.client.SubmitAll(ctx, []Task{perm, turnstileTask("exhausted")})
	require.NoError(t, err)
	reasons := map[string]string{}
	require.NoError(t, b.client.WaitAll(ctx, receipts, func(o Outcome, err error) {
		require.ErrorIs(t, err, ErrNotSolved)
		reasons[o.ID] = o.Reason
	}))
	require.Equal(t, map[string]string{"perm": string(retry.ReasonPermanent), "exhausted": string(retry.ReasonAttemptsExhausted)}, reasons)

	// The fault is fixed; both letters go back on the queue, one by id and
	// one by reason, and both are solved with a fresh budget.
	api.SetFaults(fakeapi.Faults{})
	r, err := b.client.Replay(ctx, "perm")
	require.NoError(t, err)
	require.False(t, r.Duplicate)
	require.Greater(t, r.Seq, receipts[0].Seq, "a replay is a new generation")
	rs, err := b.client.ReplayAll(ctx, DeadFilter{Reason: retry.ReasonAttemptsExhausted})
	require.NoError(t, err)
	require.Len(t, rs, 1)
	require.Equal(t, "exhausted", rs[0].ID)

	for _, id := range []string{"perm", "exhausted"} {
		out, err := b.client.Wait(ctx, id)
		require.NoError(t, err, "Wait returns the replayed generation's outcome: %s", id)
		require.Equal(t, StatusSolved, out.Status, id)
		require.Equal(t, 1, out.Attempts, "%s: a replay starts a fresh budget", id)
		require.NotEmpty(t, out.Solution, id)
		require.Equal(t, 2, b.count(t, wire.ResultSubject(id)), "%s: one outcome per generation", id)
		d, err := b.client.DeadLetterOf(ctx, id)
		require.NoError(t, err)
		require.NotNil(t, d.Replayed, id)
		_, err = b.client.Replay(ctx, id)
		require.ErrorIs(t, err, ErrAlreadyReplayed, id)
	}
	require.Equal(t, r.Seq, mustDeadLetter(t, b, "perm").Replayed.TaskSeq)
	rs, err = b.client.ReplayAll(ctx, DeadFilter{})
	require.NoError(t, err)
	require.Empty(t, rs, "nothing left to replay")
	st := api.Stats()
	require.Equal(t, 2, st.Solved)
	require.Equal(t, 2+p.MaxAttempts, st.Submitted, "the exhausted task's attempts and one captcha per replay")
}

func mustDeadLetter(t *testing.T, b *bundle, id string) DeadLetter {
	t.Helper()
	d, err := b.client.DeadLetterOf(testContext(t), id)
	require.NoError(t, err)
	return d
}
