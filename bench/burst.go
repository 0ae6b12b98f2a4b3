package main

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream"
)

// The burst rows: what a QA suite, a nightly crawl or a checkout campaign
// does. Many mixed tasks submitted at once to a fresh pool (a new server, new
// workers, an empty timings bucket), measured from the first captcha the
// service accepts to the last outcome.

const (
	burstTasks = 300
	// burstScale is the default time scale of the burst rows (-burst-scale):
	// 0.2 runs a burst in a fifth of its real time; 1 runs it in real time,
	// to show the scaled rows are neither flattered nor punished by it.
	burstScale = 0.2
	// burstBucket is the timeline's bucket, in real time.
	burstBucket = 2 * time.Second
)

// burstRows are the users' configuration (userRow: plan 15, five workers of
// 20 threads, solves of 5–15 s, default worker flags), told the plan with
// the server's default early hand-back, told by the service (threadsinfo,
// every flag at its default: the server makes it the plan-wide quota), or
// not told (a service that tells nothing).
func burstRows() []solverScenario {
	byService := userRow("burst, plan told by the service (threadsinfo, the default on CaptchaAI)", false, false)
	byService.tellsPlan = true
	// Not a default: what polling past three times CaptchaAI's pace buys,
	// reported beside the told row it varies.
	paced := userRow("burst, plan told, `worker --poll-pace 5` (not the default 3)", true, true)
	paced.timing.PollPace = 5
	return []solverScenario{
		userRow("burst, plan told (`server --plan-threads 15`)", true, true),
		byService,
		userRow("burst, plan not told (`--learn-plan`)", false, false),
		paced,
	}
}

func (b *bench) burst() error {
	runs := max(b.burstRuns, 1)
	scale := b.burstScale
	if scale <= 0 {
		scale = burstScale
	}
	fmt.Printf("## Burst from cold\n\n")
	fmt.Printf("%d mixed tasks (reCAPTCHA v2, Turnstile, image in turn) submitted at once to a fresh pool: a new embedded server, new workers, an empty timings bucket. "+
		"Plan 15 threads at the emulator (CaptchaAI as documented), five workers of 20 threads, every kind solved in 5–15 s (uniform), every worker flag at its default; "+
		"time scale %.1f (solves, polls, in.php spacing and capacity snoozes alike). Span: the first captcha in.php accepts → the last outcome. "+
		"Plan used = thread-seconds busy at the emulator (accepted → ready, every captcha) ÷ (15 × span). Times are real-time equivalents. "+
		"Load average: the machine's 1-min figure before → after the run.\n\n", burstTasks, scale)
	t := table{head: []string{"scenario", "run", "plan used", "span", "solved / dead", "mean pickup lag", "in.php calls", "refused for capacity", "longest refusal run",
		"capacity snoozes (sum of delays)", "last acceptance → last outcome", "load average"}}
	var timeline string
	var resCalls, resSpan float64 // every run's res.php calls and spans (real s)
	for _, sc := range burstRows() {
		if !b.selected(sc.name) {
			continue
		}
		for i := range runs {
			b.log.Info("burst", slog.String("scenario", sc.name), slog.Int("run", i+1))
			before := loadAverage()
			r, err := runBurst(b.ctx, sc, scale, burstTasks)
			if err != nil {
				return fmt.Errorf("%s: %w", sc.name, err)
			}
			t.add(sc.name, fmt.Sprint(i+1), fmt.Sprintf("%.1f %%", 100*r.used), secs(r.span), fmt.Sprintf("%d / %d", r.solved, r.dead), secs(r.lagMean),
				fmt.Sprint(r.inCalls), fmt.Sprint(r.refused), fmt.Sprint(r.refusedRun), fmt.Sprintf("%d (%s)", r.snoozes, secs(r.snoozed)), secs(r.tail),
				before+" → "+loadAverage())
			if sc.timing.PollPace == 0 { // the bound below is the default budget's
				resCalls += float64(r.resCalls)
				resSpan += r.span.Seconds()
			}
			if timeline == "" {
				timeline = fmt.Sprintf("Busy threads at the emulator (of 15) in %.0f-s buckets of real time, the first run of %q; the span split into its first 20 %%, middle and last 20 %%:\n\n%s\n",
					burstBucket.Seconds(), sc.name, r.timeline())
			}
		}
	}
	fmt.Printf("%s\n", t.String())
	c := burstCeiling(200, burstTasks, 15, 5*time.Second, 15*time.Second)
	fmt.Printf("The ceiling: a scheduler that knows every solve time and loses nothing to latency, filling 15 threads first-come first-served from the burst, "+
		"uses %.1f–%.1f %% of the plan (mean %.1f %%, 200 simulated bursts).\n\n", 100*c.min, 100*c.max, 100*c.mean)
	if resSpan > 0 {
		// The ceiling of a pool that frees a thread only when res.php says
		// its captcha is ready, as a told plan does when the hand-back
		// keeps its margin: at the runs' own rate of calls, and at the
		// most the confirms may spend (CaptchaAI: three times a poll every
		// 5 s per captcha in flight, solver.CaptchaAI's askPace).
		rate := resCalls / resSpan
		budget := 3 * 15 / 5.0
		at := burstPollCeiling(20, burstTasks, 15, 5*time.Second, 15*time.Second, rate)
		full := burstPollCeiling(20, burstTasks, 15, 5*time.Second, 15*time.Second, budget)
		fmt.Printf("Learning readiness only from res.php: a scheduler that knows the solve times' distribution (not each one), asks the captcha likeliest ready since it was last asked, "+
			"and submits the next task the moment an answer comes, uses %.1f–%.1f %% of the plan (mean %.1f %%, 20 simulated bursts) at these runs' %.1f res.php calls a second (real), "+
			"and %.1f–%.1f %% (mean %.1f %%) at %.0f a second, three times a poll every 5 s per captcha on 15 threads.\n\n",
			100*at.min, 100*at.max, 100*at.mean, rate, 100*full.min, 100*full.max, 100*full.mean, budget)
	}
	fmt.Print(timeline)
	return nil
}

