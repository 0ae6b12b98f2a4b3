package main

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
)

// gif1x1 is the smallest valid image task: a 1×1 GIF, base64.
const gif1x1 = "R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7"

// realisticSolveTimes are the solve times of the solver-bound run, uniform on
// each range: reCAPTCHA v2 15–60 s, Turnstile 5–15 s, images 2–8 s.
func realisticSolveTimes() map[string]fakeapi.Range {
	return map[string]fakeapi.Range{
		fakeapi.KindRecaptcha: {Min: 15 * time.Second, Max: 60 * time.Second},
		fakeapi.KindTurnstile: {Min: 5 * time.Second, Max: 15 * time.Second},
		fakeapi.KindImage:     {Min: 2 * time.Second, Max: 8 * time.Second},
	}
}

// mixedTask is task i of the solver-bound run: reCAPTCHA v2, Turnstile and
// an image in turn.
func mixedTask(i int) stream.Task {
	id := "s" + strconv.Itoa(i)
	switch i % 3 {
	case 0:
		return stream.Task{ID: id, Method: "userrecaptcha", Params: stream.Params{"googlekey": "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-", "pageurl": "https://shop.example/login"}}
	case 1:
		return stream.Task{ID: id, Method: "turnstile", Params: stream.Params{"sitekey": "0x4AAAAAAAB", "pageurl": "https://shop.example/checkout"}}
	default:
		return stream.Task{ID: id, Method: "base64", Params: stream.Params{"body": gif1x1}}
	}
}

// fastSolveTimes are a service faster than the default first polls
// assume: every kind ready in 0.5–1.3 s.
func fastSolveTimes() map[string]fakeapi.Range {
	r := fakeapi.Range{Min: 500 * time.Millisecond, Max: 1300 * time.Millisecond}
	return map[string]fakeapi.Range{fakeapi.KindRecaptcha: r, fakeapi.KindTurnstile: r, fakeapi.KindImage: r}
}

// solverScenario is one row of the solver-bound table.
type solverScenario struct {
	name   string
	plan   int // the emulator's threads
	timing solver.Timing
	batch  bool                     // the emulator answers multi-id polls
	solve  map[string]fakeapi.Range // nil: realisticSolveTimes
	// quota sets the plan-wide quota to plan (stream.Admin.SetPlan); early gives
	// its threads back when a captcha is probably solved (stream.PlanEarly).
	quota, early bool
	// learnPlan: no quota told, each worker's client learns its plan window.
	learnPlan bool
	// tellsPlan: the emulator answers threadsinfo with its threads, as
	// CaptchaAI does; otherwise it tells nothing (ERROR_BAD_PARAMETERS),
	// and a learning client finds the plan from refusals.
	tellsPlan bool
	// workers run, each with its own client and threads threads (0: plan).
	workers, threads int
	// pingback: the service calls back (solver.Pingback) instead of being
	// polled; the 2captcha profile unless service says otherwise.
	pingback bool
	// service is the emulated service and the client's profile (empty:
	// CaptchaAI, or 2captcha with pingback).
	service string
	// share: each worker merges its learned timings into the pool's every
	// share (at the run's time scale), as `captchaq worker --share-timings` does; 0: none.
	share time.Duration
	// scale overrides the table's time scale (0: the table's): sub-second
	// solves need a finer one, or the machine's scheduling noise, scaled
	// up, is what the row measures.
	scale float64
}

// solverBoundResult is one solver-bound run; times are real-time
// equivalents, counts are of the measured window.
type solverBoundResult struct {
	Solved      int // completions within the window
	MeanSolve   time.Duration
	Throughput  float64 // solves per real-time second
	Limit       float64 // plan ÷ mean solve, per real-time second
	Busy        float64 // time-average of captchas being solved ÷ plan
	LagMean     time.Duration
	LagP95      time.Duration
	ResPerSolve float64 // res.php calls per solve, a batch call shared among the captchas it asked about
	AskedMax    int     // the most res.php calls that asked about one captcha
	NotReady    float64 // res.php calls per solve that answered CAPCHA_NOT_READY
	Callbacks   int     // callbacks received (pingback)
	InCalls     int
	Refused     int            // in.php refused for capacity (ERROR_ZERO_BALANCE, ERROR_NO_SLOT_AVAILABLE)
	RefusedRun  int            // the most in.php calls refused for capacity in a row, whole run
	Window      int            // the learned plan windows' sum at the end (learnPlan)
	Failed      map[string]int // failed attempts (retried or dead) by code, whole run
}

