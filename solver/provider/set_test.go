package provider_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/solver/provider"
	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/streamtest"
)

// spareBilling is a per-solve provider's billing: 2captcha's published
// prices. reCAPTCHA V2 "$2.99 The rate applies to Google's ReCaptcha V2
// solved via token" (2captcha.com/2captcha-api, "Rates", as captured in
// 2018); a normal image captcha "From $0.5 to $1 for 1000 CAPTCHAs solved"
// (2captcha.com/order-captchas), the top of that range here.
var spareBilling = provider.Billing{Per1000: map[string]float64{"userrecaptcha": 2.99, "base64": 1.0}}

// service is one emulated provider over real HTTP and its member of a
// Set.
type service struct {
	api    *fakeapi.Server
	member provider.Member
	cfg    solver.Config // of member's client
}

// startService runs an emulator of entry's service (its plan's threads,
// its per-solve prices its bill's) on a local port, solving in lo–2·lo,
// and a client of it.
func startService(t *testing.T, e provider.Entry, seed int64, lo time.Duration) service {
	t.Helper()
	solve, first, wait := map[string]fakeapi.Range{}, map[string]time.Duration{}, map[string]time.Duration{}
	for _, k := range solver.Kinds() {
		solve[k] = fakeapi.Range{Min: lo, Median: lo * 3 / 2, Max: 2 * lo}
		first[k] = 100 * lo // scaled: lo, when the first answers may be ready
		wait[k] = time.Hour // scaled: 36 s, longer than any test
	}
	svc := fakeapi.ServiceCaptchaAI
	if e.Service != "" {
		svc = e.Service
	}
	price := e.Billing.Per1000
	if e.Billing.Plan() {
		// A plan's bill is its monthly price, whatever is solved.
		price = map[string]float64{}
		for _, m := range solver.Methods() {
			price[m] = 0
		}
	}
	api := fakeapi.New(fakeapi.Config{SolveTime: solve, Seed: seed, BurstLimit: 1 << 20, Service: svc,
		Price: price, Balance: 1000, Threads: e.Billing.Threads})
	url, stop, err := fakeapi.ServeLocal(api)
	require.NoError(t, err)
	t.Cleanup(stop)
	e.BaseURL = url
	cfg := solver.Config{BaseURL: url, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1,
		Service: solver.Service(svc), Timing: solver.Timing{Scale: 0.01, FirstPoll: first, MaxWait: wait, MaxCalls: 1 << 20}}
	c, err := solver.NewClient(cfg)
	require.NoError(t, err)
	return service{api: api, member: provider.Member{Entry: e, Client: c}, cfg: cfg}
}

// threads is the worker's.
const threads = 8

// bed is what a test of a Set runs on: a broker (env), a primary and a
// fallback, each an emulator over HTTP, and the Set of the two (set).
type bed struct {
	env         *streamtest.Env
	plan, spare service
	set         *provider.Set
}

// bedConfig is what startBed starts; bedOptions set it.
type bedConfig struct {
	planThreads int  // the plan's threads
	perSolve    bool // a per-solve primary of 2captcha's profile, called main, instead of the plan
	env         []streamtest.Option
	members     []func(b *bed) // before the Set is made
	ledger      bool
	worker      *stream.WorkerConfig // nil: no worker
}

// bedOption sets what startBed starts otherwise than by default.
type bedOption func(*bedConfig)

// bedPlanThreads bills the plan for n threads (50 by default).
func bedPlanThreads(n int) bedOption { return func(c *bedConfig) { c.planThreads = n } }

// bedPerSolvePrimary starts a per-solve primary of 2captcha's profile,
// called main, instead of the plan.
func bedPerSolvePrimary() bedOption { return func(c *bedConfig) { c.perSolve = true } }

// bedEnv starts the broker with opts (and no worker of its own).
func bedEnv(opts ...streamtest.Option) bedOption {
	return func(c *bedConfig) { c.env = append(c.env, opts...) }
}

// bedMembers changes the members (their entries, clients or faults)
// before the Set is made and its worker starts.
func bedMembers(f func(b *bed)) bedOption {
	return func(c *bedConfig) { c.members = append(c.members, f) }
}

