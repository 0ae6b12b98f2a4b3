package provider_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/solver/provider"
)

// The learned poll schedule in the JSON dialect: a TasksClient polls
// getTaskResult as the classic client polls res.php (first poll from the
// catalogue, then the learned distribution), and each provider's client
// learns from its own answers only.

// scheduleScale is the clients' timing in most of these tests:
// reCAPTCHA's first poll at 150 ms, then every 50 ms.
const scheduleScale = 0.01

// timedEmulator is an emulator over real HTTP whose reCAPTCHAs take
// about solve (log-normal, from 0.9× to 1.2× of it), at spareBilling's
// prices.
func timedEmulator(t *testing.T, solve time.Duration) (*fakeapi.Server, string) {
	t.Helper()
	api := fakeapi.New(fakeapi.Config{Seed: 11, Price: spareBilling.Per1000,
		SolveTime: map[string]fakeapi.Range{fakeapi.KindRecaptcha: {Min: solve * 9 / 10, Median: solve, Max: solve * 12 / 10}}})
	url, stop, err := fakeapi.ServeLocal(api)
	require.NoError(t, err)
	t.Cleanup(stop)
	return api, url
}

// pollFigures are what a round of solves cost at an emulator: the
// getTaskResult (res.php) calls per captcha, and the pickup lag (ready →
// the call that returned it), the schedule's share of the time to token.
type pollFigures struct {
	calls float64
	lag   time.Duration
	ids   []string
}

// solveRounds solves rounds of n reCAPTCHAs at once through s at api and
// returns the figures of the last round.
func solveRounds(t *testing.T, s solver.Solver, api *fakeapi.Server, rounds, n int) pollFigures {
	t.Helper()
	req := solver.Request{Method: "userrecaptcha", Params: map[string]string{"googlekey": "6Le-site", "pageurl": "https://shop.example/"}}
	var f pollFigures
	for round := range rounds {
		before := api.Stats().Pickups
		ids := make([]string, n)
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
				defer cancel()
				r := req
				r.Params = map[string]string{"googlekey": fmt.Sprintf("6Le-%d-%d", round, i), "pageurl": req.Params["pageurl"]}
				ans, err := s.Solve(ctx, r)
				ids[i], errs[i] = ans.CaptchaID, err
			}()
		}
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		if round < rounds-1 {
			continue
		}
		st := api.Stats()
		calls := 0
		for _, id := range ids {
			calls += st.ResCallsPerCaptcha[id]
		}
		var sum time.Duration
		lags := api.PickupLags(before)
		for _, l := range lags {
			sum += l
		}
		require.Len(t, lags, n)
		f = pollFigures{calls: float64(calls) / float64(n), lag: sum / time.Duration(len(lags)), ids: ids}
	}
	return f
}

// requirePaidOnce checks api's bill: n reCAPTCHAs accepted, each task
// once, at spareBilling's price.
func requirePaidOnce(t *testing.T, api *fakeapi.Server, n int) {
	t.Helper()
	st := api.Stats()
	require.Equal(t, n, st.Submitted, "paid once each")
	require.Empty(t, st.Repeated())
	require.InDelta(t, float64(n)*spareBilling.Per1000["userrecaptcha"]/1000, st.Spent, 1e-9, "the bill")
}

// TestTasksClientPollsOnTheLearnedSchedule: a JSON provider whose
// reCAPTCHAs take about 2.5 s (timing × 0.05: the catalogue's 15-s first
// poll is 750 ms, then every 250 ms: about eight getTaskResult calls each
// on the fixed schedule, and half an interval, 125 ms, of pickup lag),
// after 32 answers, spends per captcha about the calls the classic
// client spends on res.php against the same solve times, and its pickup
// lag (ready → fetched, what the schedule adds to the time to token) is
// the learned schedule's, well under the fixed one's; each captcha paid
// once.
func TestTasksClientPollsOnTheLearnedSchedule(t *testing.T) {
	t.Parallel()
	const solve, scale = 2500 * time.Millisecond, 0.05
	const rounds, n = 5, 8
	jsonAPI, jsonURL := timedEmulator(t, solve)
	classicAPI, classicURL := timedEmulator(t, solve)
	tc, err := provider.NewTasksClient(provider.TasksConfig{BaseURL: jsonURL, APIKey: fakeapi.TestKey, Timing: solver.Timing{Scale: scale}})
	require.NoError(t, err)
	cc, err := solver.NewClient(solver.Config{BaseURL: classicURL, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1,
		Timing: solver.Timing{Scale: scale, NoBatch: true}})
	require.NoError(t, err)

	var jsonF, classicF pollFigures
	var wg sync.WaitGroup
	wg.Go(func() { jsonF = solveRounds(t, tc, jsonAPI, rounds, n) })
	wg.Go(func() { classicF = solveRounds(t, cc, classicAPI, rounds, n) })
	wg.Wait()
	t.Logf("after %d answers: getTaskResult calls per captcha %.2f, pickup lag %v; classic res.php calls %.2f, lag %v",
		(rounds-1)*n, jsonF.calls, jsonF.lag, classicF.calls, classicF.lag)

	d, learned := tc.SolveTime(solver.KindRecaptcha, 0.5)
	require.True(t, learned, "the JSON client learned the kind")
	require.InDelta(t, solve.Seconds(), d.Seconds(), solve.Seconds()/2, "its median solve time, plus a poll interval")
	// The learned plan's calls and lag move with what it learned (its
	// probes, its replans) by a call or two from run to run, the classic
	// client's as much.
	require.LessOrEqual(t, jsonF.calls, classicF.calls+2, "about the classic client's calls per captcha")
	require.Less(t, jsonF.lag, 75*time.Millisecond, "the learned schedule's lag (grid 50 ms), not the fixed one's 125 ms")

	requirePaidOnce(t, jsonAPI, rounds*n)
}