// measuredWindow is the wall clock a solver-bound row measures over
// (-solver-window, else 30 s, 10 s with -quick).
func (b *bench) measuredWindow() time.Duration {
	if b.solverWindow > 0 {
		return b.solverWindow
	}
	return time.Duration(b.pick(10, 30)) * time.Second
}

func (b *bench) solverBound() error {
	const scale = 0.1
	window := b.measuredWindow()
	fmt.Printf("## 2. Solver-bound: captchaq end to end against the emulator over HTTP\n\n")
	fmt.Printf("Solve times uniform: realistic mix reCAPTCHA v2 15–60 s, Turnstile 5–15 s, images 2–8 s (one third each); the fast service 0.5–1.3 s for all three. "+
		"Time scale %.2f (0.5 for the fast-service rows; emulator `TimeScale`, solver `Timing.Scale`, in.php spacing and ban window scaled alike), so 1 s of wall clock is %.0f s of real time; "+
		"a warm-up of one minute (real) and 20 answers of each kind, then a measured window of %s wall clock (%s real). Times are real-time equivalents. "+
		"The emulator is the service as documented: no multi-id polls (`action=get&ids=…`) except in the row that says so; a full plan answers ERROR_ZERO_BALANCE (CaptchaAI's code). "+
		"Plan used = throughput ÷ Little's limit (plan ÷ mean solve); busy = time-average of the emulator's captchas being solved ÷ plan. "+
		"Pickup lag (ready → the first res.php reply that carried the answer), mean solve and res.php per solve are of the captchas picked up in the window.\n\n",
		scale, 1/scale, window, time.Duration(float64(window)/scale))
	t := table{head: []string{"scenario", "plan", "solved", "mean solve", "plan used (throughput ÷ limit)", "busy ÷ plan", "mean pickup lag", "p95 pickup lag",
		"res.php per solve", "of them CAPCHA_NOT_READY", "most res.php for one captcha", "in.php calls", "refused for capacity", "failed attempts"}}
	rows := []solverScenario{
		{name: "fixed 5 s (DESIGN's first polls, then every 5 s), one by one", plan: 50, timing: solver.Timing{Fixed: true, NoBatch: true}},
		{name: "adaptive, one by one (CLI default), worker threads = plan", plan: 50, timing: solver.Timing{NoBatch: true}},
		{name: "adaptive, quota told (`--plan-threads 50`), 2 × 50 worker threads", plan: 50, timing: solver.Timing{NoBatch: true}, quota: true, threads: 100},
		{name: "adaptive, quota told with early hand-out (`--plan-threads 50 --plan-early`), 2 × 50 worker threads", plan: 50,
			timing: solver.Timing{NoBatch: true}, quota: true, early: true, threads: 100},
		{name: "fixed 5 s, quota told with early hand-out (`--plan-threads 50 --plan-early`), 2 × 50 worker threads", plan: 50,
			timing: solver.Timing{Fixed: true, NoBatch: true}, quota: true, early: true, threads: 100},
		{name: "unconfigured plan: no quota, 5 workers × 20 threads, plan windows learned (`--learn-plan`)", plan: 50,
			timing: solver.Timing{NoBatch: true}, learnPlan: true, workers: 5, threads: 20},
		{name: "unconfigured plan, no learning (before): 5 workers × 20 threads", plan: 50, timing: solver.Timing{NoBatch: true}, workers: 5, threads: 20},
		{name: "fast service (0.5–1.3 s), adaptive, one by one", plan: 5, timing: solver.Timing{NoBatch: true}, solve: fastSolveTimes(), scale: 0.5},
		{name: "fast service (0.5–1.3 s), fixed 5 s", plan: 5, timing: solver.Timing{Fixed: true, NoBatch: true}, solve: fastSolveTimes(), scale: 0.5},
		{name: "pingback (2captcha profile: the service calls back), worker threads = plan", plan: 50, timing: solver.Timing{NoBatch: true}, pingback: true},
		{name: "adaptive + batch, emulator WITH multi-id polls (not in CaptchaAI's docs)", plan: 50, timing: solver.Timing{}, batch: true},
	}
	for _, sc := range rows {
		if !b.selected(sc.name) {
			continue
		}
		b.log.Info("solver-bound", slog.String("scenario", sc.name))
		s := scale
		if sc.scale > 0 {
			s = sc.scale
		}
		r, err := runSolverBound(b.ctx, sc, s, window)
		if err != nil {
			return fmt.Errorf("%s: %w", sc.name, err)
		}
		refused := fmt.Sprintf("%d (%.1f %%)", r.Refused, 100*float64(r.Refused)/float64(max(r.InCalls, 1)))
		plan := fmt.Sprint(sc.plan)
		if sc.learnPlan {
			plan += fmt.Sprintf(" (learned: %d)", r.Window)
		}
		t.add(sc.name, plan, fmt.Sprint(r.Solved), ms(r.MeanSolve), fmt.Sprintf("%.1f %%", 100*r.Throughput/r.Limit), fmt.Sprintf("%.1f %%", 100*r.Busy),
			ms(r.LagMean), ms(r.LagP95), fmt.Sprintf("%.2f", r.ResPerSolve), fmt.Sprintf("%.2f", r.NotReady), fmt.Sprint(r.AskedMax), fmt.Sprint(r.InCalls), refused, failures(r.Failed))
	}
	fmt.Printf("%s\n", t.String())
	fmt.Printf("res.php per solve counts HTTP calls: a batch call (`action=get&ids=…`) is shared equally among the captchas it asked about. " +
		"A refused in.php costs no attempt: the task is snoozed and tried again.\n\n")
	return nil
}

