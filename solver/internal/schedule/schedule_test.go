package schedule

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The statistics the solver's schedules and hand-back read, checked
// against values worked out by hand.

func TestNormCDF(t *testing.T) {
	require.InDelta(t, 0.5, NormCDF(0), 1e-12)
	require.InDelta(t, 0.975, NormCDF(1.959964), 1e-6)
	require.InDelta(t, 0.025, NormCDF(-1.959964), 1e-6)
}

// A log-normal's median is exp(μ), one σ of the log above it F is Φ(1):
// the CDF grows with t, and is 0 at and before submission.
func TestLogNormalCDF(t *testing.T) {
	mu, sigma := math.Log(float64(10*time.Second)), 0.5
	require.Zero(t, LogNormalCDF(mu, sigma, 0))
	require.InDelta(t, 0.5, LogNormalCDF(mu, sigma, 10*time.Second), 1e-9)
	above := time.Duration(math.Exp(mu + sigma))
	require.InDelta(t, 0.841345, LogNormalCDF(mu, sigma, above), 1e-5)
	require.Less(t, LogNormalCDF(mu, sigma, 5*time.Second), LogNormalCDF(mu, sigma, 20*time.Second))
}

// Each window counts as ready evenly over it: at 15 s, all of (0, 10 s]
// and half of (10 s, 20 s].
func TestEvenReady(t *testing.T) {
	obs := []Window{{0, 10 * time.Second}, {10 * time.Second, 20 * time.Second}}
	require.InDelta(t, 0, EvenReady(obs, 0), 1e-12)
	require.InDelta(t, 0.5, EvenReady(obs, 5*time.Second), 1e-12)
	require.InDelta(t, 1.5, EvenReady(obs, 15*time.Second), 1e-12)
	require.InDelta(t, 2, EvenReady(obs, 30*time.Second), 1e-12)
}

// The share not ready by t: a window (10 s, 20 s] is half done at 15 s;
// an answer found at a first poll (Lo = 0) follows the answers with both
// bounds (Ref), or else the fit (F(t)/F(Hi)).
func TestEmpiricalSurvival(t *testing.T) {
	mu, sigma := math.Log(float64(8*time.Second)), 0.4
	bounded := []Window{{10 * time.Second, 20 * time.Second}}
	obs := []Spread{{Lo: 10 * time.Second, Hi: 20 * time.Second}}
	require.InDelta(t, 1, EmpiricalSurvival(obs, bounded, 5*time.Second, mu, sigma), 1e-12)
	require.InDelta(t, 0.5, EmpiricalSurvival(obs, bounded, 15*time.Second, mu, sigma), 1e-12)
	require.InDelta(t, 0, EmpiricalSurvival(obs, bounded, 25*time.Second, mu, sigma), 1e-12)

	// Found at its first poll at 20 s; the bounded answer was half ready at
	// 15 s of the one ready by 20 s: so is it.
	first := []Spread{{Lo: 0, Hi: 20 * time.Second, Ref: EvenReady(bounded, 20*time.Second)}}
	require.InDelta(t, 0.5, EmpiricalSurvival(first, bounded, 15*time.Second, mu, sigma), 1e-12)

	// No bounded answer ready before Hi: the fit's F(t)/F(Hi).
	hi := 10 * time.Second
	fitted := []Spread{{Lo: 0, Hi: hi, FHi: LogNormalCDF(mu, sigma, hi)}}
	want := 1 - LogNormalCDF(mu, sigma, 8*time.Second)/LogNormalCDF(mu, sigma, hi)
	require.InDelta(t, want, EmpiricalSurvival(fitted, nil, 8*time.Second, mu, sigma), 1e-12)
	require.Greater(t, want, 0.0)
	require.Less(t, want, 0.5)
}

// Discretize puts all the mass on the grid (the tail in the last cell),
// its median where the log-normal's is, and evaluate charges a poll at the
// end of a cell half a cell of lag for the cell's mass.
func TestDiscretizeQuantileEvaluate(t *testing.T) {
	g := 500 * time.Millisecond
	mu, sigma := math.Log(float64(10*time.Second)), 0.3
	d := Discretize(mu, sigma, g, 40) // the grid ends at 20 s: a tail of 1−Φ(ln2/0.3) ≈ 1%
	var sum float64
	for _, m := range d.Mass {
		sum += m
	}
	require.InDelta(t, 1, sum, 1e-9)
	require.Equal(t, 10*time.Second, d.quantile(0.5, g))
	// The last cell, (19.5 s, 20 s], holds the tail beyond it too.
	require.InDelta(t, 1-NormCDF(math.Log(1.95)/sigma), d.Mass[40], 1e-9)

	one := Dist{Mass: []float64{0, 1}, pos: []float64{0, float64(g) / 2}}
	calls, lag := one.evaluate([]time.Duration{g, 2 * g})
	require.InDelta(t, 1, calls, 1e-12)
	require.InDelta(t, g.Seconds()/2, lag, 1e-12)
	// Polled at every cell's end: each cell's mass waits half a cell.
	var every []time.Duration
	for i := 1; i <= 40; i++ {
		every = append(every, time.Duration(i)*g)
	}
	_, lag = d.evaluate(every)
	require.InDelta(t, g.Seconds()/2, lag, 1e-9)
	calls, lag = Discretize(mu, sigma, g, 40).evaluate([]time.Duration{5 * time.Second, 10 * time.Second, 15 * time.Second, 20 * time.Second})
	require.Greater(t, calls, 1.9)
	require.Less(t, calls, 2.6)
	require.Greater(t, lag, 1.5)
	require.Less(t, lag, 3.5)
}

// Windows of answers polled every second, from a log-normal with median
// 10 s and σ 0.3 (its quantiles, 200 of them), give the fit back.
func TestFitLogNormalRecoversItsParameters(t *testing.T) {
	mu, sigma := math.Log(float64(10*time.Second)), 0.3
	var obs []Window
	for i := range 200 {
		p := (float64(i) + 0.5) / 200
		x := math.Exp(mu + sigma*math.Sqrt2*math.Erfinv(2*p-1))
		hi := time.Duration(math.Ceil(x/float64(time.Second))) * time.Second
		lo := hi - time.Second
		if lo < 5*time.Second { // first poll at 5 s: found there, since submission
			lo, hi = 0, 5*time.Second
		}
		obs = append(obs, Window{lo, hi})
	}
	gotMu, gotSigma := FitLogNormal(obs)
	require.InDelta(t, mu, gotMu, 0.02)
	require.InDelta(t, sigma, gotSigma, 0.03)
}

// The fixed schedule: FirstPoll, then every Interval, within MaxWait and
// MaxCalls; Extend continues a plan the same way.
func TestFixedScheduleAndExtend(t *testing.T) {
	s := time.Second
	k := Timing{First: 5 * s, Interval: 5 * s, MaxWait: 30 * s, MaxCalls: 4}
	require.Equal(t, []time.Duration{5 * s, 10 * s, 15 * s, 20 * s}, k.FixedSchedule())
	require.Equal(t, []time.Duration{7 * s, 12 * s, 17 * s, 22 * s}, k.Extend([]time.Duration{7 * s}))
	k.MaxCalls = 100
	require.Equal(t, []time.Duration{5 * s, 10 * s, 15 * s, 20 * s, 25 * s, 30 * s}, k.FixedSchedule())
	require.Equal(t, []time.Duration{7 * s, 12 * s, 17 * s, 22 * s, 27 * s}, k.Extend([]time.Duration{7 * s}))
}