// TestTasksProvidersLearnApart: two JSON providers of one providers
// file, one solving in about 200 ms and one in about 800 ms, each learn
// their own solve times, which their schedules are planned from: the fast
// one's answers do not make the slow one poll early, nor the slow one's
// make the fast one poll late.
func TestTasksProvidersLearnApart(t *testing.T) {
	t.Parallel()
	const fast, slow = 200 * time.Millisecond, 800 * time.Millisecond
	fastAPI, fastURL := timedEmulator(t, fast)
	slowAPI, slowURL := timedEmulator(t, slow)
	keyFile := filepath.Join(t.TempDir(), "key")
	require.NoError(t, os.WriteFile(keyFile, []byte(fakeapi.TestKey+"\n"), 0o600))
	f, err := provider.Parse(fmt.Appendf(nil, `{"providers": [
		{"name": "fast", "dialect": "tasks", "base_url": %q, "key_file": %q, "billing": {"per_1000": {"userrecaptcha": 2.99}}, "methods": ["userrecaptcha"], "role": "primary"},
		{"name": "slow", "dialect": "tasks", "base_url": %q, "key_file": %q, "billing": {"per_1000": {"userrecaptcha": 2.99}}, "methods": ["userrecaptcha"], "role": "fallback"}]}`,
		fastURL, keyFile, slowURL, keyFile))
	require.NoError(t, err)
	set, err := provider.Open(f, solver.Config{Timing: solver.Timing{Scale: scheduleScale}}, provider.Config{})
	require.NoError(t, err)
	ms := set.Members()
	require.Len(t, ms, 2)

	const rounds, n = 4, 6
	var fastF, slowF pollFigures
	var wg sync.WaitGroup
	wg.Go(func() { fastF = solveRounds(t, ms[0].Client, fastAPI, rounds, n) })
	wg.Go(func() { slowF = solveRounds(t, ms[1].Client, slowAPI, rounds, n) })
	wg.Wait()
	fastD, fastLearned := ms[0].Client.SolveTime(solver.KindRecaptcha, 0.5)
	slowD, slowLearned := ms[1].Client.SolveTime(solver.KindRecaptcha, 0.5)
	t.Logf("fast: median %v, %.2f calls, lag %v; slow: median %v, %.2f calls, lag %v",
		fastD, fastF.calls, fastF.lag, slowD, slowF.calls, slowF.lag)
	require.True(t, fastLearned)
	require.True(t, slowLearned)
	require.Less(t, fastD, 400*time.Millisecond, "the fast provider's own times")
	require.Greater(t, slowD, 600*time.Millisecond, "the slow provider's own times")
	requirePaidOnce(t, fastAPI, rounds*n)
	requirePaidOnce(t, slowAPI, rounds*n)
}

// TestTasksClientKeepsThePollGap: no two getTaskResult calls of a task
// come closer than MinPollGap (a provider's published pace), whatever the
// learned schedule plans (its grid here is 10 ms); each captcha paid once.
func TestTasksClientKeepsThePollGap(t *testing.T) {
	t.Parallel()
	const gap = 120 * time.Millisecond
	api := fakeapi.New(fakeapi.Config{Seed: 11, Price: spareBilling.Per1000,
		SolveTime: map[string]fakeapi.Range{fakeapi.KindRecaptcha: {Min: 450 * time.Millisecond, Median: 500 * time.Millisecond, Max: 600 * time.Millisecond}}})
	var mu sync.Mutex
	last := map[string]time.Time{}
	least, calls := time.Hour, 0
	// Each getTaskResult's arrival, by task, before the emulator serves it.
	front := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/getTaskResult" {
			body, err := io.ReadAll(r.Body)
			require.NoError(t, err)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var req struct {
				TaskID json.RawMessage `json:"taskId"`
			}
			require.NoError(t, json.Unmarshal(body, &req))
			now := time.Now()
			mu.Lock()
			if at, ok := last[string(req.TaskID)]; ok {
				least = min(least, now.Sub(at))
			}
			last[string(req.TaskID)], calls = now, calls+1
			mu.Unlock()
		}
		api.ServeHTTP(w, r)
	})
	url, stop, err := fakeapi.ServeLocal(front)
	require.NoError(t, err)
	t.Cleanup(stop)
	c, err := provider.NewTasksClient(provider.TasksConfig{BaseURL: url, APIKey: fakeapi.TestKey,
		Timing: solver.Timing{Scale: scheduleScale}, MinPollGap: gap})
	require.NoError(t, err)

	const rounds, n = 3, 6
	solveRounds(t, c, api, rounds, n)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d getTaskResult calls, the closest two of a task %v apart", calls, least)
	require.Greater(t, calls, rounds*n, "tasks polled more than once")
	require.GreaterOrEqual(t, least, gap, "the provider's pace kept")
	requirePaidOnce(t, api, rounds*n)
}

