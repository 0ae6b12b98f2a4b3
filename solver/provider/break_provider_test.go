package provider_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/internal/dialect/classic"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/solver/provider"
	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/streamtest"
)

// requireBilledOnce checks a run's outcomes against the emulators' bills:
// every task solved, one captcha accepted per task over all the
// emulators, none by two, each outcome naming the emulator that accepted
// it, and stats' spend per provider each emulator's bill to the cent.
func requireBilledOnce(t *testing.T, env *streamtest.Env, outs []stream.Outcome, svcs ...service) {
	t.Helper()
	byProvider := map[string]int{}
	for _, o := range outs {
		require.Equal(t, stream.StatusSolved, o.Status, "task %s: %s %s", o.ID, o.Error, o.Detail)
		byProvider[o.Provider]++
	}
	st, err := env.Client.Stats(t.Context(), 0)
	require.NoError(t, err)
	spend := map[string]float64{}
	for _, r := range st.Spend {
		spend[r.Provider] += r.Cost
	}
	accepted, seen := 0, map[string]string{}
	for _, s := range svcs {
		name, bill := s.member.Entry.Name, s.api.Stats()
		t.Logf("%s: accepted %d, billed %.5f, stats %.5f, codes %v", name, bill.Submitted, bill.Spent, spend[name], bill.Codes)
		accepted += bill.Submitted
		require.Empty(t, bill.Repeated(), "%s paid a task twice", name)
		require.Equal(t, bill.Submitted, byProvider[name], "outcomes naming %s", name)
		require.Equal(t, cents(bill.Spent), cents(spend[name]), "%s: stats' spend is its bill", name)
		for key := range bill.PerTask {
			require.NotContains(t, seen, key, "a task paid on %s and %s", seen[key], name)
			seen[key] = name
		}
	}
	require.Equal(t, len(outs), accepted, "one captcha paid per task")
}

// perSolve is a per-solve provider of 2captcha's profile called name.
func perSolve(t *testing.T, name string, role provider.Role, seed int64, solve time.Duration) service {
	return startService(t, provider.Entry{Name: name, Dialect: provider.Classic, BaseURL: "http://x", KeyEnv: "K",
		Service: fakeapi.Service2Captcha, Methods: []string{"userrecaptcha", "base64"}, Billing: spareBilling,
		Role: role}, seed, solve)
}

// TestBreakFundsRunOutMidBurst: a per-solve primary of 2captcha's profile
// runs out of money in the middle of a burst (in.php answers
// ERROR_ZERO_BALANCE, which on 2captcha means no money: "You don't have
// funds on your account", 2captcha.com/api-docs/error-codes): the rest of
// the burst goes to the fallback, the primary is passed over instead of
// asked once a task, and every task is paid once, on one of them.
func TestBreakFundsRunOutMidBurst(t *testing.T) {
	t.Parallel()
	b := startBed(t, 20*time.Millisecond, 5*time.Millisecond, bedPerSolvePrimary())
	env, primary, spare := b.env, b.plan, b.spare

	const n = 60
	ids := submit(t, env.Client, "crawler", 0, n)
	require.Eventually(t, func() bool { return primary.api.Stats().Submitted >= n/4 }, 30*time.Second, time.Millisecond)
	primary.api.SetFaults(fakeapi.Faults{Rules: []fakeapi.Rule{{Code: classic.CodeZeroBalance}}})
	outs := waitAll(t, env.Client, ids)
	requireBilledOnce(t, env, outs, primary, spare)
	require.Positive(t, spare.api.Stats().Submitted, "the fallback took the rest")
	require.LessOrEqual(t, primary.api.Stats().Codes[classic.CodeZeroBalance], threads,
		"the primary without money is passed over, not asked once a task")
}

// TestBreakCaptchaAIZeroBalanceIsAFullPlan: on CaptchaAI the same code,
// ERROR_ZERO_BALANCE, means every thread of the plan is busy ("ERROR_ZERO_BALANCE
// … You don't have available threads", docs.captchaai.com, Errors): the
// tasks wait for a thread of the plan, and the fallback, which would be
// paid, is never asked.
func TestBreakCaptchaAIZeroBalanceIsAFullPlan(t *testing.T) {
	t.Parallel()
	b := startBed(t, 20*time.Millisecond, 5*time.Millisecond, bedPlanThreads(2))
	env, plan, spare := b.env, b.plan, b.spare

	outs := waitAll(t, env.Client, submit(t, env.Client, "crawler", 0, 20))
	requireBilledOnce(t, env, outs, plan, spare)
	require.Positive(t, plan.api.Stats().Codes[classic.CodeZeroBalance], "the plan was full at times")
	require.Zero(t, spare.api.Stats().InCalls, "a full plan is not an outage: the fallback is not asked")
}

