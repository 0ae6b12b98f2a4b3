package solver

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkHandBack is one estimate of the hand-back (handBack, run every
// BatchGap/20) of a Client with N captchas in flight of a learned kind
// (learnWindow answers, 5–15-s solves), its ages spread over 0–15 s, in a
// pool of one other client.
func BenchmarkHandBack(b *testing.B) {
	for _, n := range []int{20, 1000, 10000} {
		b.Run(fmt.Sprintf("holders=%d", n), func(b *testing.B) {
			o, now := handBackLoad(b, n)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				o.mu.Lock()
				o.handBack(now)
				o.mu.Unlock()
			}
		})
	}
}

// handBackLoad returns an occupancy with n holders of a learned kind (not
// running: the benchmark or test makes the estimates), and the time they
// are estimated at.
func handBackLoad(tb testing.TB, n int) (*occupancy, time.Time) {
	c := offlineClient(tb)
	for i := range learnWindow {
		lo := 5*time.Second + time.Duration(i)*10*time.Second/learnWindow
		if i%3 == 0 {
			lo = 0 // found at its first poll
		}
		c.poller.observe(KindImage, lo, lo+time.Second)
	}
	k := c.timing.forKind(KindImage)
	o := newOccupancy(c, 50*time.Millisecond, time.Hour, 0)
	o.pool = &staticPool{others: []Occupancy{{V: 1, Free: 0.5}}}
	now := time.Now()
	for i := range n {
		h := &holder{kind: KindImage, k: k, submitted: now.Add(-time.Duration(i%150) * 100 * time.Millisecond),
			back: make(chan struct{}), confirm: make(chan struct{}, 1)}
		o.holders[h] = struct{}{}
	}
	return o, now
}