// burstPollCeiling simulates bursts of n solves uniform in [lo, hi] on
// plan threads, where a thread frees only when a poll finds its captcha
// ready: rate polls a second in all, evenly spaced, each asking the
// captcha likeliest to have become ready since it was last asked (the
// uniform distribution known, not each solve time), and the next task
// takes the thread at once. It returns the plan used over runs bursts,
// busy time (Σ solve) ÷ (plan × the last pickup). The seed is fixed.
func burstPollCeiling(runs, n, plan int, lo, hi time.Duration, rate float64) burstCeilingResult {
	rng := rand.New(rand.NewPCG(40, 2))
	l, h := lo.Seconds(), hi.Seconds()
	ready := func(age float64) float64 { return min(max((age-l)/(h-l), 0), 1) }
	type captcha struct{ start, solve, asked float64 } // asked: the age it was last seen not ready
	c := burstCeilingResult{min: 1}
	for range runs {
		var inFlight []captcha
		var total, t float64
		left := n
		submit := func() {
			for len(inFlight) < plan && left > 0 {
				d := l + rng.Float64()*(h-l)
				inFlight = append(inFlight, captcha{start: t, solve: d})
				total += d
				left--
			}
		}
		submit()
		for len(inFlight) > 0 {
			t += 1 / rate
			best, bp := 0, -1.0
			for i, x := range inFlight {
				p := 1.0
				if f := ready(x.asked); f < 1 {
					p = (ready(t-x.start) - f) / (1 - f)
				}
				if p > bp {
					best, bp = i, p
				}
			}
			if age := t - inFlight[best].start; age >= inFlight[best].solve {
				inFlight = slices.Delete(inFlight, best, best+1)
				submit()
			} else {
				inFlight[best].asked = age
			}
		}
		used := total / (float64(plan) * t)
		c.min, c.max = min(c.min, used), max(c.max, used)
		c.mean += used / float64(runs)
	}
	return c
}

