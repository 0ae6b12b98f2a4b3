package solver

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/captchaq/captchaq/solver/internal/schedule"
)

// lognormal draws n solve times with the given median, 99th percentile at
// max, and a floor, like the emulator's defaults.
func lognormal(seed uint64, n int, floor, median, max time.Duration) []time.Duration {
	r := rand.New(rand.NewPCG(seed, seed))
	sigma := math.Log(float64(max)/float64(median)) / 2.326
	out := make([]time.Duration, 0, n)
	for len(out) < n {
		d := time.Duration(float64(median) * math.Exp(sigma*r.NormFloat64()))
		if d >= floor && d <= max {
			out = append(out, d)
		}
	}
	return out
}

// observeBy returns what polling at s observes of a solve time: the window
// between the last poll before it and the first poll at or after it.
func observeBy(s []time.Duration, d time.Duration) readyWindow {
	lo := time.Duration(0)
	for _, p := range s {
		if p >= d {
			return readyWindow{Lo: lo, Hi: p}
		}
		lo = p
	}
	return readyWindow{Lo: lo, Hi: d}
}

// planFor returns the schedule of kind's captchas that do not probe.
func (p *poller) planFor(kind string, k kindTiming) []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats(kind).planned(k)
}

// TestAdaptiveNeverWorse learns solve times as the client does — each solve
// polls on the schedule of the moment and what it observes feeds the next —
// then checks on fresh solves that the adaptive schedule picks answers up no
// later than fixed polling within its budget (the fixed schedule's calls,
// or the service's pace where the documented first poll comes after most
// solves: pacedCalls), and sooner where the fixed schedule fits the solve
// times badly.
func TestAdaptiveNeverWorse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		kind               string
		floor, median, top time.Duration
		better             bool // adaptive must win clearly on lag
	}{
		{KindRecaptcha, 8 * time.Second, 18 * time.Second, 60 * time.Second, false},
		{KindRecaptcha, 5 * time.Second, 10 * time.Second, 40 * time.Second, true},
		{KindRecaptcha, 15 * time.Second, 35 * time.Second, 90 * time.Second, false},
		{KindTurnstile, 2 * time.Second, 6 * time.Second, 25 * time.Second, true},
		{KindImage, 1 * time.Second, 3 * time.Second, 12 * time.Second, false},
		{KindGeeTest, 5 * time.Second, 12 * time.Second, 45 * time.Second, false},
	}
	for _, tt := range tests {
		k := Timing{}.forKind(tt.kind)
		var p poller
		for _, d := range lognormal(1, 400, tt.floor, tt.median, tt.top) {
			w := observeBy(p.schedule(tt.kind, k), d)
			p.observe(tt.kind, w.Lo, w.Hi)
		}
		adaptive := p.planFor(tt.kind, k)
		var test []readyWindow
		for _, d := range lognormal(2, 3000, tt.floor, tt.median, tt.top) {
			test = append(test, readyWindow{Lo: d, Hi: d})
		}
		fc, fl := evaluate(k.fixedSchedule(), test)
		ac, al := evaluate(adaptive, test)
		// The budget: the fixed schedule's calls, or the service's pace
		// where the documented first poll comes after most solves.
		budget := fc
		if tt.median < k.first {
			pc, _ := evaluate(pacedTiming(tt.kind).forKind(tt.kind).fixedSchedule(), test)
			budget = max(fc, pc)
		}
		t.Logf("%s median %v: fixed %.2f calls %.2fs lag; adaptive %.2f calls %.2fs lag (budget %.2f); %v…", tt.kind, tt.median, fc, fl, ac, al, budget, adaptive[:5])
		if al > fl*1.02 || ac > budget*1.05 {
			t.Errorf("%s median %v: adaptive (%.2f calls, %.2fs) worse than fixed (%.2f calls, %.2fs) or over the budget %.2f", tt.kind, tt.median, ac, al, fc, fl, budget)
		}
		if tt.better && al > fl*0.95 {
			t.Errorf("%s median %v: adaptive lag %.2fs not clearly below fixed %.2fs", tt.kind, tt.median, al, fl)
		}
		if len(adaptive) > k.maxCalls || adaptive[len(adaptive)-1] > k.maxWait {
			t.Errorf("%s: schedule of %d polls up to %v breaks the caps", tt.kind, len(adaptive), adaptive[len(adaptive)-1])
		}
		for i := 1; i < len(adaptive); i++ {
			if adaptive[i]-adaptive[i-1] < k.resolution {
				t.Errorf("%s: polls %v and %v closer than %v", tt.kind, adaptive[i-1], adaptive[i], k.resolution)
			}
		}
	}
}

// pollCosts runs the captchas ready at ready (after the first 100, which
// teach the schedule) through t's schedule of kind, and returns their mean
// pickup lag and res.php calls.
func pollCosts(t Timing, kind string, ready []time.Duration) (time.Duration, int) {
	var p poller
	lags, n := simulate(&p, kind, t.forKind(kind), 17, ready)
	c := 0
	for _, x := range n[100:] {
		c += x
	}
	return mean(lags[100:]), c
}