// TestBreakHostilePrimary: the primary answers garbage, HTML pages, HTTP
// 500s and slow replies to a share of every call, and flaps (a full
// outage switched on and off) during the run: every task is solved, paid
// once, on one provider, and stats' spend is the bills.
func TestBreakHostilePrimary(t *testing.T) {
	t.Parallel()
	b := startBed(t, 20*time.Millisecond, 5*time.Millisecond)
	env, plan, spare := b.env, b.plan, b.spare
	hostile := fakeapi.Faults{Garbage: 0.1, HTML: 0.1, HTTP500: 0.1, Slow: 0.1, SlowDelay: 300 * time.Millisecond}
	plan.api.SetFaults(hostile)

	const n = 60
	ids := submit(t, env.Client, "crawler", 0, n)
	// Flap: out, back, out, back, each switch once the services have
	// seen more of the tasks.
	for i := 1; i <= 4; i++ {
		require.Eventually(t, func() bool { return plan.api.Stats().InCalls+spare.api.Stats().InCalls >= i*n/5 },
			30*time.Second, time.Millisecond)
		f := hostile
		f.Outage = i%2 == 1
		plan.api.SetFaults(f)
	}
	// A task whose in.php replies were all garbled may end dead (its
	// attempts spent on the primary, where it may have been paid): the
	// emulator garbles before it accepts, so such a task was paid nowhere.
	var solved []stream.Outcome
	for i, id := range ids {
		o, err := env.Client.Wait(t.Context(), id)
		require.Equal(t, id, o.ID, "task %s ends: %v", id, err)
		if o.Status == stream.StatusSolved {
			solved = append(solved, o)
			continue
		}
		require.Equal(t, "BAD_REPLY", o.Error, "task %s: %s", id, o.Detail)
		require.Contains(t, o.Detail, "may have been paid on provider plan")
		key := fakeapi.TaskKey("userrecaptcha", taskParams(i), nil)
		require.Zero(t, plan.api.Stats().PerTask[key]+spare.api.Stats().PerTask[key], "dead task %s was paid", id)
	}
	t.Logf("%d of %d solved", len(solved), n)
	outs := solved
	requireBilledOnce(t, env, outs, plan, spare)
}

// TestBreakLostReplyNamesItsProvider: the primary answers every in.php
// call with garbage, so no submission is known to be unpaid: the task is
// not sent on to the fallback (held), and its trail, which says the
// captcha may have been paid, says on which provider.
func TestBreakLostReplyNamesItsProvider(t *testing.T) {
	t.Parallel()
	b := startBed(t, 5*time.Millisecond, 5*time.Millisecond)
	env, plan, spare := b.env, b.plan, b.spare
	plan.api.SetFaults(fakeapi.Faults{Garbage: 1})
	id := submit(t, env.Client, "crawler", 0, 1)[0]
	require.Eventually(t, func() bool {
		for _, e := range trace(t, env, id) {
			if strings.Contains(e.Detail, "may have been paid") {
				require.Contains(t, e.Detail, "on provider plan", "which provider may have been paid: %+v", e)
				require.Equal(t, "plan", e.Provider)
				return true
			}
		}
		return false
	}, 30*time.Second, time.Millisecond)
	plan.api.SetFaults(fakeapi.Faults{})
	outs := waitAll(t, env.Client, []string{id})
	requireBilledOnce(t, env, outs, plan, spare)
	require.Zero(t, spare.api.Stats().InCalls, "a submission that may have been paid is not sent on")
}