// burstResult is one burst; times are real-time equivalents.
type burstResult struct {
	used              float64 // busy thread-seconds ÷ (plan × span)
	span              time.Duration
	solved, dead      int
	lagMean           time.Duration
	inCalls, refused  int
	resCalls          int
	refusedRun        int
	snoozes           int           // capacity snoozes
	snoozed           time.Duration // their delays' sum
	tail              time.Duration // the last acceptance → the last outcome
	plan              int
	samples           []busySample // from the first acceptance to the last outcome
	sampledUsed       float64      // used, from the samples: a check on the exact figure
	firstIn, lastDone time.Time
	scale             float64
	// learnedAt is when each worker's client first planned each kind's polls
	// from learned ready times (solver.Client.Knows), by kind.
	learnedAt map[string][]time.Time
	// lastPicked are the captchas whose answers were picked up last: when
	// each was accepted and asked about, from the first acceptance.
	lastPicked []string
	// firstWave counts the methods of the first plan captchas accepted;
	// learnFrom is when each method's learnAnswers-th answer was picked
	// up, from the first acceptance (real time).
	firstWave map[string]int
	learnFrom map[string]time.Duration
}

// learnAnswers is how many answers of a kind, the pool's, a Client plans it
// from (the solver's minLearned): a kind is learned when the pool has
// picked up that many.
const learnAnswers = 10

type busySample struct {
	at   time.Time
	busy int
	open int // accepted and not answered by res.php yet: busy, or ready and not picked up
}