// pacedTiming is the service's own pace for kind: a poll every 5 s from
// submission, fixed (pacedCalls).
func pacedTiming(kind string) Timing {
	return Timing{Fixed: true, FirstPoll: map[string]time.Duration{kind: DefaultPollInterval}}
}

// TestAdaptiveBoundedSolveTimes: ready times bounded on both sides
// (reCAPTCHA uniform on 15–60 s) are not log-normal, and a log-normal fit
// finds no schedule better than the fixed one at its calls. Planned for the
// shape the answers show, the schedule picks answers up clearly sooner,
// over several samples, at no more calls than the service's pace (a poll
// every 5 s from submission) spends.
func TestAdaptiveBoundedSolveTimes(t *testing.T) {
	t.Parallel()
	var fixedLag, lag time.Duration
	var pacedCalls, calls int
	for seed := uint64(11); seed < 14; seed++ {
		ready := uniform(seed, 600, 15*time.Second, 60*time.Second)
		l, _ := pollCosts(Timing{Fixed: true}, KindRecaptcha, ready)
		fixedLag += l
		_, c := pollCosts(pacedTiming(KindRecaptcha), KindRecaptcha, ready)
		pacedCalls += c
		l, c = pollCosts(Timing{}, KindRecaptcha, ready)
		lag, calls = lag+l, calls+c
	}
	t.Logf("fixed: %v lag; paced: %d calls; adaptive: %v lag, %d calls", fixedLag/3, pacedCalls, lag/3, calls)
	if lag > fixedLag*95/100 {
		t.Errorf("adaptive mean lag %v, want clearly below the fixed schedule's %v", lag/3, fixedLag/3)
	}
	if calls > pacedCalls*102/100 {
		t.Errorf("adaptive spent %d res.php calls, the service's pace %d", calls, pacedCalls)
	}
}

// TestPacedBudget: a kind whose documented first poll (reCAPTCHA's 15 s)
// comes after every solve (5–15 s) costs the fixed schedule one call and
// half the solve window of lag. The adaptive schedule may spend what the
// service's pace would (a poll every 5 s per task), and no more; it picks
// answers up in well under half the fixed schedule's lag.
func TestPacedBudget(t *testing.T) {
	t.Parallel()
	ready := uniform(7, 600, 5*time.Second, 15*time.Second)
	fixedLag, fixedCalls := pollCosts(Timing{Fixed: true}, KindRecaptcha, ready)
	_, pacedCalls := pollCosts(pacedTiming(KindRecaptcha), KindRecaptcha, ready)
	lag, calls := pollCosts(Timing{}, KindRecaptcha, ready)
	t.Logf("fixed: %v lag, %d calls; paced: %d calls; adaptive: %v lag, %d calls", fixedLag, fixedCalls, pacedCalls, lag, calls)
	if calls > pacedCalls*102/100 {
		t.Errorf("adaptive spent %d res.php calls, the service's pace %d", calls, pacedCalls)
	}
	if lag > fixedLag*45/100 {
		t.Errorf("adaptive mean lag %v, want under 45 %% of the fixed schedule's %v", lag, fixedLag)
	}
}

// TestShaped: answers from a log-normal service leave the log-normal fit
// as it is; answers uniform on 15–60 s replace it by their own shape, which
// keeps almost no mass beyond the slowest answer.
func TestShaped(t *testing.T) {
	t.Parallel()
	k := Timing{}.forKind(KindRecaptcha)
	fixed := k.fixedSchedule()
	observed := func(ready []time.Duration) []readyWindow {
		var obs []readyWindow
		for _, d := range ready {
			obs = append(obs, observeBy(fixed, d))
		}
		return obs
	}
	grid := func(obs []readyWindow) schedule.Dist {
		mu, sigma := schedule.FitLogNormal(obs)
		return schedule.Discretize(mu, sigma, k.resolution, 180)
	}
	beyond := func(d schedule.Dist, t time.Duration) float64 {
		var m float64
		for i := int(t/k.resolution) + 1; i < len(d.Mass); i++ {
			m += d.Mass[i]
		}
		return m
	}

	obs := observed(lognormal(3, learnWindow, 8*time.Second, 18*time.Second, 60*time.Second))
	d := grid(obs)
	if got := schedule.Shaped(d, obs, 0, k.resolution); !slices.Equal(got.Mass, d.Mass) {
		t.Errorf("log-normal answers: the fit was replaced (mass beyond 60 s %.4f, fit's %.4f)", beyond(got, time.Minute), beyond(d, time.Minute))
	}
	if got := schedule.Shaped(d, obs[:schedule.ShapeMin-1], 0, k.resolution); !slices.Equal(got.Mass, d.Mass) {
		t.Errorf("%d answers: the fit was replaced", schedule.ShapeMin-1)
	}

	obs = observed(uniform(3, learnWindow, 15*time.Second, 60*time.Second))
	d = grid(obs)
	got := schedule.Shaped(d, obs, 0, k.resolution)
	if slices.Equal(got.Mass, d.Mass) {
		t.Fatalf("uniform answers: the log-normal fit was kept")
	}
	if b, fit := beyond(got, time.Minute), beyond(d, time.Minute); b > 0.01 || b > fit/4 {
		t.Errorf("uniform answers: mass beyond 60 s %.4f, want under 1 %% (the fit's: %.4f)", b, fit)
	}
}

