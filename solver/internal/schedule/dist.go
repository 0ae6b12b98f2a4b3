// The distribution of a kind's ready times: its log-normal fit to the
// answers' windows, put on a grid, and replaced by the answers' own shape
// where they predict themselves better; what a schedule costs under it.

package schedule

import (
	"math"
	"slices"
	"time"
)

// MinSigma is the narrowest log-normal the fit returns.
const MinSigma = 0.05

// The shape of the distribution a schedule is planned for (Shaped): the
// answers' own shape is tried only with at least ShapeMin of them, judged
// by shapeFolds-fold cross-validation, and taken only when it predicts the
// held-out answers better than the log-normal fit by shapeMargin nats in
// all. refine takes refineSteps expectation-maximisation steps and smooths
// what the answers say over refineSmooth grid cells either side.
const (
	ShapeMin     = 32
	shapeFolds   = 4
	shapeMargin  = 1.0
	refineSteps  = 30
	refineSmooth = 3
)

// Dist is a distribution of ready times on the grid: Mass[i] in cell
// (t(i-1), t(i)], centred at pos[i].
type Dist struct {
	Mass []float64
	pos  []float64 // seconds… in time.Duration units as float64
}

// FitLogNormal fits a log-normal distribution (μ, σ of the log of the solve
// time in nanoseconds) to interval-censored observations by
// expectation-maximisation: each window contributes the moments of the
// current normal truncated to it. Solve times are right-skewed, and a smooth
// two-parameter fit keeps the schedule from chasing the accidents of a small
// sample — the poll times shape the windows observed next, and a
// nonparametric estimate feeds on its own clumps.
func FitLogNormal(obs []Window) (mu, sigma float64) {
	type win struct{ a, b float64 } // log bounds; a = -Inf for "since submission"
	ws := make([]win, 0, len(obs))
	var sum, sum2 float64
	for _, o := range obs {
		w := win{math.Inf(-1), math.Log(float64(max(o.Hi, time.Microsecond)))}
		if o.Lo > 0 {
			w.a = math.Log(float64(o.Lo))
		}
		ws = append(ws, w)
		mid := math.Log(float64(max((o.Lo+o.Hi)/2, time.Microsecond)))
		sum += mid
		sum2 += mid * mid
	}
	n := float64(len(ws))
	mu = sum / n
	sigma = math.Max(math.Sqrt(math.Max(sum2/n-mu*mu, 0)), MinSigma)
	for range 50 {
		var m1, m2 float64
		for _, w := range ws {
			if w.b-w.a < 1e-6 {
				m1 += w.b
				m2 += w.b * w.b
				continue
			}
			al, be := (w.a-mu)/sigma, (w.b-mu)/sigma
			z := NormCDF(be) - NormCDF(al)
			if z < 1e-12 {
				// The model says the window cannot happen: take its
				// upper bound (or its middle) as a point.
				x := w.b
				if !math.IsInf(w.a, -1) {
					x = (w.a + w.b) / 2
				}
				m1 += x
				m2 += x * x
				continue
			}
			pa, pb := normPDF(al), normPDF(be)
			apa := 0.0
			if !math.IsInf(al, -1) {
				apa = al * pa
			}
			e1 := mu + sigma*(pa-pb)/z
			e2 := mu*mu + 2*mu*sigma*(pa-pb)/z + sigma*sigma*(1+(apa-be*pb)/z)
			m1 += e1
			m2 += e2
		}
		nmu := m1 / n
		nsigma := math.Max(math.Sqrt(math.Max(m2/n-nmu*nmu, 0)), MinSigma)
		done := math.Abs(nmu-mu) < 1e-6 && math.Abs(nsigma-sigma) < 1e-6
		mu, sigma = nmu, nsigma
		if done {
			break
		}
	}
	return mu, sigma
}

func normPDF(x float64) float64 { return math.Exp(-x*x/2) / math.Sqrt(2*math.Pi) }
func NormCDF(x float64) float64 { return 0.5 * math.Erfc(-x/math.Sqrt2) }

// Discretize puts a log-normal distribution on the grid of step g with n
// cells; the tail beyond the last cell goes into it.
func Discretize(mu, sigma float64, g time.Duration, n int) Dist {
	d := Dist{Mass: make([]float64, n+1), pos: make([]float64, n+1)}
	cdf := func(t time.Duration) float64 {
		if t <= 0 {
			return 0
		}
		return NormCDF((math.Log(float64(t)) - mu) / sigma)
	}
	for i := 1; i <= n; i++ {
		d.Mass[i] = cdf(time.Duration(i)*g) - cdf(time.Duration(i-1)*g)
		d.pos[i] = float64(time.Duration(i)*g) - float64(g)/2
	}
	d.Mass[n] += 1 - cdf(time.Duration(n)*g)
	return d
}

// Shaped returns the distribution a schedule is planned for (see the solver
// package doc): d, the log-normal fit on the grid of step g, or, when the
// answers obs predict their held-out windows better by their own shape
// (cross-validated), d refined by them, d counting as prior answers (at
// least one).
func Shaped(d Dist, obs []Window, prior float64, g time.Duration) Dist {
	if len(obs) < ShapeMin {
		return d
	}
	n := len(d.Mass) - 1
	var fitScore, shapeScore float64
	train := make([]Window, 0, len(obs))
	var test []Window
	for f := range shapeFolds {
		train, test = train[:0], test[:0]
		for i, o := range obs {
			if i%shapeFolds == f {
				test = append(test, o)
			} else {
				train = append(train, o)
			}
		}
		mu, sigma := FitLogNormal(train)
		fd := Discretize(mu, sigma, g, n)
		fitScore += fd.logLikelihood(test, g)
		shapeScore += fd.refine(train, g, 1).logLikelihood(test, g)
	}
	if shapeScore < fitScore+shapeMargin {
		return d
	}
	return d.refine(obs, g, max(prior, 1))
}

