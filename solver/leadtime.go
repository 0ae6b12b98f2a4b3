package solver

import (
	"math"
	"time"
)

// SolveTime is how long a captcha of kind takes to come back, from its
// submission to its answer in hand, at quantile q (0.9: nine in ten come
// back sooner), as this Client knows it: that quantile of the log-normal it
// learned of the kind's ready times (its own answers and the pool's), plus
// a poll interval for the pickup (an answer ready just after a poll waits
// for the next). learned is false while the
// kind is not learned: the estimate is then 4 times the kind's first poll
// (Timing's, or DefaultFirstPoll: 60 s for reCAPTCHA v2, 20 s for
// Turnstile), a slow answer of the service's, whatever q.
func (c *Client) SolveTime(kind string, q float64) (d time.Duration, learned bool) {
	return solveTime(&c.poller, c.timing, kind, q)
}

// solveTime is SolveTime of what p learned, polled on t.
func solveTime(p *poller, t Timing, kind string, q float64) (time.Duration, bool) {
	k := t.forKind(kind)
	p.mu.Lock()
	ks, ok := p.kinds[kind]
	var mu, sigma float64
	if ok && ks.learned() {
		mu, sigma = ks.fit()
	}
	p.mu.Unlock()
	if mu == 0 || !(q > 0 && q < 1) {
		return 4 * k.first, false
	}
	z := math.Sqrt2 * math.Erfinv(2*q-1)
	return time.Duration(math.Exp(mu+z*sigma)) + k.interval, true
}