// bedPlanDown takes the primary down (every call answered HTTP 500)
// before the worker starts.
func bedPlanDown() bedOption {
	return bedMembers(func(b *bed) { b.plan.api.SetFaults(fakeapi.Faults{Outage: true}) })
}

// bedLedger keeps the Set's spend in the broker's ledger.
func bedLedger() bedOption { return func(c *bedConfig) { c.ledger = true } }

// bedWorker starts the worker with cfg (its Solver the Set) instead of
// one of threads.
func bedWorker(cfg stream.WorkerConfig) bedOption { return func(c *bedConfig) { c.worker = &cfg } }

// bedNoWorker starts no worker: the test runs its own, or calls the Set.
func bedNoWorker() bedOption { return func(c *bedConfig) { c.worker = nil } }

// startBed starts a thread plan's primary solving in
// planSolve–2·planSolve, a per-solve fallback solving in
// spareSolve–2·spareSolve, the Set of the two and a worker of threads
// that solves through it; opts change what it starts.
func startBed(t *testing.T, planSolve, spareSolve time.Duration, opts ...bedOption) *bed {
	t.Helper()
	c := bedConfig{planThreads: 50, worker: &stream.WorkerConfig{Threads: threads}}
	for _, o := range opts {
		o(&c)
	}
	b := &bed{}
	if c.perSolve {
		b.plan = perSolve(t, "main", provider.Primary, 1, planSolve)
	} else {
		b.plan = startService(t, provider.Entry{Name: "plan", Dialect: provider.Classic, BaseURL: "http://x", KeyEnv: "K",
			Billing: provider.Billing{Threads: c.planThreads}, Role: provider.Primary}, 1, planSolve)
	}
	b.spare = perSolve(t, "spare", provider.Fallback, 2, spareSolve)
	b.env = streamtest.Start(t, append([]streamtest.Option{streamtest.WithWorkers(0)}, c.env...)...)
	for _, f := range c.members {
		f(b)
	}
	cfg := provider.Config{Members: []provider.Member{b.plan.member, b.spare.member}}
	if c.ledger {
		cfg.Ledger = ledger(t, b.env)
	}
	var err error
	b.set, err = provider.New(cfg)
	require.NoError(t, err)
	if c.worker != nil {
		w := *c.worker
		w.Solver = b.set
		b.env.StartWorker(w)
	}
	return b
}

// submit submits n reCAPTCHA tasks of producer, each on a page of its
// own, and returns their ids.
func submit(t *testing.T, c *stream.Client, producer string, from, n int) []string {
	t.Helper()
	var ids []string
	for i := from; i < from+n; i++ {
		r, err := c.Submit(t.Context(), stream.Task{ID: fmt.Sprintf("%s-%d", producer, i), Method: "userrecaptcha", Params: taskParams(i)})
		require.NoError(t, err)
		ids = append(ids, r.ID)
	}
	return ids
}

// taskParams are the parameters of the i-th task: a reCAPTCHA on a page of
// its own.
func taskParams(i int) stream.Params {
	return stream.Params{"googlekey": "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-", "pageurl": fmt.Sprintf("https://shop.example/p/%d", i)}
}

// waitAll waits for every task's outcome.
func waitAll(t *testing.T, c *stream.Client, ids []string) []stream.Outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var outs []stream.Outcome
	for _, id := range ids {
		o, err := c.Wait(ctx, id)
		require.NoError(t, err, "task %s", id)
		outs = append(outs, o)
	}
	return outs
}

