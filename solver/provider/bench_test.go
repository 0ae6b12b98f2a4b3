package provider_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/internal/quantile"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/solver/provider"
	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/streamtest"
)

// The bench rows, at the emulators' default solve times scaled
// down (fakeapi.DefaultSolveTimes; the clients' timing scaled alike), with
// CAPTCHAQ_SOAK=1:
//
//	CAPTCHAQ_SOAK=1 go test -run 'TestBench' -v ./solver/provider/
//
// and at the issue's own time scale (the emulators' default solve times,
// the production poll timing: 60 s of outage, 90-s deadlines), one run
// each, with CAPTCHAQ_BENCH_SCALE=1 (any other scale alike); with
// CAPTCHAQ_BENCH_PACED=1 the clients space their submissions as a
// worker's default flags do:
//
//	CAPTCHAQ_SOAK=1 CAPTCHAQ_BENCH_SCALE=1 go test -timeout 60m -run 'TestBench' -v ./solver/provider/
func soak(t *testing.T) {
	t.Helper()
	if os.Getenv("CAPTCHAQ_SOAK") != "1" {
		t.Skip("a bench row: CAPTCHAQ_SOAK=1")
	}
}

// benchScale is the time scale of a bench, def unless CAPTCHAQ_BENCH_SCALE
// says another, and its runs: runs, or 1 at a scale of the environment's.
func benchScale(t *testing.T, def float64, runs int) (float64, int) {
	v := os.Getenv("CAPTCHAQ_BENCH_SCALE")
	if v == "" {
		return def, runs
	}
	scale, err := strconv.ParseFloat(v, 64)
	require.NoError(t, err, "CAPTCHAQ_BENCH_SCALE")
	require.True(t, scale > 0 && scale <= 1, "CAPTCHAQ_BENCH_SCALE %g: want (0, 1]", scale)
	return scale, 1
}

// benchSeed is what CAPTCHAQ_BENCH_SEED adds to the emulators' seeds
// (default 0): runs at one scale draw the same solve times unless it
// changes.
func benchSeed(t *testing.T) int64 {
	v := os.Getenv("CAPTCHAQ_BENCH_SEED")
	if v == "" {
		return 0
	}
	seed, err := strconv.ParseInt(v, 10, 64)
	require.NoError(t, err, "CAPTCHAQ_BENCH_SEED")
	return seed * 1000
}

// benchWait waits for every task of ids to end: a bench at the real time
// scale takes minutes (waitAll allows one).
func benchWait(t *testing.T, c *stream.Client, ids []string) []stream.Outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Minute)
	defer cancel()
	var outs []stream.Outcome
	for _, id := range ids {
		o, err := c.Wait(ctx, id)
		require.Equal(t, id, o.ID, "task %s: %v", id, err)
		outs = append(outs, o)
	}
	return outs
}

// benchService runs an emulator of e's service at the default solve times
// times scale, and a client of it polling on the production timing times
// scale.
func benchService(t *testing.T, e provider.Entry, seed int64, scale float64) service {
	t.Helper()
	svc := fakeapi.ServiceCaptchaAI
	if e.Service != "" {
		svc = e.Service
	}
	price := e.Billing.Per1000
	if e.Billing.Plan() {
		price = map[string]float64{"userrecaptcha": 0}
	}
	api := fakeapi.New(fakeapi.Config{TimeScale: scale, Seed: seed, BurstLimit: 1 << 30, Service: svc, Price: price,
		Balance: 1e6, Threads: e.Billing.Threads})
	url, stop, err := fakeapi.ServeLocal(api)
	require.NoError(t, err)
	t.Cleanup(stop)
	e.BaseURL = url
	// Unpaced unless CAPTCHAQ_BENCH_PACED=1: then each client spaces its
	// in.php calls as a worker's does by default (100 ms apart, at most
	// 55 in 3 s).
	every, burst := time.Duration(-1), -1
	if os.Getenv("CAPTCHAQ_BENCH_PACED") == "1" {
		every, burst = 0, 0
	}
	c, err := solver.NewClient(solver.Config{BaseURL: url, APIKey: fakeapi.TestKey, MinSubmitInterval: every, SubmitBurst: burst,
		Service: solver.Service(svc), Timing: solver.Timing{Scale: scale}})
	require.NoError(t, err)
	return service{api: api, member: provider.Member{Entry: e, Client: c}}
}

