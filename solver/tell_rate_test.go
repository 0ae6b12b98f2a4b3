package solver

import (
	"testing"
	"time"
)

// TestPoolToldNoMoreThanBefore: the pool heard a client at each estimate
// when it ran every BatchGap/5 (200 ms): five messages a second per
// worker on core NATS. Estimating four times as often must not raise
// that: a client whose captchas age (its share drifting at every
// estimate) tells the pool no more than once per tellEvery estimates over
// a second, a burst aside.
func TestPoolToldNoMoreThanBefore(t *testing.T) {
	t.Parallel()
	for _, n := range []int{20, 1000} {
		o, now := handBackLoad(t, n)
		pool := o.pool.(*staticPool)
		const estimates = 100 // 5 s at 50 ms
		for i := range estimates {
			o.mu.Lock()
			o.handBack(now.Add(time.Duration(i) * o.every))
			o.mu.Unlock()
		}
		if max := estimates/tellEvery + 2; len(pool.reported) > max {
			t.Errorf("%d captchas in flight: %d reports in %d estimates (%v), want at most %d",
				n, len(pool.reported), estimates, estimates*o.every, max)
		}
	}
}

// TestEstimatePeriodGrowsWithHolders: a Client with thousands of captchas
// in flight estimates less often than every 50 ms (one estimate costs
// about half a microsecond per captcha, BenchmarkHandBack), never less
// often than the 200 ms it estimated at before, so the pool still hears it
// well within the second a report counts.
func TestEstimatePeriodGrowsWithHolders(t *testing.T) {
	t.Parallel()
	o := newOccupancy(nil, 50*time.Millisecond, time.Second, 0)
	for _, c := range []struct {
		n    int
		want time.Duration
	}{{1, 50 * time.Millisecond}, {20, 50 * time.Millisecond}, {1000, 50 * time.Millisecond},
		{10000, 100 * time.Millisecond}, {20000, 200 * time.Millisecond}, {1 << 20, 200 * time.Millisecond}} {
		if got := o.period(c.n); got != c.want {
			t.Errorf("%d captchas in flight: an estimate every %v, want %v", c.n, got, c.want)
		}
	}
}

// TestPoolToldAfterQuiet: a client that had nothing in flight (its zero
// report made) and gets a captcha tells the pool at its first estimate,
// when it was quiet long enough to have the credit; the zero report is
// made whatever the credit.
func TestPoolToldAfterQuiet(t *testing.T) {
	t.Parallel()
	o, now := handBackLoad(t, 20)
	pool := o.pool.(*staticPool)
	o.credit = 0 // spent by a burst
	o.mu.Lock()
	o.handBack(now)
	o.mu.Unlock()
	if len(pool.reported) != 0 {
		t.Fatalf("no credit: %d reports, want 0", len(pool.reported))
	}
	// The zero report (run with nothing in flight) is made without credit.
	o.mu.Lock()
	o.pool.Report(Occupancy{})
	o.told, o.toldAt = Occupancy{}, time.Time{}
	o.spend(now)
	o.mu.Unlock()
	at := now.Add(2 * tellEvery * o.every) // credit back to 1
	o.mu.Lock()
	o.handBack(at)
	o.mu.Unlock()
	if len(pool.reported) != 2 {
		t.Fatalf("first estimate after the zero report and a quiet spell: %d reports, want 2", len(pool.reported))
	}
}
