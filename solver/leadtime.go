package solver

import (
	"math"
	"time"
)

// z90 is the standard normal's 90th percentile.
const z90 = 1.2815515655446004

// SolveTimeP90 is how long a captcha of kind takes to come back, from its
// submission to its answer in hand, at the 90th percentile, as this Client
// knows it: the 90th percentile of the log-normal it learned of the kind's
// ready times (its own answers and the pool's), plus the kind's polling
// resolution for the pickup. learned is false while the kind is not
// learned: the estimate is then twice the kind's first poll (Timing's, or
// DefaultFirstPoll: 30 s for reCAPTCHA v2), the service's typical solve time
// with room to spare.
func (c *Client) SolveTimeP90(kind string) (p90 time.Duration, learned bool) {
	k := c.timing.forKind(kind)
	c.poller.mu.Lock()
	ks, ok := c.poller.kinds[kind]
	var mu, sigma float64
	if ok && ks.learned() {
		mu, sigma = ks.fit()
	}
	c.poller.mu.Unlock()
	if !ok || mu == 0 {
		return 2 * k.first, false
	}
	return time.Duration(math.Exp(mu+z90*sigma)) + k.resolution, true
}