// benchParams are the i-th task of a mixed reCAPTCHA load: v2, invisible
// v2 and v3, each on a page of its own.
func benchParams(i int) stream.Params {
	p := taskParams(i)
	switch i % 3 {
	case 1:
		p["invisible"] = "1"
	case 2:
		p["version"], p["action"], p["min_score"] = "v3", "login", "0.3"
	}
	return p
}

// TestBenchFailover: 300 mixed tasks arriving at 50/s on a 15-thread plan
// with a per-solve fallback; the plan's service is down for 60 s (scaled)
// in the middle. Reported: lost, paid twice, the p95 time to token of the
// tasks that arrived during the outage against the fallback's own p95
// solve time, and the spend stats reports against the bills.
func TestBenchFailover(t *testing.T) {
	soak(t)
	const n = 300
	scale, runs := benchScale(t, 0.01, 3)
	seed := benchSeed(t)
	for run := range runs {
		t.Run(fmt.Sprint(run), func(t *testing.T) {
			plan := benchService(t, provider.Entry{Name: "plan", Dialect: provider.Classic, BaseURL: "http://x", KeyEnv: "K",
				Billing: provider.Billing{Threads: 15}, Role: provider.Primary}, seed+int64(run+1), scale)
			spare := benchService(t, provider.Entry{Name: "spare", Dialect: provider.Classic, BaseURL: "http://x", KeyEnv: "K",
				Service: fakeapi.Service2Captcha, Methods: []string{"userrecaptcha"},
				Billing: provider.Billing{Per1000: map[string]float64{"userrecaptcha": 2.99}}, Role: provider.Fallback}, seed+int64(run+100), scale)
			set, err := provider.New(provider.Config{Members: []provider.Member{plan.member, spare.member}})
			require.NoError(t, err)
			env := streamtest.Start(t, streamtest.WithWorkers(0))
			// 40 threads never fill at ×0.01 (50 tasks/s × 0.4 s); at the
			// real scale (50/s × 30 s) they do, and the row times the
			// worker's queue as well as the failover:
			// CAPTCHAQ_BENCH_THREADS sets them. Default: 40.
			threads := 40
			if v := os.Getenv("CAPTCHAQ_BENCH_THREADS"); v != "" {
				threads, err = strconv.Atoi(v)
				require.NoError(t, err, "CAPTCHAQ_BENCH_THREADS")
			}
			env.StartWorker(stream.WorkerConfig{Solver: set, Threads: threads})

			outage := 60 * time.Second * time.Duration(scale*1000) / 1000
			submitted := make([]time.Time, n)
			var downFrom, downTo time.Time
			tick := time.NewTicker(20 * time.Millisecond) // 50 tasks/s: the arrivals, not a wait for an event
			defer tick.Stop()
			for i := range n {
				<-tick.C
				if i == n/2 {
					plan.api.SetFaults(fakeapi.Faults{Outage: true})
					downFrom = time.Now()
					time.AfterFunc(outage, func() { plan.api.SetFaults(fakeapi.Faults{}) })
					downTo = downFrom.Add(outage)
				}
				submitted[i] = time.Now()
				_, err := env.Client.Submit(t.Context(), stream.Task{ID: fmt.Sprintf("f%d-%d", run, i), Method: "userrecaptcha", Params: benchParams(i)})
				require.NoError(t, err)
			}
			var ids []string
			for i := range n {
				ids = append(ids, fmt.Sprintf("f%d-%d", run, i))
			}
			outs := benchWait(t, env.Client, ids)
			var during, spareSolve []float64
			solved := 0
			for i, o := range outs {
				if o.Status == stream.StatusSolved {
					solved++
				}
				if !submitted[i].Before(downFrom) && submitted[i].Before(downTo) {
					during = append(during, o.SolvedAt.Sub(submitted[i]).Seconds())
				}
				if o.Provider == "spare" {
					spareSolve = append(spareSolve, o.SolveSeconds)
				}
			}
			slices.Sort(during)
			slices.Sort(spareSolve)
			ps, ss := plan.api.Stats(), spare.api.Stats()
			twice := len(ps.Repeated()) + len(ss.Repeated())
			for k := range ps.PerTask {
				if ss.PerTask[k] > 0 {
					twice++
				}
			}
			st, err := env.Client.Stats(t.Context(), 0)
			require.NoError(t, err)
			var spend float64
			for _, r := range st.Spend {
				if r.Provider == "spare" {
					spend += r.Cost
				}
			}
			p95, own := quantile.Of(during, 0.95), quantile.Of(spareSolve, 0.95)
			t.Logf("failover ×%g, %d worker threads, run %d: %d tasks, lost %d, paid twice %d; plan %d, fallback %d accepted; "+
				"p95 time to token of the %d arrivals during the outage %.3fs, fallback's own p95 solve %.3fs: %.2fx; "+
				"spend on the fallback %.4f, its bill %.4f",
				scale, threads, run, n, n-solved, twice, ps.Submitted, ss.Submitted, len(during), p95, own, p95/own, spend, ss.Spent)
			require.Equal(t, n, solved, "0 lost")
			require.Zero(t, twice, "0 paid twice")
			require.Equal(t, n, ps.Submitted+ss.Submitted)
			require.Equal(t, math.Round(ss.Spent*100), math.Round(spend*100), "the spend to the cent")
		})
	}
}