// cellShares returns the share of each grid cell (of step g, n cells, the
// last holding the tail) inside o's window, from cell from on; a window
// without width is its cell.
func cellShares(o Window, g time.Duration, n int) (from int, share []float64) {
	if o.Hi <= o.Lo {
		return max(min(int((o.Hi+g-1)/g), n), 1), []float64{1}
	}
	a := min(int(o.Lo/g)+1, n)
	b := max(min(int((o.Hi+g-1)/g), n), a)
	share = make([]float64, b-a+1)
	for i := a; i <= b; i++ {
		lo, hi := time.Duration(i-1)*g, time.Duration(i)*g
		if i == n {
			hi = max(hi, o.Hi)
		}
		if ov := min(hi, o.Hi) - max(lo, o.Lo); ov > 0 {
			share[i-a] = float64(ov) / float64(hi-lo)
		}
	}
	return a, share
}

// refine returns the distribution on d's grid (of step g) that the answers
// obs say, d counting as prior answers spread as it says: the
// self-consistent estimate of interval-censored data (each answer spread
// over the cells of its window in proportion to the estimate, repeated),
// started from and pulled towards d, what the answers say smoothed at the
// last step over refineSmooth cells either side within their span. Between
// the answers' bounds it is what they say; where they say nothing (beyond
// the slowest), d's.
func (d Dist) refine(obs []Window, g time.Duration, prior float64) Dist {
	n := len(d.Mass) - 1
	type span struct {
		from  int
		share []float64
	}
	spans := make([]span, len(obs))
	for i, o := range obs {
		spans[i].from, spans[i].share = cellShares(o, g, n)
	}
	p := slices.Clone(d.Mass)
	acc := make([]float64, n+1)
	for step := range refineSteps {
		clear(acc)
		for _, sp := range spans {
			var total, width float64
			for i, f := range sp.share {
				total += p[sp.from+i] * f
				width += f
			}
			for i, f := range sp.share {
				switch {
				case total > 1e-12:
					acc[sp.from+i] += p[sp.from+i] * f / total
				case width > 0:
					acc[sp.from+i] += f / width
				}
			}
		}
		if step == refineSteps-1 {
			acc = smoothSupport(acc, refineSmooth)
		}
		w := float64(len(spans)) + prior
		for i := range p {
			p[i] = (acc[i] + prior*d.Mass[i]) / w
		}
	}
	return Dist{Mass: p, pos: d.pos}
}

// smoothSupport averages p over a triangular kernel of radius r cells
// within the cells from its first to its last with mass, keeping its sum.
func smoothSupport(p []float64, r int) []float64 {
	first, last := -1, -1
	var sum float64
	for i, m := range p {
		if m > 0 {
			if first < 0 {
				first = i
			}
			last = i
			sum += m
		}
	}
	if first < 0 {
		return p
	}
	out := make([]float64, len(p))
	var osum float64
	for i := first; i <= last; i++ {
		var v, w float64
		for j := max(i-r, first); j <= min(i+r, last); j++ {
			k := float64(r + 1 - max(i-j, j-i))
			v += k * p[j]
			w += k
		}
		out[i] = v / w
		osum += out[i]
	}
	for i := range out {
		out[i] *= sum / osum
	}
	return out
}

// logLikelihood is the log of the chance of obs's windows under d (on the
// grid of step g), each cell's mass spread evenly over it.
func (d Dist) logLikelihood(obs []Window, g time.Duration) float64 {
	n := len(d.Mass) - 1
	var ll float64
	for _, o := range obs {
		from, share := cellShares(o, g, n)
		var p float64
		for i, f := range share {
			p += d.Mass[from+i] * f
		}
		ll += math.Log(max(p, 1e-12))
	}
	return ll
}

// quantile returns the end of the first cell (of step g) by which d reaches
// q.
func (d Dist) quantile(q float64, g time.Duration) time.Duration {
	var c float64
	for i := 1; i < len(d.Mass); i++ {
		if c += d.Mass[i]; c >= q {
			return time.Duration(i) * g
		}
	}
	return time.Duration(len(d.Mass)-1) * g
}

// evaluate returns the expected res.php calls and pickup lag (in seconds) of
// polling at times s under d. Mass after the last poll counts len(s) calls and
// no lag: the schedules compared all cover MaxWait.
func (d Dist) evaluate(s []time.Duration) (calls, lag float64) {
	for i := 1; i < len(d.Mass); i++ {
		if d.Mass[i] == 0 {
			continue
		}
		at := time.Duration(d.pos[i])
		j, _ := slices.BinarySearch(s, at)
		if j == len(s) {
			calls += d.Mass[i] * float64(len(s))
			continue
		}
		calls += d.Mass[i] * float64(j+1)
		lag += d.Mass[i] * (s[j] - at).Seconds()
	}
	return calls, lag
}
