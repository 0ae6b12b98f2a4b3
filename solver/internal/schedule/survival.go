// Survival statistics: how many of a kind's observed captchas were ready
// by a time, read from their windows and, for an answer found at its first
// poll, from the answers with both bounds or the fit (Spread).

package schedule

import (
	"math"
	"time"
)

// Spread is an observed window and, for an answer found at its
// captcha's first poll (Lo = 0), what says when before Hi it was ready:
// Ref, how many of the answers with both bounds were ready by Hi (each
// spread evenly over its window), and FHi, the fit's distribution function
// at Hi.
type Spread struct {
	Lo, Hi   time.Duration
	Ref, FHi float64
}

// LogNormalCDF is F(t) of the log-normal (μ, σ of the log in nanoseconds).
func LogNormalCDF(mu, sigma float64, t time.Duration) float64 {
	if t <= 0 {
		return 0
	}
	return NormCDF((math.Log(float64(t)) - mu) / sigma)
}

// EvenReady is how many of obs were ready by t, each spread evenly over its
// window.
func EvenReady(obs []Window, t time.Duration) float64 {
	var ready float64
	for _, o := range obs {
		switch {
		case t >= o.Hi:
			ready++
		case t > o.Lo:
			ready += float64(t-o.Lo) / float64(o.Hi-o.Lo)
		}
	}
	return ready
}

// EmpiricalSurvival is the share of obs not ready by t (see solver's spreadObs;
// bounded are its answers with both bounds, (μ, σ) the fit).
func EmpiricalSurvival(obs []Spread, bounded []Window, t time.Duration, mu, sigma float64) float64 {
	rt := EvenReady(bounded, t)
	ft := LogNormalCDF(mu, sigma, t)
	var ready float64
	for _, o := range obs {
		switch {
		case t >= o.Hi:
			ready++
		case t <= o.Lo:
		case o.Lo > 0:
			ready += float64(t-o.Lo) / float64(o.Hi-o.Lo)
		case o.Ref > 1e-9:
			ready += math.Min(rt/o.Ref, 1)
		case o.FHi > 0:
			ready += math.Min(ft/o.FHi, 1)
		default:
			ready += float64(t) / float64(o.Hi)
		}
	}
	return 1 - ready/float64(len(obs))
}