// TestFailoverPaysOnce takes the primary down (every call answered HTTP
// 500) while every worker thread has a captcha there, and more tasks
// come: the new ones go to the fallback, on the threads of the captchas
// the primary holds, which stay with it and are answered when it is back.
// No task is lost, none paid twice: each emulator's accepted captchas are
// the tasks that name it, and no task was accepted by both.
func TestFailoverPaysOnce(t *testing.T) {
	t.Parallel()
	b := startBed(t, 300*time.Millisecond, 5*time.Millisecond)
	env, plan, spare := b.env, b.plan, b.spare
	const n = 60
	ids := submit(t, env.Client, "crawler", 0, n/3)
	require.Eventually(t, func() bool { return plan.api.Stats().Concurrent == threads },
		30*time.Second, time.Millisecond, "every thread has a captcha at the primary")
	plan.api.SetFaults(fakeapi.Faults{Outage: true})
	ids = append(ids, submit(t, env.Client, "crawler", n/3, n-n/3)...)
	require.Eventually(t, func() bool { return spare.api.Stats().Submitted >= n/3 },
		30*time.Second, time.Millisecond, "the fallback takes the tasks while the primary is down")
	plan.api.SetFaults(fakeapi.Faults{})
	outs := waitAll(t, env.Client, ids)

	byProvider := map[string]int{}
	for _, o := range outs {
		require.Equal(t, stream.StatusSolved, o.Status, "task %s: %s %s", o.ID, o.Error, o.Detail)
		byProvider[o.Provider]++
	}
	ps, ss := plan.api.Stats(), spare.api.Stats()
	t.Logf("primary: %d accepted, fallback: %d accepted, of %d tasks", ps.Submitted, ss.Submitted, n)
	require.Equal(t, n, ps.Submitted+ss.Submitted, "0 lost, 0 paid twice: one accepted captcha per task")
	require.Equal(t, map[string]int{"plan": ps.Submitted, "spare": ss.Submitted}, byProvider,
		"each outcome names the provider that was paid for it")
	require.Positive(t, ps.Submitted)
	require.Positive(t, ss.Submitted)
	for key := range ps.PerTask {
		require.NotContains(t, ss.PerTask, key, "a task paid on both providers")
	}
	require.Empty(t, ps.Repeated())
	require.Empty(t, ss.Repeated())
}

// TestStoppedWorkerLeavesItsCaptchaWithItsProvider stops a worker while
// the fallback solves its captcha (the primary was down when it was
// submitted), and brings the primary back: the handback names the
// fallback, and the next worker polls the captcha there instead of
// asking the primary, which does not know it, and paying again.
func TestStoppedWorkerLeavesItsCaptchaWithItsProvider(t *testing.T) {
	t.Parallel()
	b := startBed(t, 5*time.Millisecond, 2*time.Second, bedNoWorker())
	env, plan, spare, set := b.env, b.plan, b.spare, b.set
	cfg := env.WorkerConfig()
	cfg.Solver, cfg.Threads, cfg.ShutdownGrace = set, 1, time.Millisecond
	w, err := stream.NewWorker(t.Context(), env.Connect(), cfg)
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()

	plan.api.SetFaults(fakeapi.Faults{Outage: true})
	id := submit(t, env.Client, "shop", 0, 1)[0]
	require.Eventually(t, func() bool { return hasStep(t, env, id, "accepted", "spare") }, 30*time.Second, time.Millisecond,
		"the fallback accepts the captcha")
	stop()
	require.NoError(t, <-done)
	trail := trace(t, env, id)
	last := trail[len(trail)-1]
	require.Equal(t, "handback", last.Kind, "%+v", trail)
	require.Equal(t, "spare", last.Provider, "the handback names the provider: %+v", last)

	plan.api.SetFaults(fakeapi.Faults{})
	env.StartWorker(stream.WorkerConfig{Solver: set, Threads: 1})
	out := waitAll(t, env.Client, []string{id})[0]
	require.True(t, hasStep(t, env, id, "accepted", "spare", "resumed"), "the next worker resumes the captcha on the fallback: %+v",
		trace(t, env, id))
	require.Equal(t, "spare", out.Provider)
	require.Equal(t, last.Detail[strings.Index(last.Detail, "captcha ")+8:][:len(out.CaptchaID)], out.CaptchaID, "the captcha handed back is the one solved")
	require.Zero(t, plan.api.Stats().Submitted, "nothing paid on the primary")
	require.Equal(t, 1, spare.api.Stats().Submitted, "paid once, on the fallback")
}

