package provider_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
}

// startService runs an emulator of entry's service (its per-solve prices
// its bill's) on a local port, solving in lo–2·lo, and a client of it.
func startService(t *testing.T, e provider.Entry, seed int64, lo time.Duration) service {
	t.Helper()
	solve := map[string]fakeapi.Range{}
	for _, k := range solver.Kinds() {
		solve[k] = fakeapi.Range{Min: lo, Median: lo * 3 / 2, Max: 2 * lo}
	}
	svc := fakeapi.ServiceCaptchaAI
	if e.Service != "" {
		svc = e.Service
	}
	api := fakeapi.New(fakeapi.Config{SolveTime: solve, Seed: seed, BurstLimit: 1 << 20, Service: svc,
		Price: e.Billing.Per1000, Balance: 1000})
	url, stop, err := fakeapi.ServeLocal(api)
	require.NoError(t, err)
	t.Cleanup(stop)
	e.BaseURL = url
	c, err := solver.NewClient(solver.Config{BaseURL: url, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1,
		Service: solver.Service(svc), Timing: solver.Timing{Scale: 0.01}})
	require.NoError(t, err)
	return service{api: api, member: provider.Member{Entry: e, Client: c}}
}

// threads is the worker's.
const threads = 8

// planAndSpare starts a thread-plan primary solving in planSolve–2·planSolve
// and a per-solve fallback, and a worker of threads that solves through the two.
func planAndSpare(t *testing.T, planSolve time.Duration) (env *streamtest.Env, plan, spare service) {
	t.Helper()
	plan = startService(t, provider.Entry{Name: "plan", Dialect: provider.Classic, BaseURL: "http://x", KeyEnv: "K",
		Billing: provider.Billing{Threads: 50}, Role: provider.Primary}, 1, planSolve)
	spare = startService(t, provider.Entry{Name: "spare", Dialect: provider.Classic, BaseURL: "http://x", KeyEnv: "K",
		Service: fakeapi.Service2Captcha, Methods: []string{"userrecaptcha", "base64"}, Billing: spareBilling,
		Role: provider.Fallback}, 2, 5*time.Millisecond)
	set, err := provider.New(provider.Config{Members: []provider.Member{plan.member, spare.member}})
	require.NoError(t, err)
	env = streamtest.Start(t, streamtest.WithWorkers(0))
	env.StartWorker(stream.WorkerConfig{Solver: set, Threads: threads})
	return env, plan, spare
}

// submit submits n reCAPTCHA tasks of producer, each on a page of its
// own, and returns their ids.
func submit(t *testing.T, c *stream.Client, producer string, from, n int) []string {
	t.Helper()
	var ids []string
	for i := from; i < from+n; i++ {
		r, err := c.Submit(t.Context(), stream.Task{ID: fmt.Sprintf("%s-%d", producer, i), Method: "userrecaptcha",
			Params: stream.Params{"googlekey": "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-", "pageurl": fmt.Sprintf("https://shop.example/p/%d", i)}})
		require.NoError(t, err)
		ids = append(ids, r.ID)
	}
	return ids
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
	env, plan, spare := planAndSpare(t, 300*time.Millisecond)
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
