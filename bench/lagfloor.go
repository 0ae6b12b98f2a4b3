package main

import (
	"math"
	"time"
)

// The cold-start row's floor: what no poll schedule beats on its service.
//
// A captcha ready at r is picked up at the first poll at or after r, so its
// lag is that poll's time minus r, and every poll before it is a call that
// found it not ready. On a service answering uniformly in [lo, hi] (the
// row's emulator), lagFloor finds the schedule with the least mean lag
// whose mean calls per captcha stay within a budget: a dynamic programme
// over a grid of polls (lag + λ·calls), with λ bisected to the budget, as
// the solver plans a learned kind (solver/internal/schedule). It knows the
// distribution exactly and pays no HTTP time, so the row's measured lag can
// only be above it.

// lagFloor returns the least mean pickup lag of any poll schedule on ready
// times uniform in [lo, hi] whose mean res.php calls per captcha are at
// most calls (≥ 1: every captcha is asked at least once), and the calls
// that schedule spends.
func lagFloor(lo, hi time.Duration, calls float64) (lag time.Duration, spent float64) {
	const n = 400 // grid cells over [lo, hi]
	w := float64(hi - lo)
	step := w / n
	// Polls sit on the grid's points t(i) = lo + i·step, i = 1..n (a poll at
	// lo or before finds nothing). From a poll at i (or the start, i = 0),
	// the next at k costs a call for every captcha not ready by t(i), and
	// lag t(k) − r for each ready in (t(i), t(k)].
	surv := func(i int) float64 { return 1 - float64(i)/n }
	seg := func(i, k int) float64 { // ∫ over (t(i), t(k)] of (t(k) − r) dr/w
		d := float64(k-i) * step
		return d * d / 2 / w
	}
	plan := func(lambda float64) (lagSum, callSum float64) {
		W := make([]float64, n+1)
		next := make([]int, n+1)
		for j := n - 1; j >= 0; j-- {
			best, arg := math.Inf(1), n
			for k := j + 1; k <= n; k++ {
				if v := lambda*surv(j) + seg(j, k) + W[k]; v < best {
					best, arg = v, k
				}
			}
			W[j], next[j] = best, arg
		}
		for j := 0; j < n; j = next[j] {
			callSum += surv(j)
			lagSum += seg(j, next[j])
		}
		return lagSum, callSum
	}
	// λ large: one poll at hi (one call, lag (hi − lo)/2); λ small: many.
	loL, hiL := math.Log(1e-6*w), math.Log(10*w)
	bestLag, bestCalls := w/2, 1.0
	for range 50 {
		mid := (loL + hiL) / 2
		l, c := plan(math.Exp(mid))
		if c <= calls+1e-9 {
			bestLag, bestCalls, hiL = l, c, mid
		} else {
			loL = mid
		}
	}
	return time.Duration(bestLag), bestCalls
}

// callsForLag returns the fewest mean calls per captcha (to 0.01) with
// which some schedule's mean lag on ready times uniform in [lo, hi] is at
// most want; the floor falls as the calls rise.
func callsForLag(lo, hi, want time.Duration) float64 {
	if l, _ := lagFloor(lo, hi, 1); l <= want {
		return 1
	}
	low, high := 1.0, 20.0
	for high-low > 0.005 {
		mid := (low + high) / 2
		if l, _ := lagFloor(lo, hi, mid); l <= want {
			high = mid
		} else {
			low = mid
		}
	}
	return math.Ceil(high*100) / 100
}