// hasStep reports whether task id's trail has a step of kind on provider
// name whose detail says each of words.
func hasStep(t *testing.T, env *streamtest.Env, id, kind, name string, words ...string) bool {
	t.Helper()
	for _, e := range trace(t, env, id) {
		if e.Kind == kind && e.Provider == name && !slices.ContainsFunc(words, func(w string) bool { return !strings.Contains(e.Detail, w) }) {
			return true
		}
	}
	return false
}

func trace(t *testing.T, env *streamtest.Env, id string) []stream.TraceEntry {
	t.Helper()
	trail, err := env.Client.Trace(t.Context(), id)
	require.NoError(t, err)
	return trail
}

// TestRefusedKeyPassesOver gives the primary a key it refuses: the tasks
// go to the fallback, and the primary is asked once, not once a task,
// while it is passed over.
func TestRefusedKeyPassesOver(t *testing.T) {
	t.Parallel()
	b := startBed(t, 5*time.Millisecond, 5*time.Millisecond, bedNoWorker(), bedMembers(func(b *bed) {
		refused, err := solver.NewClient(solver.Config{BaseURL: b.plan.member.Entry.BaseURL, APIKey: "not-the-key", MinSubmitInterval: -1, SubmitBurst: -1})
		require.NoError(t, err)
		b.plan.member.Client = refused
	}))
	plan, spare, set := b.plan, b.spare, b.set
	for i := range 3 {
		ans, err := set.Solve(t.Context(), solver.Request{Method: "userrecaptcha",
			Params: map[string]string{"googlekey": "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-", "pageurl": fmt.Sprintf("https://a.example/%d", i)}})
		require.NoError(t, err)
		require.Equal(t, "spare", ans.Provider)
		require.InDelta(t, 2.99/1000, ans.Cost, 1e-12)
		require.Equal(t, provider.CostPrice, ans.CostBasis)
	}
	require.Equal(t, 1, plan.api.Stats().InCalls, "the refusing primary is passed over after its refusal")
	require.Zero(t, plan.api.Stats().Submitted)
	require.Equal(t, 3, spare.api.Stats().Submitted)
}

// TestReusedCaptchaIDIsNotAnAnswer: a provider that answers a new
// submission with the id of a captcha another task polls (fakeapi's
// ReuseID) does not give the second task the first's answer: the second
// fails (REUSED_CAPTCHA_ID, transient, not sent on to the fallback) while
// the first is solved.
func TestReusedCaptchaIDIsNotAnAnswer(t *testing.T) {
	t.Parallel()
	b := startBed(t, 200*time.Millisecond, 5*time.Millisecond, bedNoWorker())
	plan, spare, set := b.plan, b.spare, b.set
	first := make(chan error, 1)
	go func() {
		_, err := set.Solve(t.Context(), solver.Request{Method: "userrecaptcha", Params: taskParams(1)})
		first <- err
	}()
	// The first captcha's first res.php poll comes after its claim of the
	// id: waiting only for the emulator's accept could send the second
	// in.php before the first's reply was read, and the second would claim
	// the id first (TestBreakJSONTaskIDReused, the JSON dialect's twin).
	require.Eventually(t, func() bool { return plan.api.Stats().MaxResCallsPerCaptcha >= 1 }, 10*time.Second, time.Millisecond)
	plan.api.SetFaults(fakeapi.Faults{ReuseID: true})
	var told []solver.Accepted
	ctx := solver.WithAccepted(t.Context(), func(a solver.Accepted) { told = append(told, a) })
	_, err := set.Solve(ctx, solver.Request{Method: "userrecaptcha", Params: taskParams(2)})
	require.Equal(t, provider.CodeReusedID, solver.CodeOf(err), "%v", err)
	require.Equal(t, retry.Transient, solver.ClassOf(err))
	require.Empty(t, told, "the reused id is not recorded as the second task's")
	require.NoError(t, <-first, "the first task keeps its captcha")
	require.Equal(t, 2, plan.api.Stats().Submitted, "both charged")
	require.Zero(t, spare.api.Stats().Submitted, "not sent on: it may have been paid")
}