// TestPollGapOfTheProviders: the published paces, by API host; none for
// a host captchaq does not know.
func TestPollGapOfTheProviders(t *testing.T) {
	t.Parallel()
	require.Equal(t, 2*time.Second, provider.PollGap("https://api.anti-captcha.com"))
	require.Equal(t, 3*time.Second, provider.PollGap("https://api.capsolver.com/"))
	require.Equal(t, 5*time.Second, provider.PollGap("https://API.2captcha.com"))
	require.Zero(t, provider.PollGap("https://api.capmonster.cloud"))
	require.Zero(t, provider.PollGap("http://127.0.0.1:8090"))
}

// TestTasksClientAsksATaskAtMostItsLimit: a task the provider never
// finishes (the emulator's Hold), for a caller whose deadline is 30
// minutes, is asked getTaskResult at most 120 times, the limit per task
// CapSolver ("The maximum number of query requests for each task is
// 120": docs.capsolver.com/guide/api-gettaskresult) and CapMonster Cloud
// ("Limit: 120 requests per task": docs.capmonster.cloud/docs/api/methods/
// get-task-result/) publish. Timing × 0.002: the poll interval is 10 ms,
// the deadline 3.6 s, and 120 calls take about 1.5 s under the race
// detector. The solve ends with
// POLL_LIMIT naming the calls, without the key, and the task is paid once.
func TestTasksClientAsksATaskAtMostItsLimit(t *testing.T) {
	t.Parallel()
	const scale, perTask = 0.002, 120
	api, url := timedEmulator(t, time.Second)
	defer api.Hold()()
	c, err := provider.NewTasksClient(provider.TasksConfig{BaseURL: url, APIKey: fakeapi.TestKey, Timing: solver.Timing{Scale: scale}})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), time.Duration(float64(30*time.Minute)*scale))
	defer cancel()
	_, err = c.Solve(ctx, solver.Request{Method: "userrecaptcha", Params: map[string]string{"googlekey": "6Le-held", "pageurl": "https://shop.example/"}})
	st := api.Stats()
	require.Len(t, st.ResCallsPerCaptcha, 1, "one task")
	calls := 0
	for _, n := range st.ResCallsPerCaptcha {
		calls = n
	}
	t.Logf("getTaskResult calls of the held task: %d; the solve ended with %v", calls, err)
	require.LessOrEqual(t, calls, perTask, "asked more than the providers' limit per task")
	require.Equal(t, perTask, calls, "asked up to the limit, the caller's deadline not reached")
	require.Equal(t, solver.CodePollLimit, solver.CodeOf(err), "%v", err)
	require.ErrorContains(t, err, "120 getTaskResult calls")
	require.NotContains(t, err.Error(), fakeapi.TestKey)
	require.NoError(t, ctx.Err(), "ended by the limit, not the deadline")
	requirePaidOnce(t, api, 1)
}

// TestTasksClientCountsOnlyTheCallsThatReachTheProvider: a task whose
// provider stops answering after accepting it (its listener closed:
// every getTaskResult refused, CodeUnreachable) is polled through the
// outage until the caller's deadline, as a paid task is, past 120
// attempts (timing × 0.002: they come within 1.5 s of the 3.6-s
// deadline): a call that never reached the provider is not one of the
// 120 it allows. Paid once.
func TestTasksClientCountsOnlyTheCallsThatReachTheProvider(t *testing.T) {
	t.Parallel()
	const scale = 0.002
	api := fakeapi.New(fakeapi.Config{Seed: 11, Price: spareBilling.Per1000})
	url, stop, err := fakeapi.ServeLocal(api)
	require.NoError(t, err)
	t.Cleanup(stop)
	defer api.Hold()()
	c, err := provider.NewTasksClient(provider.TasksConfig{BaseURL: url, APIKey: fakeapi.TestKey, Timing: solver.Timing{Scale: scale}})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), time.Duration(float64(30*time.Minute)*scale))
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := c.Solve(ctx, solver.Request{Method: "userrecaptcha", Params: map[string]string{"googlekey": "6Le-held", "pageurl": "https://shop.example/"}})
		done <- err
	}()
	require.Eventually(t, func() bool { return api.Stats().Submitted == 1 }, 10*time.Second, time.Millisecond)
	stop()
	err = <-done
	t.Logf("the solve ended with %v", err)
	require.ErrorIs(t, err, context.DeadlineExceeded, "polled through the outage until the deadline")
	require.NotEqual(t, solver.CodePollLimit, solver.CodeOf(err))
	since, _ := c.Unreachable()
	require.False(t, since.IsZero(), "the client saw the outage")
	requirePaidOnce(t, api, 1)
}