// TestBenchOverflow: a burst of 600 tasks due within 90 s (scaled) on a
// 15-thread plan with a per-solve overflow, under each overflow policy:
// reported, the share solved within the deadline and the overflow's spend.
func TestBenchOverflow(t *testing.T) {
	soak(t)
	const n = 600
	scale, runs := benchScale(t, 0.05, 2)
	deadline := 90 * time.Second * time.Duration(scale*1000) / 1000
	for run := range runs {
		for _, policy := range []provider.OverflowPolicy{provider.OverflowAtDeadline, provider.OverflowAlways, provider.OverflowNever} {
			name := string(policy)
			if name == "" {
				name = "deadline"
			}
			t.Run(fmt.Sprintf("%s-%d", name, run), func(t *testing.T) {
				plan := benchService(t, provider.Entry{Name: "plan", Dialect: provider.Classic, BaseURL: "http://x", KeyEnv: "K",
					Billing: provider.Billing{Threads: 15}, Role: provider.Primary}, int64(run+1), scale)
				over := benchService(t, provider.Entry{Name: "over", Dialect: provider.Classic, BaseURL: "http://x", KeyEnv: "K",
					Service: fakeapi.Service2Captcha, Methods: []string{"userrecaptcha"},
					Billing: provider.Billing{Per1000: map[string]float64{"userrecaptcha": 2.99}}, Role: provider.Overflow}, int64(run+100), scale)
				set, err := provider.New(provider.Config{Members: []provider.Member{plan.member, over.member}, Overflow: policy})
				require.NoError(t, err)
				env := streamtest.Start(t, streamtest.WithWorkers(0))
				env.StartWorker(stream.WorkerConfig{Solver: set, Threads: 400})
				ids := make([]string, n)
				var wg sync.WaitGroup
				for w := range 8 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := w; i < n; i += 8 {
							id := fmt.Sprintf("o%d-%d", run, i)
							_, err := env.Client.Submit(t.Context(), stream.Task{ID: id, Method: "userrecaptcha", Params: benchParams(i),
								Deadline: time.Now().Add(deadline)})
							if err == nil {
								ids[i] = id
							}
						}
					}()
				}
				wg.Wait()
				inTime := 0
				for _, id := range ids {
					require.NotEmpty(t, id)
					wctx, cancel := context.WithTimeout(t.Context(), 30*time.Minute)
					o, err := env.Client.Wait(wctx, id)
					cancel()
					if err == nil && o.Status == stream.StatusSolved {
						inTime++
					}
				}
				ps, os := plan.api.Stats(), over.api.Stats()
				t.Logf("overflow ×%g %s run %d: %d of %d solved in time (%.1f %%); plan %d, overflow %d accepted; overflow spend %.4f",
					scale, name, run, inTime, n, 100*float64(inTime)/n, ps.Submitted, os.Submitted, os.Spent)
				require.Empty(t, ps.Repeated())
				require.Empty(t, os.Repeated())
			})
		}
	}
}