// runBurst starts a fresh pool of sc at time scale scale, submits n mixed
// tasks at once and waits until each is solved or dead.
func runBurst(ctx context.Context, sc solverScenario, scale float64, n int) (burstResult, error) {
	res := burstResult{plan: sc.plan, scale: scale}
	p, err := startPool(ctx, sc, scale)
	if err != nil {
		return res, err
	}
	defer p.stop()
	var ended, solved, dead, snoozes, snoozed atomic.Int64
	var lastMu sync.Mutex
	var last time.Time
	all := make(chan struct{})
	err = p.run(ctx, stream.ObserverFunc(func(o stream.Observation) {
		switch o.Kind {
		case stream.EventSolved:
			solved.Add(1)
		case stream.EventDead:
			dead.Add(1)
		case stream.EventSnooze:
			if o.Code == "ERROR_ZERO_BALANCE" || o.Code == "ERROR_NO_SLOT_AVAILABLE" {
				snoozes.Add(1)
				snoozed.Add(int64(o.Delay))
			}
			return
		default:
			return
		}
		lastMu.Lock()
		last = time.Now()
		lastMu.Unlock()
		if ended.Add(1) == int64(n) {
			close(all)
		}
	}))
	if err != nil {
		return res, err
	}
	// Sample the emulator's captchas in solving every 20 ms of wall clock
	// until the last outcome.
	done := make(chan struct{})
	var sampling sync.WaitGroup
	kinds := []string{solver.KindRecaptcha, solver.KindTurnstile, solver.KindImage}
	res.learnedAt = map[string][]time.Time{}
	for _, k := range kinds {
		res.learnedAt[k] = make([]time.Time, len(p.clients))
	}
	sampling.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				now := time.Now()
				res.samples = append(res.samples, busySample{now, p.emu.Stats().Concurrent, p.tap.opened()})
				for _, k := range kinds {
					for i, c := range p.clients {
						if res.learnedAt[k][i].IsZero() && c.Knows(k) {
							res.learnedAt[k][i] = now
						}
					}
				}
			case <-done:
				return
			}
		}
	})
	tasks := make([]stream.Task, n)
	for i := range tasks {
		tasks[i] = mixedTask(i)
	}
	if _, err := p.client.SubmitAll(ctx, tasks); err != nil {
		close(done)
		sampling.Wait()
		return res, fmt.Errorf("submit %d tasks: %w", n, err)
	}
	select {
	case <-all:
	case <-time.After(10 * time.Minute):
		err = fmt.Errorf("%d of %d tasks ended in 10 minutes", ended.Load(), n)
	case <-ctx.Done():
		err = ctx.Err()
	}
	close(done)
	sampling.Wait()
	if err != nil {
		return res, err
	}
	toReal := func(d time.Duration) time.Duration { return time.Duration(float64(d) / scale) }
	lastMu.Lock()
	res.lastDone = last
	lastMu.Unlock()
	res.solved, res.dead = int(solved.Load()), int(dead.Load())
	res.snoozes, res.snoozed = int(snoozes.Load()), toReal(time.Duration(snoozed.Load()))

	// Busy thread-seconds: each captcha from its acceptance to its readiness,
	// that is from in.php to the res.php reply that carried its answer, less
	// the pickup lags (the emulator's, ready → that reply).
	lags := p.emu.PickupLags(0)
	var lagSum time.Duration
	for _, l := range lags {
		lagSum += l
	}
	res.lagMean = toReal(lagSum / time.Duration(max(len(lags), 1)))
	var busy time.Duration
	var lastIn time.Time
	p.tap.mu.Lock()
	for id, in := range p.tap.in {
		if res.firstIn.IsZero() || in.Before(res.firstIn) {
			res.firstIn = in
		}
		if in.After(lastIn) {
			lastIn = in
		}
		if pick, ok := p.tap.pick[id]; ok {
			busy += pick.Sub(in)
		}
	}
	res.refusedRun = p.tap.refusedMax
	ids := slices.Collect(maps.Keys(p.tap.pick))
	slices.SortFunc(ids, func(a, b string) int { return p.tap.pick[b].Compare(p.tap.pick[a]) })
	for _, id := range ids[:min(len(ids), 4)] {
		var asked []string
		for _, at := range p.tap.asked[id] {
			asked = append(asked, fmt.Sprintf("%.1f", toReal(at.Sub(res.firstIn)).Seconds()))
		}
		res.lastPicked = append(res.lastPicked, fmt.Sprintf("%s accepted at %.1f s, asked at %s s", id,
			toReal(p.tap.in[id].Sub(res.firstIn)).Seconds(), strings.Join(asked, ", ")))
	}
	res.firstWave, res.learnFrom = map[string]int{}, map[string]time.Duration{}
	byIn := slices.Collect(maps.Keys(p.tap.in))
	slices.SortFunc(byIn, func(a, b string) int { return p.tap.in[a].Compare(p.tap.in[b]) })
	for _, id := range byIn[:min(len(byIn), sc.plan)] {
		res.firstWave[p.tap.method[id]]++
	}
	picked := map[string]int{}
	for _, id := range slices.Backward(ids) { // the first picked up first
		m := p.tap.method[id]
		if picked[m]++; picked[m] == learnAnswers {
			res.learnFrom[m] = toReal(p.tap.pick[id].Sub(res.firstIn))
		}
	}
	p.tap.mu.Unlock()
	busy -= lagSum
	span := res.lastDone.Sub(res.firstIn)
	res.span, res.tail = toReal(span), toReal(res.lastDone.Sub(lastIn))
	res.used = busy.Seconds() / (float64(sc.plan) * span.Seconds())
	res.samples = slices.DeleteFunc(res.samples, func(s busySample) bool { return s.at.Before(res.firstIn) || s.at.After(res.lastDone) })
	var sum int
	for _, s := range res.samples {
		sum += s.busy
	}
	res.sampledUsed = float64(sum) / float64(max(len(res.samples), 1)) / float64(sc.plan)
	st := p.emu.Stats()
	res.inCalls, res.resCalls = st.InCalls, st.ResCalls
	for _, code := range []string{"ERROR_ZERO_BALANCE", "ERROR_NO_SLOT_AVAILABLE"} {
		res.refused += st.Codes[code]
	}
	return res, nil
}

