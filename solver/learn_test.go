package solver

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/captchaq/captchaq/solver/internal/schedule"
)

// simulate runs n captchas of kind through p, inFlight at a time, each
// submitted when one before it was answered, and polled at the schedule it
// got at submission; an answer teaches p only when it is fetched, as in
// Client.wait. It returns each captcha's pickup lag and res.php calls, in
// the order submitted.
func simulate(p *poller, kind string, k kindTiming, inFlight int, ready []time.Duration) (lags []time.Duration, calls []int) {
	type flying struct {
		i      int
		done   time.Duration // clock time of the fetch
		window readyWindow
	}
	var clock time.Duration
	var air []flying
	lags, calls = make([]time.Duration, len(ready)), make([]int, len(ready))
	next := 0
	for next < len(ready) || len(air) > 0 {
		for len(air) < inFlight && next < len(ready) {
			s := p.schedule(kind, k)
			w, n := observeBy(s, ready[next]), 0
			for _, at := range s {
				n++
				if at >= ready[next] {
					break
				}
			}
			lags[next], calls[next] = w.Hi-ready[next], n
			air = append(air, flying{next, clock + w.Hi, w})
			next++
		}
		slices.SortFunc(air, func(a, b flying) int { return int(a.done - b.done) })
		f := air[0]
		air = air[1:]
		clock = max(clock, f.done)
		p.observe(kind, f.window.Lo, f.window.Hi)
	}
	return lags, calls
}

func uniform(seed uint64, n int, lo, hi time.Duration) []time.Duration {
	r := rand.New(rand.NewPCG(seed, seed))
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = lo + time.Duration(r.Int64N(int64(hi-lo)))
	}
	return out
}

func mean(ds []time.Duration) time.Duration {
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}

// TestLearnsFasterService: a service that answers in about a second, while
// the schedule's first poll is at 5 s (images) or 15 s (reCAPTCHA), finds
// every answer at the first poll. The probes learn it: after the first 20
// answers, the answers are fetched within 1.5 s on average, and no captcha
// is polled more than MaxCalls times.
func TestLearnsFasterService(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{KindImage, KindTurnstile, KindRecaptcha} {
		k := Timing{}.forKind(kind)
		var p poller
		lags, calls := simulate(&p, kind, k, 10, uniform(3, 200, 500*time.Millisecond, 1300*time.Millisecond))
		after := mean(lags[20:])
		var sum int
		for _, n := range calls[20:] {
			sum += n
		}
		t.Logf("%s: mean lag %v in the first 20, %v after; %.2f res.php per captcha after; plan %v…",
			kind, mean(lags[:20]), after, float64(sum)/float64(len(calls)-20), p.planFor(kind, k)[:3])
		if after > 1500*time.Millisecond {
			t.Errorf("%s: mean pickup lag %v after 20 answers, want ≤ 1.5s", kind, after)
		}
		if m := slices.Max(calls); m > k.maxCalls {
			t.Errorf("%s: a captcha polled %d times, over %d", kind, m, k.maxCalls)
		}
	}
}

// TestNoProbingWhenBracketed: a kind whose answers are mostly found after a
// CAPCHA_NOT_READY (slower than the first poll) is never probed once
// learned, and costs its first captchas at most the early polls of a kind
// not learned yet.
func TestNoProbingWhenBracketed(t *testing.T) {
	t.Parallel()
	k := Timing{}.forKind(KindRecaptcha)
	var p poller
	_, calls := simulate(&p, KindRecaptcha, k, 10, uniform(4, 200, 15*time.Second, 60*time.Second))
	fixed := k.fixedSchedule()
	for i, d := range uniform(4, 200, 15*time.Second, 60*time.Second)[:minLearned] {
		w := observeBy(fixed, d)
		// At most the early polls of a kind not learned yet (coldLadder)
		// more than the fixed schedule.
		if n := slices.Index(fixed, w.Hi) + 1; calls[i] < n || calls[i] > n+coldRungs {
			t.Errorf("captcha %d: %d calls before anything was learned, want the fixed schedule's %d and at most %d early ones", i, calls[i], n, coldRungs)
		}
	}
	p.mu.Lock()
	probes := p.stats(KindRecaptcha).probes
	p.mu.Unlock()
	if probes != 0 {
		t.Errorf("%d captchas scheduled while probing, want none", probes)
	}
}

