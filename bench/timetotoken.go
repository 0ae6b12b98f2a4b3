package main

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
)

// The time-to-token rows: the configuration users run (a plan of 15
// threads, five workers of 20 threads, every worker flag at its default),
// the plan told to the server or not, and a fresh pool on a fast service.

// workerDefaults are the solver settings of `captchaq worker` with every
// flag at its default (--poll-batch off, --share-timings 30s).
var workerDefaults = solverScenario{timing: solver.Timing{NoBatch: true}, share: 30 * time.Second}

// uniformSolveTimes has every kind ready uniformly within [lo, hi].
func uniformSolveTimes(lo, hi time.Duration) map[string]fakeapi.Range {
	r := fakeapi.Range{Min: lo, Max: hi}
	return map[string]fakeapi.Range{fakeapi.KindRecaptcha: r, fakeapi.KindTurnstile: r, fakeapi.KindImage: r}
}

// userRow is the users' configuration: plan 15, 5 × 20 worker threads,
// solves of 5–15 s, default worker flags; with quota the plan is told
// (`captchaq server --plan-threads 15`), with early also --plan-early.
func userRow(name string, quota, early bool) solverScenario {
	sc := workerDefaults
	sc.name, sc.plan, sc.workers, sc.threads = name, 15, 5, 20
	sc.solve = uniformSolveTimes(5*time.Second, 15*time.Second)
	sc.quota, sc.early = quota, early
	sc.learnPlan = !quota // --learn-plan (default on) works only without a quota
	return sc
}

func (b *bench) timeToToken() error {
	const scale = 0.1
	window := b.measuredWindow()
	fmt.Printf("## Time to token: the configuration users run\n\n")
	fmt.Printf("Plan 15 threads at the emulator (CaptchaAI as documented: no multi-id polls), five workers of 20 threads, every kind solved in 5–15 s (uniform), "+
		"the workers' flags at their defaults (adaptive polling one by one, timings shared through the bucket every 30 s of real time); time scale %.2f; "+
		"a warm-up of one minute (real) and 20 answers of each kind, then a window of %s wall clock (%s real). "+
		"Plan used = throughput ÷ Little's limit (plan ÷ mean solve) in that window.\n\n", scale, window, time.Duration(float64(window)/scale))
	t := table{head: []string{"scenario", "solved", "mean solve", "plan used (throughput ÷ limit)", "busy ÷ plan", "mean / p95 pickup lag",
		"res.php per solve", "in.php calls", "refused for capacity", "longest refusal run", "failed attempts"}}
	pingback := userRow("plan told, CaptchaAI calls back (`worker --pingback-listen … --pingback-url …`)", true, false)
	pingback.pingback, pingback.service = true, fakeapi.ServiceCaptchaAI
	rows := []solverScenario{
		userRow("plan told (`server --plan-threads 15`), no `--plan-early`", true, false),
		userRow("plan told, `--plan-early`", true, true),
		userRow("plan not told (workers learn it: `--learn-plan`, the default)", false, false),
		pingback,
	}
	for _, sc := range rows {
		if !b.selected(sc.name) {
			continue
		}
		b.log.Info("time to token", slog.String("scenario", sc.name))
		r, err := runSolverBound(b.ctx, sc, scale, window)
		if err != nil {
			return fmt.Errorf("%s: %w", sc.name, err)
		}
		refused := fmt.Sprintf("%d (%.1f %%)", r.Refused, 100*float64(r.Refused)/float64(max(r.InCalls, 1)))
		t.add(sc.name, fmt.Sprint(r.Solved), ms(r.MeanSolve), fmt.Sprintf("%.1f %%", 100*r.Throughput/r.Limit), fmt.Sprintf("%.1f %%", 100*r.Busy),
			ms(r.LagMean)+" / "+ms(r.LagP95), fmt.Sprintf("%.2f", r.ResPerSolve), fmt.Sprint(r.InCalls), refused, fmt.Sprint(r.RefusedRun), failures(r.Failed))
	}
	fmt.Printf("%s\n", t.String())

	cold := workerDefaults
	cold.name, cold.plan, cold.workers, cold.threads = "cold start: a fresh pool, 200 mixed tasks, service answering in 0.2–2 s, 2 workers × 10 threads", 20, 2, 10
	cold.solve = uniformSolveTimes(coldSolveMin, coldSolveMax)
	cold.learnPlan = true
	if !b.selected(cold.name) {
		return nil
	}
	const coldScale = 0.5
	b.log.Info("time to token", slog.String("scenario", cold.name))
	r, err := runColdStart(b.ctx, cold, coldScale, 200)
	if err != nil {
		return fmt.Errorf("%s: %w", cold.name, err)
	}
	fmt.Printf("Cold start at time scale %.2f: no warm-up, an empty timings bucket; pickup lag (ready → the res.php reply that carried the answer) over every task, and over those after the first 20.\n\n", coldScale)
	ct := table{head: []string{"scenario", "solved", "wall clock (real)", "mean pickup lag", "p95 pickup lag", "mean lag after 20 answers", "res.php per solve",
		"least lag at these calls", "times CaptchaAI's pace"}}
	floor, _ := lagFloor(coldSolveMin, coldSolveMax, r.resPerSolve)
	ct.add(cold.name, fmt.Sprint(r.solved), ms(r.took), ms(r.lagMean), ms(r.lagP95), ms(r.lagLater), fmt.Sprintf("%.2f", r.resPerSolve),
		ms(floor), fmt.Sprintf("%.1f", paceMultiple(r.resPerSolve, coldMeanSolve+r.lagMean)))
	fmt.Printf("%s\n", ct.String())
	printColdFloor()
	return nil
}