// timeline is the run's busy threads in burstBucket buckets of real time,
// as three table rows: the span's first 20 %, its middle, its last 20 %.
func (r burstResult) timeline() string {
	bucket := time.Duration(float64(burstBucket) * r.scale)
	span := r.lastDone.Sub(r.firstIn)
	nb := int((span + bucket - 1) / bucket)
	sums, counts := make([]int, nb), make([]int, nb)
	// ready: solved and not picked up; empty: plan threads with no captcha
	// accepted at all (waiting for a task, a refusal, a submission).
	ready, empty := make([]int, nb), make([]int, nb)
	for _, s := range r.samples {
		i := min(int(s.at.Sub(r.firstIn)/bucket), nb-1)
		sums[i] += s.busy
		ready[i] += s.open - s.busy
		empty[i] += max(r.plan-s.open, 0)
		counts[i]++
	}
	t := table{head: []string{"part", "real time", "mean busy", "mean ready, not picked up", "mean with no captcha", "busy by bucket"}}
	real := func(d time.Duration) string { return fmt.Sprintf("%.0f s", d.Seconds()/r.scale) }
	part := func(name string, from, to time.Duration) {
		var cells []string
		var sum, rsum, esum, count int
		for i := range nb {
			mid := time.Duration(i)*bucket + bucket/2
			if mid < from || mid >= to || counts[i] == 0 {
				continue
			}
			cells = append(cells, fmt.Sprintf("%.1f", float64(sums[i])/float64(counts[i])))
			sum += sums[i]
			rsum += ready[i]
			esum += empty[i]
			count += counts[i]
		}
		mean := func(n int) float64 { return float64(n) / float64(max(count, 1)) }
		t.add(name, real(from)+"–"+real(min(to, span)), fmt.Sprintf("%.1f of %d", mean(sum), r.plan), fmt.Sprintf("%.1f", mean(rsum)),
			fmt.Sprintf("%.1f", mean(esum)), strings.Join(cells, " "))
	}
	fifth := span / 5
	part("first 20 %", 0, fifth)
	part("middle", fifth, span-fifth)
	part("last 20 %", span-fifth, span+bucket)
	var learned []string
	for _, k := range slices.Sorted(maps.Keys(r.learnedAt)) {
		var at []string
		for _, t := range r.learnedAt[k] {
			if t.IsZero() {
				at = append(at, "never")
				continue
			}
			at = append(at, real(t.Sub(r.firstIn)))
		}
		learned = append(learned, k+": "+strings.Join(at, ", "))
	}
	var wave, tenth []string
	for _, m := range slices.Sorted(maps.Keys(r.firstWave)) {
		wave = append(wave, fmt.Sprintf("%s %d", m, r.firstWave[m]))
	}
	for _, m := range slices.Sorted(maps.Keys(r.learnFrom)) {
		tenth = append(tenth, fmt.Sprintf("%s %.0f s", m, r.learnFrom[m].Seconds()))
	}
	return t.String() + fmt.Sprintf("\nThe last answers picked up: %s.\n", strings.Join(r.lastPicked, "; ")) + fmt.Sprintf("\nPlan used from the samples (every 20 ms of wall clock): %.1f %% (the table: %.1f %%). "+
		"Each worker's polls planned from learned ready times (not the documented fixed schedule) from, after the first acceptance: %s.\n",
		100*r.sampledUsed, 100*r.used, strings.Join(learned, "; ")) +
		fmt.Sprintf("The first %d captchas accepted, by method: %s. Each method's %dth answer (the pool's, from which a kind is learned) picked up at: %s.\n",
			r.plan, strings.Join(wave, ", "), learnAnswers, strings.Join(tenth, ", "))
}

// burstCeilingResult is the spread of the ceiling over simulated bursts.
type burstCeilingResult struct{ min, max, mean float64 }

// burstCeiling simulates bursts of n solves uniform in [lo, hi] on plan
// threads, each taken first-come first-served by the first thread to free
// with no latency at all, and returns the plan used (Σ solve ÷ (plan ×
// makespan)) over runs bursts. The seed is fixed: the same figures each run.
func burstCeiling(runs, n, plan int, lo, hi time.Duration) burstCeilingResult {
	rng := rand.New(rand.NewPCG(40, 1))
	c := burstCeilingResult{min: 1}
	for range runs {
		free := make([]float64, plan) // when each thread frees, seconds
		var total float64
		for range n {
			d := lo.Seconds() + rng.Float64()*(hi-lo).Seconds()
			total += d
			i := slices.Index(free, slices.Min(free))
			free[i] += d
		}
		used := total / (float64(plan) * slices.Max(free))
		c.min, c.max = min(c.min, used), max(c.max, used)
		c.mean += used / float64(runs)
	}
	return c
}

// secs formats d in seconds, two decimals.
func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

// loadAverage is the machine's 1-minute load average ("?" when unknown).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}