func TestPollerFixedUntilLearned(t *testing.T) {
	t.Parallel()
	var p poller
	k := Timing{}.forKind(KindTurnstile)
	fixed := k.fixedSchedule()
	// Nothing known: the fixed schedule after a ladder of early polls at
	// halves of its first poll, within MaxCalls and up to MaxWait. 5 s
	// first poll, 1 s resolution: 312.5 ms, 625 ms, 1.25 s, 2.5 s.
	got := p.schedule(KindTurnstile, k)
	rungs := []time.Duration{312500 * time.Microsecond, 625 * time.Millisecond, 1250 * time.Millisecond, 2500 * time.Millisecond}
	if !slices.Equal(got[:len(rungs)], rungs) || !slices.Equal(got[len(rungs):len(rungs)+5], fixed[:5]) {
		t.Errorf("schedule of an unknown kind = %v, want early polls %v, then the fixed one", got, rungs)
	}
	if len(got) != k.maxCalls || got[len(got)-1] != k.maxWait {
		t.Errorf("schedule of an unknown kind = %v, want %d polls up to %v", got, k.maxCalls, k.maxWait)
	}
	// Every answer so far was still being solved at 5 s: no early polls,
	// the fixed schedule until the kind is learned.
	for i := range minLearned - 1 {
		p.observe(KindTurnstile, 5*time.Second, 5*time.Second+time.Duration(i)*time.Millisecond)
	}
	if got := p.schedule(KindTurnstile, k); !slices.Equal(got, fixed) {
		t.Errorf("schedule before learning = %v, want the fixed one", got)
	}
	if got := p.schedule(KindTurnstile, Timing{Fixed: true}.forKind(KindTurnstile)); !slices.Equal(got, fixed) {
		t.Errorf("Fixed timing gave %v", got)
	}
}

func TestPollerConcurrent(t *testing.T) {
	t.Parallel()
	var p poller
	k := Timing{Scale: 0.001}.forKind(KindRecaptcha)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i, d := range lognormal(uint64(g), 50, 8*time.Millisecond, 18*time.Millisecond, 60*time.Millisecond) {
				s := p.schedule(KindRecaptcha, k)
				w := observeBy(s, d)
				p.observe(KindRecaptcha, w.Lo, w.Hi)
				if len(s) == 0 || len(s) > k.maxCalls {
					t.Errorf("goroutine %d solve %d: schedule of %d polls", g, i, len(s))
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestTimingDefaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		kind         string
		first, limit time.Duration
	}{
		{KindRecaptcha, 15 * time.Second, 180 * time.Second},
		{KindGeeTest, 15 * time.Second, 120 * time.Second},
		{KindRecaptchaV3, 10 * time.Second, 180 * time.Second},
		{KindTurnstile, 5 * time.Second, 120 * time.Second},
		{KindImage, 5 * time.Second, 120 * time.Second},
	}
	for _, tt := range tests {
		k := Timing{}.forKind(tt.kind)
		if k.first != tt.first || k.maxWait != tt.limit || k.interval != 5*time.Second || k.maxCalls != 20 {
			t.Errorf("%s: %+v, want first %v, max wait %v, every 5s, 20 calls", tt.kind, k, tt.first, tt.limit)
		}
		if s := k.fixedSchedule(); len(s) > 20 || s[0] != tt.first {
			t.Errorf("%s: fixed schedule %v", tt.kind, s)
		}
	}
	if k := (Timing{Scale: 0.001}).forKind(KindRecaptcha); k.first != 15*time.Millisecond || k.interval != 5*time.Millisecond {
		t.Errorf("scaled timing %+v, want 15 ms and 5 ms", k)
	}
}

// evaluate (the test's ground truth) returns the expected res.php calls and pickup lag (in seconds) of
// polling at times s for the distribution of obs. Mass after the last poll
// counts len(s) calls and no lag: the schedules compared all cover MaxWait.
func evaluate(s []time.Duration, obs []readyWindow) (calls, lag float64) {
	if len(obs) == 0 {
		return 0, 0
	}
	for _, o := range obs {
		lo, hi := o.Lo.Seconds(), o.Hi.Seconds()
		if hi-lo < 1e-12 {
			i, _ := slices.BinarySearch(s, o.Hi) // first poll ≥ hi
			if i == len(s) {
				calls += float64(len(s))
				continue
			}
			calls += float64(i + 1)
			lag += s[i].Seconds() - hi
			continue
		}
		prev := 0.0
		covered := 0.0
		for i, p := range s {
			pt := p.Seconds()
			a, b := math.Max(lo, prev), math.Min(hi, pt)
			if b > a {
				f := (b - a) / (hi - lo)
				covered += f
				calls += f * float64(i+1)
				lag += f * (pt - (a+b)/2)
			}
			prev = pt
			if pt >= hi {
				break
			}
		}
		calls += (1 - covered) * float64(len(s))
	}
	n := float64(len(obs))
	return calls / n, lag / n
}