// The cold-start row's service answers every kind uniformly in
// [coldSolveMin, coldSolveMax] (real time).
const (
	coldSolveMin  = 200 * time.Millisecond
	coldSolveMax  = 2 * time.Second
	coldMeanSolve = (coldSolveMin + coldSolveMax) / 2
)

// captchaAIPace is CaptchaAI's recommended poll frequency, a poll every 5 s
// per task ("Poll frequency: Recommended: every 5 seconds per task",
// blog.captchaai.com/rate-limits-and-throttling); captchaq's default
// res.php budget on CaptchaAI is three times it (solver.Timing.PollPace).
const captchaAIPace = 5 * time.Second

// paceMultiple is how many times CaptchaAI's recommended pace a captcha
// polled calls times over a life of life (submission to pickup) is asked.
func paceMultiple(calls float64, life time.Duration) float64 {
	return calls / (float64(life) / float64(captchaAIPace))
}

// printColdFloor prints what the cold row's lag can be at best: the least
// mean lag of any schedule within three times CaptchaAI's pace (the
// default budget), and the calls a lag of 0.5 s would take.
func printColdFloor() {
	// Within three times the pace, a captcha alive for (mean solve + lag)
	// may be asked 3·life/5 s times; the lag falls with the calls, so the
	// budget is the fixed point of calls = 3·(mean solve + floor(calls))/5 s.
	calls := 1.0
	for range 50 {
		l, _ := lagFloor(coldSolveMin, coldSolveMax, calls)
		calls = max(1, 3*float64(coldMeanSolve+l)/float64(captchaAIPace))
	}
	atPace, _ := lagFloor(coldSolveMin, coldSolveMax, calls)
	want := 500 * time.Millisecond
	need := callsForLag(coldSolveMin, coldSolveMax, want)
	needLag, _ := lagFloor(coldSolveMin, coldSolveMax, need)
	fmt.Printf("The floor on this service (ready uniformly in %s–%s; a schedule that knows it exactly and pays no HTTP time): "+
		"within three times CaptchaAI's pace (%.2f calls per captcha) no schedule picks answers up sooner than %s after they are ready on average; "+
		"a mean lag of %s takes %.2f calls per captcha, %.1f times the pace.\n\n",
		coldSolveMin, coldSolveMax, calls, ms(atPace), ms(want), need, paceMultiple(need, coldMeanSolve+needLag))
}

type coldResult struct {
	solved                    int
	took                      time.Duration
	lagMean, lagP95, lagLater time.Duration
	resPerSolve               float64
}

// runColdStart submits n mixed tasks to a fresh pool of sc and waits until
// each is solved or dead; times are real-time equivalents.
func runColdStart(ctx context.Context, sc solverScenario, scale float64, n int) (coldResult, error) {
	var res coldResult
	p, err := startPool(ctx, sc, scale)
	if err != nil {
		return res, err
	}
	defer p.stop()
	tasks := make([]stream.Task, n)
	for i := range tasks {
		tasks[i] = mixedTask(i)
	}
	if _, err := p.client.SubmitAll(ctx, tasks); err != nil {
		return res, fmt.Errorf("submit %d tasks: %w", n, err)
	}
	var ended, solved atomic.Int64
	all := make(chan struct{})
	start := time.Now()
	err = p.run(ctx, stream.ObserverFunc(func(o stream.Observation) {
		switch o.Kind {
		case stream.EventSolved:
			solved.Add(1)
		case stream.EventDead:
		default:
			return
		}
		if ended.Add(1) == int64(n) {
			close(all)
		}
	}))
	if err != nil {
		return res, err
	}
	select {
	case <-all:
	case <-time.After(10 * time.Minute):
		return res, fmt.Errorf("%d of %d tasks ended in 10 minutes", ended.Load(), n)
	case <-ctx.Done():
		return res, ctx.Err()
	}
	toReal := func(d time.Duration) time.Duration { return time.Duration(float64(d) / scale) }
	res.took = toReal(time.Since(start))
	res.solved = int(solved.Load())
	lags := p.emu.PickupLags(0)
	if len(lags) == 0 {
		return res, fmt.Errorf("nothing picked up")
	}
	mean := func(l []time.Duration) time.Duration {
		var s time.Duration
		for _, d := range l {
			s += d
		}
		return s / time.Duration(max(len(l), 1))
	}
	res.lagMean = toReal(mean(lags))
	res.lagLater = toReal(mean(lags[min(20, len(lags)):]))
	sorted := slices.Sorted(slices.Values(lags))
	res.lagP95 = toReal(sorted[len(sorted)*95/100])
	st := p.emu.Stats()
	res.resPerSolve = float64(st.ResCalls) / float64(max(res.solved, 1))
	return res, nil
}
