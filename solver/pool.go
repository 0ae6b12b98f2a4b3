// The pool protocol between the Clients handing back threads of one plan:
// what each reports (Occupancy), how the pool's free threads are shared out,
// which client asks the service, and how often each tells the pool.

package solver

import (
	"math"
	"slices"
	"time"
)

// Pool is what a Client's hand-back knows of the other clients handing
// back threads of the same plan (Client.JoinPool). Implementations must be
// quick and safe for concurrent use.
type Pool interface {
	// Report is told this client's estimate at each estimate, and the zero
	// Occupancy when it has no captcha in flight.
	Report(Occupancy)
	// Others returns the estimates the other clients reported last,
	// leaving out those gone quiet. Reports out of range (not a number,
	// a variance below 0, more than 65536 captchas) are ignored.
	Others() []Occupancy
}

// Occupancy is one client's estimate of its captchas at the service.
type Occupancy struct {
	// V is the variance of how many of its captchas the service is still
	// solving: ΣS(1−S).
	V float64 `json:"v"`
	// Free is how many of the plan threads it holds are free at the
	// service, less its share of the pool's margin: n − E − z·V/√ΣV. It is
	// fractional, and negative when captchas it handed back are probably
	// still being solved.
	Free float64 `json:"free"`
	// Ready is how many of the plan threads it holds are probably free at
	// the service, before the margin: n − E. The client with the most asks
	// the service whether one of its captchas is done (see ask). A report
	// without it (a worker of an earlier version) counts as none.
	Ready float64 `json:"ready,omitempty"`
	// Held says it cannot ask now: its res.php calls have spent what the
	// confirms may (callCredit), or the service refused one for its rate.
	// Its Ready counts in the pool's, but the others do not leave the
	// asking to it.
	Held bool `json:"held,omitempty"`
}

// maxOccupancy bounds what another client's report can say: no client has
// that many captchas in flight.
const maxOccupancy = 1 << 16

// sane reports whether o is a report a client can make: a variance in
// [0, maxOccupancy], free threads within ±maxOccupancy. Others are
// ignored: a NaN would stop every hand-back of the pool, and a huge
// number of free threads keep the allocation (free) counting them out
// one by one.
func (o Occupancy) sane() bool {
	return o.V >= 0 && o.V <= maxOccupancy && math.Abs(o.Free) <= maxOccupancy && math.Abs(o.Ready) <= maxOccupancy
}

// JoinPool makes c's hand-back decide with the pool's other clients how
// many plan threads are free (see handBack).
func (c *Client) JoinPool(p Pool) {
	c.occ.mu.Lock()
	c.occ.pool = p
	c.occ.mu.Unlock()
}

// ask reports whether the Client asks the service whether its likeliest
// done captcha is done (confirm), ready being its n − E, the threads it
// holds that are probably free before the margin: when that is half a
// thread or more, or, in a pool, when the pool's threads probably free
// come to half a thread for it and for each other client that can ask
// (not Held) and has more of them. In a pool of five workers with three
// threads each, no worker alone is often half a thread sure, while the
// pool is most of the time: asked by the workers likeliest to find one,
// one for each half thread the pool probably has free, the service frees
// the margin's threads sooner. Each asks within its own budget
// (callCredit), one at a time (confirm). Callers hold o.mu.
func (o *occupancy) ask(ready float64, others []Occupancy) bool {
	if ready >= askAt {
		return true
	}
	if ready <= 0 || len(others) == 0 {
		return false
	}
	sum, ahead := ready, 0
	for _, x := range others {
		if x.Ready > ready && !x.Held {
			ahead++ // it asks first
		}
		sum += x.Ready
	}
	return sum >= askAt*float64(ahead+1)
}

// askAt is how many threads must probably be free before one is asked
// about.
const askAt = 0.5

// others returns the other clients' reports that are sane; nil without a
// pool. Callers hold o.mu.
func (o *occupancy) others() []Occupancy {
	if o.pool == nil {
		return nil
	}
	return slices.DeleteFunc(slices.Clone(o.pool.Others()), func(x Occupancy) bool { return !x.sane() })
}

