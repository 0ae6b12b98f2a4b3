package main

import (
	"testing"
	"time"
)

// TestLagFloor checks the floor against what is known in closed form on
// ready times uniform in [0.2 s, 2 s]: one call (a poll at 2 s) lags
// (2 − 0.2)/2 = 0.9 s on average; two polls, the first at 1.1 s, spend
// 1.5 calls for 0.45 s, which a third poll can only lower.
func TestLagFloor(t *testing.T) {
	lo, hi := 200*time.Millisecond, 2*time.Second
	near := func(got, want, tol time.Duration) bool { return got >= want-tol && got <= want+tol }
	if l, c := lagFloor(lo, hi, 1); !near(l, 900*time.Millisecond, 5*time.Millisecond) || c > 1 {
		t.Errorf("one call: lag %v at %.3f calls, want 900ms at 1", l, c)
	}
	if l, c := lagFloor(lo, hi, 1.5); l > 450*time.Millisecond || l < 350*time.Millisecond || c > 1.5 {
		t.Errorf("1.5 calls: lag %v at %.3f calls, want 350–450ms within 1.5", l, c)
	}
	prev := time.Hour
	for c := 1.0; c <= 2; c += 0.1 {
		l, _ := lagFloor(lo, hi, c)
		if l > prev {
			t.Errorf("the floor rose from %v to %v at %.1f calls", prev, l, c)
		}
		prev = l
	}
	if c := callsForLag(lo, hi, 500*time.Millisecond); c < 1.3 || c > 1.4 {
		t.Errorf("0.5 s takes %.2f calls, want 1.3–1.4 (two polls: 1.33)", c)
	}
}