// TestBreakReusedCaptchaIDAcrossWorkers: two workers (two Sets, each with
// its own clients and its own connection to the pool, as two processes
// have) on the same provider. The provider answers the second worker's
// submission with the id of the captcha the first polls: the second task
// is not handed the first's answer (the pool's claim, stream.Claims,
// says the id is another worker's), fails as a reused id does within one
// worker (CodeReusedID: transient, may have been paid), and its next
// attempt gets a captcha of its own. The plan's bill: three captchas
// accepted, the second task's twice (the provider charged the submission
// it answered with another's id), none on the fallback.
func TestBreakReusedCaptchaIDAcrossWorkers(t *testing.T) {
	t.Parallel()
	b := startBed(t, 200*time.Millisecond, 5*time.Millisecond, bedNoWorker())
	env, plan, spare := b.env, b.plan, b.spare
	worker := func() *provider.Set {
		claims, err := stream.OpenClaims(t.Context(), env.Connect(), env.Topology)
		require.NoError(t, err)
		set, err := provider.New(provider.Config{Members: []provider.Member{ownClient(t, plan), ownClient(t, spare)},
			Claims: claims})
		require.NoError(t, err)
		return set
	}
	first, second := worker(), worker()
	done, claimed := make(chan solver.Answer, 1), make(chan solver.Accepted, 1)
	go func() {
		// Told once the first worker claimed the captcha (the Set tells
		// its caller after the claim).
		ctx := solver.WithAccepted(t.Context(), func(a solver.Accepted) { claimed <- a })
		ans, err := first.Solve(ctx, solver.Request{Method: "userrecaptcha", Params: taskParams(1)})
		assert.NoError(t, err)
		done <- ans
	}()
	<-claimed
	plan.api.SetFaults(fakeapi.Faults{ReuseID: true})
	ans, err := second.Solve(t.Context(), solver.Request{Method: "userrecaptcha", Params: taskParams(2)})
	plan.api.SetFaults(fakeapi.Faults{})
	a := <-done
	t.Logf("first task: captcha %s; second task: captcha %s, err %v", a.CaptchaID, ans.CaptchaID, err)
	require.Equal(t, 2, plan.api.Stats().Submitted, "both charged")
	require.Error(t, err, "the second task was handed the first's captcha (%s) and answer", a.CaptchaID)
	require.Equal(t, provider.CodeReusedID, solver.CodeOf(err), "%v", err)
	require.True(t, solver.MayBePaid(err), "the reused id's submission may have been charged: %v", err)

	// The retry, as the executor makes it: a captcha of its own.
	ans, err = second.Solve(t.Context(), solver.Request{Method: "userrecaptcha", Params: taskParams(2)})
	require.NoError(t, err)
	require.NotEqual(t, a.CaptchaID, ans.CaptchaID)
	bill := plan.api.Stats()
	require.Equal(t, 3, bill.Submitted, "the first, the reused id, the retry")
	// The broken provider charged the second task for the submission it
	// answered with another's id (the attempt's trail says it may have
	// been paid): that, and only that, is paid twice.
	require.Equal(t, map[string]int{fakeapi.TaskKey("userrecaptcha", taskParams(2), nil): 2}, bill.Repeated())
	require.Zero(t, spare.api.Stats().Submitted, "a reused id is not sent on to another provider")

	// The first task ended: its claim is released, so the provider may
	// give the id again.
	claims, err := stream.OpenClaims(t.Context(), env.Connect(), env.Topology)
	require.NoError(t, err)
	ok, err := claims.Claim(t.Context(), "plan", a.CaptchaID)
	require.NoError(t, err)
	require.True(t, ok, "a captcha whose task ended is claimed no more")
	ok, err = claims.Claim(t.Context(), "plan", a.CaptchaID)
	require.NoError(t, err)
	require.False(t, ok, "a claim is held once")
}

// ownClient is s's member with a client of its own, as another worker
// process has.
func ownClient(t *testing.T, s service) provider.Member {
	own, err := solver.NewClient(s.cfg)
	require.NoError(t, err)
	return provider.Member{Entry: s.member.Entry, Client: own}
}

// TestBreakNoFreeWorkersPastTheDeadlineFailsOver: a per-solve primary
// whose service has no free workers (ERROR_NO_SLOT_AVAILABLE: "No idle
// captcha workers are available at the moment", anti-captcha.com/apidoc/errors,
// and 2captcha's "no free slots") and no overflow provider: a task that
// cannot wait that long (its deadline is nearer than provider.WaitForPlan)
// fails over to the fallback, as the issue's routing asks ("no free
// workers for longer than the task can wait"); one that can wait, waits.
func TestBreakNoFreeWorkersPastTheDeadlineFailsOver(t *testing.T) {
	t.Parallel()
	primary := perSolve(t, "main", provider.Primary, 1, 200*time.Millisecond)
	spare := perSolve(t, "spare", provider.Fallback, 2, 5*time.Millisecond)
	primary.api.SetFaults(fakeapi.Faults{Rules: []fakeapi.Rule{{Code: classic.CodeNoSlotAvailable}}})
	set, err := provider.New(provider.Config{Members: []provider.Member{primary.member, spare.member}})
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(t.Context(), provider.WaitForPlan(primary.member.Client, solver.KindRecaptcha)/2)
	defer cancel()
	ans, err := set.Solve(ctx, solver.Request{Method: "userrecaptcha", Params: taskParams(1)})
	t.Logf("primary: %v; spare accepted %d", primary.api.Stats().Codes, spare.api.Stats().Submitted)
	require.NoError(t, err, "the task that cannot wait goes to the fallback")
	require.NoError(t, ctx.Err(), "in time")
	require.Equal(t, "spare", ans.Provider)

	_, err = set.Solve(t.Context(), solver.Request{Method: "userrecaptcha", Params: taskParams(2)})
	require.Equal(t, classic.CodeNoSlotAvailable, solver.CodeOf(err), "a task that can wait waits: %v", err)
	require.Equal(t, 1, spare.api.Stats().Submitted)
}