// TestProbeAt: the early poll halves the tightest left-censored bound, or
// the plan's first poll when that is earlier, stops once probeNeed
// observations have a lower bound, and never goes below a quarter of the
// resolution.
func TestProbeAt(t *testing.T) {
	t.Parallel()
	k := Timing{}.forKind(KindImage) // resolution 1 s
	fixed := k.fixedSchedule()
	left := func(n int, hi time.Duration) []readyWindow {
		return slices.Repeat([]readyWindow{{Lo: 0, Hi: hi}}, n)
	}
	tests := []struct {
		name string
		obs  []readyWindow
		base []time.Duration
		want time.Duration
	}{
		{"nothing seen", nil, fixed, 0},
		{"all at the first poll", left(5, 5*time.Second), fixed, 2500 * time.Millisecond},
		{"tighter bound seen", append(left(5, 5*time.Second), readyWindow{Lo: 0, Hi: 1200 * time.Millisecond}), fixed, 600 * time.Millisecond},
		{"plan polls earlier", left(5, 5*time.Second), []time.Duration{time.Second, 2 * time.Second}, 500 * time.Millisecond},
		{"enough lower bounds", append(left(5, 5*time.Second), slices.Repeat([]readyWindow{{Lo: 5 * time.Second, Hi: 10 * time.Second}}, probeNeed)...), fixed, 0},
		{"none left-censored", slices.Repeat([]readyWindow{{Lo: 5 * time.Second, Hi: 10 * time.Second}}, 3), fixed, 0},
		{"as early as it gets", left(5, 400*time.Millisecond), fixed, 0},
	}
	for _, tt := range tests {
		if got := probeAt(tt.obs, tt.base, k); got != tt.want {
			t.Errorf("%s: probeAt = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestLeftCensoredPullDown: observations that say only "ready before t"
// move the fit below t and, with more of them at smaller t, further down;
// they never hold it at or above their bound.
func TestLeftCensoredPullDown(t *testing.T) {
	t.Parallel()
	median := func(obs []readyWindow) time.Duration {
		mu, _ := schedule.FitLogNormal(obs)
		return time.Duration(math.Exp(mu))
	}
	bracketed := slices.Repeat([]readyWindow{{Lo: 4 * time.Second, Hi: 5 * time.Second}}, 10)
	withEarly := append(slices.Clone(bracketed), slices.Repeat([]readyWindow{{Lo: 0, Hi: time.Second}}, 10)...)
	if a, b := median(bracketed), median(withEarly); b >= a || b > 3*time.Second {
		t.Errorf("median %v of bracketed answers, %v with answers ready before 1 s: want it pulled down", a, b)
	}
	onlyLeft := slices.Repeat([]readyWindow{{Lo: 0, Hi: 5 * time.Second}}, 20)
	tighter := append(slices.Clone(onlyLeft), slices.Repeat([]readyWindow{{Lo: 0, Hi: 1250 * time.Millisecond}}, 20)...)
	if a, b := median(onlyLeft), median(tighter); a >= 5*time.Second || b >= a {
		t.Errorf("medians %v (ready before 5 s) and %v (half of them before 1.25 s): want below the bounds and falling", a, b)
	}
	// A service answering in 0.5–1.3 s, seen through a probe at 625 ms and
	// a first poll at 1.25 s: the fit finds it.
	var obs []readyWindow
	for _, d := range uniform(5, 64, 500*time.Millisecond, 1300*time.Millisecond) {
		obs = append(obs, observeBy([]time.Duration{625 * time.Millisecond, 1250 * time.Millisecond, 5 * time.Second}, d))
	}
	if m := median(obs); m < 700*time.Millisecond || m > 1100*time.Millisecond {
		t.Errorf("median %v of answers ready in 0.5–1.3 s, want 0.7–1.1 s", m)
	}
}

// TestPlanReachesSlowCaptchas: however densely the adaptive schedule polls
// where answers are likely, it is still polling when the slowest captchas
// of the kind are ready, within MaxCalls: none gives up (CodePollLimit)
// for want of calls.
func TestPlanReachesSlowCaptchas(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		kind   string
		lo, hi time.Duration
	}{
		{KindRecaptcha, 15 * time.Second, 60 * time.Second},
		{KindTurnstile, 5 * time.Second, 15 * time.Second},
		{KindImage, 2 * time.Second, 8 * time.Second},
	} {
		k := Timing{}.forKind(tt.kind)
		var p poller
		simulate(&p, tt.kind, k, 50, uniform(6, 400, tt.lo, tt.hi))
		for i := range 8 { // probing and not
			s := p.schedule(tt.kind, k)
			if len(s) > k.maxCalls || s[len(s)-1] < tt.hi {
				t.Errorf("%s schedule %d: %d polls ending at %v, want ≤ %d reaching %v: %v", tt.kind, i, len(s), s[len(s)-1], k.maxCalls, tt.hi, s)
			}
		}
	}
}

// TestPlanReachesTheDeadline: the first answers of a kind are its fastest,
// and a fit to them alone can plan polls that spend MaxCalls long before
// MaxWait. The plan then keeps its last calls for the rest of the wait:
// it still polls at MaxWait.
func TestPlanReachesTheDeadline(t *testing.T) {
	t.Parallel()
	k := Timing{}.forKind(KindRecaptcha)
	var p poller
	for i := range minLearned {
		p.observe(KindRecaptcha, 15*time.Second, 15*time.Second+time.Duration(i)*20*time.Millisecond)
	}
	s := p.planFor(KindRecaptcha, k)
	if len(s) > k.maxCalls || s[len(s)-1] != k.maxWait {
		t.Errorf("plan of %d polls %v, want ≤ %d ending at MaxWait %v", len(s), s, k.maxCalls, k.maxWait)
	}
	short := []time.Duration{15 * time.Second, 20 * time.Second, k.maxWait}
	if got := k.reserve(short); !slices.Equal(got, short) {
		t.Errorf("reserve changed %v, which spends few calls, to %v", short, got)
	}
}
