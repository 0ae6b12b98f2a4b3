package solver

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
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
			return readyWindow{lo, p}
		}
		lo = p
	}
	return readyWindow{lo, d}
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
// later than fixed polling without more calls, and sooner where the fixed
// schedule fits the solve times badly.
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
			p.observe(tt.kind, w.lo, w.hi)
		}
		adaptive := p.planFor(tt.kind, k)
		var test []readyWindow
		for _, d := range lognormal(2, 3000, tt.floor, tt.median, tt.top) {
			test = append(test, readyWindow{d, d})
		}
		fc, fl := evaluate(k.fixedSchedule(), test)
		ac, al := evaluate(adaptive, test)
		t.Logf("%s median %v: fixed %.2f calls %.2fs lag; adaptive %.2f calls %.2fs lag; %v…", tt.kind, tt.median, fc, fl, ac, al, adaptive[:5])
		if al > fl*1.02 || ac > fc*1.05 {
			t.Errorf("%s median %v: adaptive (%.2f calls, %.2fs) worse than fixed (%.2f calls, %.2fs)", tt.kind, tt.median, ac, al, fc, fl)
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

func TestPollerFixedUntilLearned(t *testing.T) {
	t.Parallel()
	var p poller
	k := Timing{}.forKind(KindTurnstile)
	for i := range minLearned - 1 {
		p.observe(KindTurnstile, 5*time.Second, 5*time.Second+time.Duration(i)*time.Millisecond)
	}
	if got := p.schedule(KindTurnstile, k); !slices.Equal(got, k.fixedSchedule()) {
		t.Errorf("schedule before learning = %v, want the fixed one", got)
	}
	if got := p.schedule(KindTurnstile, Timing{Fixed: true}.forKind(KindTurnstile)); !slices.Equal(got, k.fixedSchedule()) {
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
				p.observe(KindRecaptcha, w.lo, w.hi)
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
		lo, hi := o.lo.Seconds(), o.hi.Seconds()
		if hi-lo < 1e-12 {
			i, _ := slices.BinarySearch(s, o.hi) // first poll ≥ hi
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