// runSolverBound runs captchaq end to end against the emulator over HTTP,
// time-scaled by scale, for window of wall clock after a minute (real) of
// warm-up, and measures throughput against Little's law.
func runSolverBound(ctx context.Context, sc solverScenario, scale float64, window time.Duration) (solverBoundResult, error) {
	var res solverBoundResult
	solve := sc.solve
	if solve == nil {
		solve = realisticSolveTimes()
	}
	var meanSolve time.Duration // of the mix, one third each kind
	for _, r := range solve {
		meanSolve += (r.Min + r.Max) / 2 / time.Duration(len(solve))
	}
	scaled := func(d time.Duration) time.Duration { return time.Duration(float64(d) * scale) }
	p, err := startPool(ctx, sc, scale)
	if err != nil {
		return res, err
	}
	defer p.stop()
	emu, tp, client := p.emu, p.tap, p.client
	// Enough tasks that the queue never runs dry: 1.5× what the plan can
	// solve in the warm-up and the window.
	warm := scaled(time.Minute)
	perSec := float64(sc.plan) / scaled(meanSolve).Seconds()
	n := int(1.5*perSec*(warm+window+time.Second).Seconds()) + 2*sc.plan
	tasks := make([]stream.Task, n)
	for i := range tasks {
		tasks[i] = mixedTask(i)
	}
	if _, err := client.SubmitAll(ctx, tasks); err != nil {
		return res, fmt.Errorf("prefill %d tasks: %w", n, err)
	}

	var solvedAt sync.Map // task completion times, ns
	var solvedN atomic.Int64
	var failedMu sync.Mutex
	res.Failed = map[string]int{}
	byMethod := map[string]int{} // solves by method, guarded by failedMu
	err = p.run(ctx, stream.ObserverFunc(func(o stream.Observation) {
		switch o.Kind {
		case stream.EventSolved:
			solvedAt.Store(solvedN.Add(1), time.Now())
			failedMu.Lock()
			byMethod[o.Method]++
			failedMu.Unlock()
		case stream.EventRetry, stream.EventDead:
			failedMu.Lock()
			res.Failed[o.Code]++
			failedMu.Unlock()
		}
	}))
	if err != nil {
		return res, err
	}

	// Warm up for a minute, and until 20 answers of each kind came.
	select {
	case <-time.After(warm):
	case <-ctx.Done():
		return res, ctx.Err()
	}
	learned := func() bool {
		failedMu.Lock()
		defer failedMu.Unlock()
		return len(byMethod) == 3 && byMethod["userrecaptcha"] >= 20 && byMethod["turnstile"] >= 20 && byMethod["base64"] >= 20
	}
	for !learned() {
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return res, ctx.Err()
		}
	}
	// The window: sample the emulator's concurrency every 20 ms.
	base := emu.Stats()
	start := time.Now()
	var busySum float64
	samples := 0
	tick := time.NewTicker(20 * time.Millisecond)
	for time.Since(start) < window {
		select {
		case <-tick.C:
		case <-ctx.Done():
			tick.Stop()
			return res, ctx.Err()
		}
		busySum += float64(emu.Stats().Concurrent)
		samples++
	}
	tick.Stop()
	end := time.Now()
	after := emu.Stats()
	lags := emu.PickupLags(base.Pickups)
	for _, c := range p.clients {
		res.Window += c.PlanWindow()
	}
	solvedAt.Range(func(_, v any) bool {
		if t := v.(time.Time); !t.Before(start) && t.Before(end) {
			res.Solved++
		}
		return true
	})
	toReal := func(d time.Duration) time.Duration { return time.Duration(float64(d) / scale) }
	res.Busy = busySum / float64(samples) / float64(sc.plan)
	res.Throughput = float64(res.Solved) / toReal(end.Sub(start)).Seconds()
	if len(lags) == 0 {
		return res, fmt.Errorf("nothing picked up in the window")
	}
	var lagSum time.Duration
	for _, l := range lags {
		lagSum += l
	}
	slices.Sort(lags)
	res.LagMean = toReal(lagSum / time.Duration(len(lags)))
	res.LagP95 = toReal(lags[len(lags)*95/100])
	// Mean solve time and calls: from in.php to first answered res.php, less
	// the pickup lag, over the captchas picked up in the window (in a steady
	// state, completions in a window sample the solve times without bias).
	tp.mu.Lock()
	var sum time.Duration
	var picked int
	var calls float64
	var notReady int
	for id, pt := range tp.pick {
		if it, ok := tp.in[id]; ok && !pt.Before(start) && pt.Before(end) {
			sum += pt.Sub(it)
			picked++
			calls += tp.res[id]
			notReady += tp.nr[id]
			res.AskedMax = max(res.AskedMax, tp.n[id])
		}
	}
	res.RefusedRun = tp.refusedMax
	tp.mu.Unlock()
	if picked == 0 {
		return res, fmt.Errorf("nothing submitted and solved in the window")
	}
	res.MeanSolve = toReal(sum/time.Duration(picked)) - res.LagMean
	res.Limit = float64(sc.plan) / res.MeanSolve.Seconds()
	res.ResPerSolve = calls / float64(picked)
	res.NotReady = float64(notReady) / float64(picked)
	if p.pb != nil {
		res.Callbacks = p.pb.Callbacks()
	}
	res.InCalls = after.InCalls - base.InCalls
	for _, code := range []string{"ERROR_ZERO_BALANCE", "ERROR_NO_SLOT_AVAILABLE"} {
		res.Refused += after.Codes[code] - base.Codes[code]
	}
	return res, nil
}

// failures lists failed attempts by code, "0" when there were none.
func failures(m map[string]int) string {
	if len(m) == 0 {
		return "0"
	}
	var parts []string
	for _, code := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", code, m[code]))
	}
	return strings.Join(parts, ", ")
}
