// The adaptive poll schedule: the poll times that cost a kind's captchas
// the least lag for the res.php calls the fixed schedule spends.

package schedule

import (
	"math"
	"slices"
	"time"
)

// budgetSlack is how many calls per captcha beyond one the adaptive
// schedule may spend where the fixed schedule spends fewer: when the fixed
// schedule's first poll finds nearly every answer, an earlier first poll
// needs a second call for the few it misses.
const budgetSlack = 0.1

// tailShare is the share of captchas still being solved beyond which the
// adaptive schedule plans no polls of its own: the fixed interval polls on
// from there (Timing.Extend).
const tailShare = 0.001

// planGrid is the grid the adaptive schedule of a kind is planned on:
// Resolution, or, for a kind whose median ready time (e^μ) is under four
// of it, a quarter of that median, down to a quarter of Resolution. On a
// grid of a second a kind answered in about a second could only be polled
// at one or two seconds, which costs it most of a second of lag whatever
// its answers say; a finer grid lets its polls follow them, still within
// the same budget of calls.
func planGrid(mu float64, k Timing) time.Duration {
	g := k.Resolution
	if m := time.Duration(math.Exp(mu)) / 4; m < g {
		g = max(m, k.Resolution/4)
	}
	return max(g, 1)
}

// PlanAdaptive returns the adaptive poll times for the distribution of ready
// times that a log-normal fit (μ, σ of the log in nanoseconds) and the
// answers obs say together (Shaped; see the solver package doc), or the fixed
// schedule when it does not do better. prior is how many answers the fit
// counts as beyond obs.
func PlanAdaptive(mu, sigma float64, obs []Window, prior float64, k Timing) []time.Duration {
	fixed := k.FixedSchedule()
	g := planGrid(mu, k)
	horizon := min(time.Duration(math.Exp(mu+3.3*sigma))+2*g, k.MaxWait)
	n := int((horizon + g - 1) / g)
	if n < 2 || n > 4096 {
		return fixed
	}
	d := Shaped(Discretize(mu, sigma, g, n), obs, prior, g)
	fixedCalls, fixedLag := d.evaluate(fixed)
	budget := max(fixedCalls, 1+budgetSlack)
	if d.quantile(0.5, g) < k.First {
		budget = max(budget, pacedCalls(d, k))
	}

	// C[i], M[i]: probability and first moment (in grid units) of ready by
	// t(i) = i·g.
	C := make([]float64, n+1)
	M := make([]float64, n+1)
	for i := 1; i <= n; i++ {
		C[i] = C[i-1] + d.Mass[i]
		M[i] = M[i-1] + d.Mass[i]*d.pos[i]/float64(g)
	}
	const eps = 1e-9
	surv := func(j int) float64 { return math.Max(0, 1-C[j]) }

	W := make([]float64, n+1)
	next := make([]int, n+1)
	plan := func(lambda float64) []time.Duration {
		W[n] = 0
		for j := n - 1; j >= 0; j-- {
			if surv(j) <= eps {
				W[j], next[j] = 0, -1
				continue
			}
			best, arg := math.Inf(1), n
			cost := lambda * surv(j)
			for kk := j + 1; kk <= n; kk++ {
				v := cost + float64(kk)*(C[kk]-C[j]) - (M[kk] - M[j]) + W[kk]
				if v < best {
					best, arg = v, kk
				}
			}
			W[j], next[j] = best, arg
		}
		// Beyond the 99.9th percentile the fixed interval polls on
		// (extend): polls planned into a tail nothing was seen in would
		// spend MaxCalls on nearly nothing.
		// The grid's last cell may end past MaxWait (a grid that does not
		// divide it): its poll is at MaxWait, when the wait gives up.
		var s []time.Duration
		for j := 0; surv(j) > tailShare && next[j] > 0 && len(s) <= k.MaxCalls; j = next[j] {
			s = append(s, min(time.Duration(next[j])*g, k.MaxWait))
		}
		return s
	}

	// A schedule must still be polling when nearly every captcha is ready
	// (the distribution's 99.9th percentile, or MaxWait): one that spends
	// its MaxCalls sooner gives up on slow captchas (CodePollLimit).
	reach := min(d.quantile(1-tailShare, g), k.MaxWait, fixed[len(fixed)-1])
	covers := func(s []time.Duration) bool {
		e := k.Extend(slices.Clone(s))
		return len(e) > 0 && e[len(e)-1] >= reach
	}

	// bisect searches λ (lag in grid units per call) on a log scale for the
	// schedule at the edge of ok: ok holds for small λ (many calls, little
	// lag) up to some λ when low is set, and from some λ up otherwise. It
	// returns the schedule at that edge for which ok holds, nil if none.
	bisect := func(ok func([]time.Duration) bool, low bool) []time.Duration {
		lo, hi := math.Log(1e-4), math.Log(float64(n)*4)
		var best []time.Duration
		for range 40 {
			mid := (lo + hi) / 2
			s := plan(math.Exp(mid))
			good := ok(s) && len(s) <= k.MaxCalls && covers(s)
			switch {
			case good && low:
				best, lo = s, mid
			case good:
				best, hi = s, mid
			case low:
				hi = mid
			default:
				lo = mid
			}
		}
		return best
	}

	// The smallest λ whose schedule fits the call budget has the least lag.
	best := bisect(func(s []time.Duration) bool { calls, _ := d.evaluate(s); return calls <= budget }, false)
	if best != nil {
		if _, lag := d.evaluate(k.Extend(slices.Clone(best))); lag < fixedLag*0.98 {
			return best
		}
	}
	// No lag to win at the fixed schedule's cost: save calls instead, at no
	// more lag (a service slower than FirstPoll assumes): the largest λ
	// whose schedule lags no more than the fixed one.
	best = bisect(func(s []time.Duration) bool { _, lag := d.evaluate(k.Extend(slices.Clone(s))); return lag <= fixedLag }, true)
	if best != nil {
		if calls, _ := d.evaluate(k.Extend(slices.Clone(best))); calls < fixedCalls*0.97 {
			return best
		}
	}
	return fixed
}

// pacedCalls is what the service's own pace costs a captcha of d: a poll
// every PollInterval (5 s) from its submission on, CaptchaAI's
// recommended poll frequency for each task in flight ("Poll frequency:
// Recommended: every 5 seconds per task"; it enforces no per-second limit
// on res.php: blog.captchaai.com/rate-limits-and-throttling). Where the
// documented first poll comes after most solves (reCAPTCHA's 15 s on a
// service answering in 5–15 s), the fixed schedule costs less than that
// pace, one call, and on average half the solve window of lag: there the
// adaptive schedule may spend up to the pace. Where it does not (the
// kind's median ready time is past the first poll), the budget stays the
// fixed schedule's: it already polls at the pace once polling starts.
func pacedCalls(d Dist, k Timing) float64 {
	paced := k
	paced.First = k.Interval
	calls, _ := d.evaluate(paced.FixedSchedule())
	return calls
}