// free returns how many of the n threads the Client holds (not handed back)
// to hand back, E and V being the expectation and variance of how many of
// its captchas the service is still solving. Callers hold o.mu.
//
// Alone: round(n − E − z·√V). In a pool, the threads free pool-wide are
// Σn − ΣE − z·√ΣV; each client counts its share of them, x = n − E −
// z·V/√ΣV (the shares of the margin sum to z·√ΣV, less than the Σz·√V the
// clients would keep each alone), reports it, and the pool's
// round(Σx) threads go one by one to the client with the most left, so
// that five clients each a fraction of a thread short of handing one back
// do not all keep it. Every client runs the same allocation on the same
// reports; the others' are up to one estimate old.
func (o *occupancy) free(n, e, v float64, others []Occupancy) int {
	if o.pool == nil {
		return int(math.Round(n - e - o.z*math.Sqrt(v)))
	}
	all := v
	for _, x := range others {
		all += x.V
	}
	own := n - e
	if all > 0 {
		own -= o.z * v / math.Sqrt(all)
	}
	o.own = Occupancy{V: v, Free: own, Ready: n - e}
	total := own
	left := make([]float64, 0, len(others)+1)
	for _, x := range others {
		total += x.Free
		left = append(left, x.Free)
	}
	self := len(left)
	left = append(left, own)
	mine := 0
	for range int(math.Round(total)) {
		// The client with the most left takes the thread; on a tie, one
		// of the others.
		best := 0
		for i := range left {
			if left[i] > left[best] || left[i] == left[best] && best == self {
				best = i
			}
		}
		if left[best] <= 0 {
			break
		}
		left[best]--
		if best == self {
			mine++
		}
	}
	return min(mine, int(n))
}

// The estimate runs every BatchGap / 20 (50 ms): a captcha the service
// finishes waits for the next one to hand its thread back, half a period on
// average, and at 1.35 solves a second on a plan of 15 (5–15-s solves)
// 200 ms between estimates cost a tenth of a thread. The pool need not hear
// every estimate: a client tells it when its share moved by tellStep, or
// tellEvery estimates passed, and no more often on average than once every
// tellEvery estimates (tellBurst at once), so the messages stay at most
// five a second per worker, as when it heard every estimate at BatchGap/5:
// a client with many captchas in flight moves its share at every estimate.
const (
	tellStep  = 0.1
	tellEvery = 4
	tellBurst = 2
)

// tell reports the last decision's estimate to the pool when it moved by
// tellStep since the last report, or tellEvery estimates passed, or none
// was made since the client had nothing in flight; a report that moved
// waits while the client has no credit. Callers hold o.mu.
func (o *occupancy) tell(now time.Time) {
	if o.pool == nil {
		return
	}
	x := o.own
	if !o.toldAt.IsZero() && now.Sub(o.toldAt) < tellEvery*o.every &&
		math.Abs(x.Free-o.told.Free) < tellStep && math.Abs(x.V-o.told.V) < tellStep &&
		math.Abs(x.Ready-o.told.Ready) < tellStep && x.Held == o.told.Held {
		return
	}
	if o.earn(now) < 1 {
		return
	}
	o.pool.Report(x)
	o.told, o.toldAt = x, now
	o.spend(now)
}

// earn counts the credit earned since it was last counted, one report
// every tellEvery estimates, up to tellBurst, and returns it. Callers hold
// o.mu.
func (o *occupancy) earn(now time.Time) float64 {
	if !o.creditAt.IsZero() && now.After(o.creditAt) {
		o.credit = min(o.credit+float64(now.Sub(o.creditAt))/float64(tellEvery*o.every), tellBurst)
	}
	o.creditAt = now
	return o.credit
}

// spend counts a report made at now: the zero report of a client with
// nothing in flight is made whatever its credit, and the next waits for
// it. Callers hold o.mu.
func (o *occupancy) spend(now time.Time) {
	o.earn(now)
	o.credit = max(o.credit-1, -1)
}
