package solver

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

var t0 = time.Unix(1_000_000, 0)

// newLimiter returns a limiter of its own (not the shared one) with interval
// and a burst rule.
func newLimiter(interval time.Duration, burst int, window time.Duration) *submitLimiter {
	l := &submitLimiter{}
	l.tighten(interval, burst, window)
	return l
}

func (l *submitLimiter) state() (next time.Time, recent, pending int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next, len(l.recent), len(l.pending)
}

// TestLimiterSharedByKeyStrictestWins: clients of one URL and key with 100 ms
// and 50 ms intervals (and one with no limits at all) share one limiter, and
// it spaces every call 100 ms.
func TestLimiterSharedByKeyStrictestWins(t *testing.T) {
	t.Parallel()
	// Unique per run: the registry of shared limiters lives as long as the process (-count=N).
	url := fmt.Sprintf("http://%s-%d.example", t.Name(), time.Now().UnixNano())
	a := sharedLimiter(url, "k", 100*time.Millisecond, time.Second, 0)
	b := sharedLimiter(url, "k", 50*time.Millisecond, time.Second, 0)
	none := sharedLimiter(url, "k", 0, time.Second, 0) // negative settings: no limits of its own
	if a != b || b != none {
		t.Fatal("clients of one URL and key with different limits got different limiters")
	}
	if other := sharedLimiter(url, "other key", 100*time.Millisecond, time.Second, 0); other == a {
		t.Fatal("another key shares the limiter")
	}
	if r := a.reserve(t0); r != nil {
		t.Fatalf("first call waits until %v", r.at)
	}
	for i := 1; i <= 4; i++ {
		r := b.reserve(t0)
		if want := t0.Add(time.Duration(i) * 100 * time.Millisecond); r == nil || !r.at.Equal(want) {
			t.Fatalf("call %d reserved %v, want %v", i, r, want)
		}
	}
}

// TestLimiterBurstRulesCombine: a 3-per-second rule and a 5-per-100ms rule
// of two clients both hold, and a client without a cap lifts neither.
func TestLimiterBurstRulesCombine(t *testing.T) {
	t.Parallel()
	l := newLimiter(0, 5, 100*time.Millisecond)
	l.tighten(0, 3, time.Second)
	l.tighten(0, 0, time.Second) // SubmitBurst < 0
	for i := range 3 {
		if r := l.reserve(t0); r != nil {
			t.Fatalf("call %d waits until %v", i, r.at)
		}
	}
	r := l.reserve(t0)
	if want := t0.Add(time.Second); r == nil || !r.at.Equal(want) {
		t.Fatalf("fourth call reserved %v, want %v", r, want)
	}
}

// TestLimiterGivesBackCancelledSlots: a cancelled reservation that is the
// last one gives its slot back, with the cancelled ones right before it; one
// with a later reservation still held keeps it until that one goes too.
func TestLimiterGivesBackCancelledSlots(t *testing.T) {
	t.Parallel()
	const gap = 100 * time.Millisecond
	l := newLimiter(gap, 10, time.Hour)
	if r := l.reserve(t0); r != nil {
		t.Fatal("first call waits")
	}
	r1, r2 := l.reserve(t0), l.reserve(t0)
	if !r1.at.Equal(t0.Add(gap)) || !r2.at.Equal(t0.Add(2*gap)) {
		t.Fatalf("reserved %v and %v", r1.at, r2.at)
	}
	l.cancel(r1) // r2 is still held: r1's slot stays used
	if next, recent, _ := l.state(); !next.Equal(t0.Add(3*gap)) || recent != 3 {
		t.Fatalf("after cancelling the middle slot: next %v, %d recent; want %v, 3", next, recent, t0.Add(3*gap))
	}
	l.cancel(r2) // now both go back
	if next, recent, pending := l.state(); !next.Equal(t0.Add(gap)) || recent != 1 || pending != 0 {
		t.Fatalf("after cancelling both: next %v, %d recent, %d pending; want %v, 1, 0", next, recent, pending, t0.Add(gap))
	}
	if r := l.reserve(t0); r == nil || !r.at.Equal(t0.Add(gap)) {
		t.Fatalf("next call reserved %v, want %v", r, t0.Add(gap))
	}

	// A used slot keeps the cancelled ones before it.
	l = newLimiter(gap, 0, 0)
	l.reserve(t0)
	r1, r2, r3 := l.reserve(t0), l.reserve(t0), l.reserve(t0)
	l.cancel(r1)
	l.done(r2)
	l.cancel(r3)
	if next, _, pending := l.state(); !next.Equal(t0.Add(3*gap)) || pending != 0 {
		t.Fatalf("after cancel, use, cancel: next %v, %d pending; want %v, 0", next, pending, t0.Add(3*gap))
	}
}

// TestLimiterShortDeadlinesDoNotPushNext: many callers whose deadlines pass
// while they wait, in any order, leave the limiter as they found it, instead
// of pushing the next free slot an interval further each.
func TestLimiterShortDeadlinesDoNotPushNext(t *testing.T) {
	t.Parallel()
	l := newLimiter(time.Hour, 0, 0)
	if err := l.wait(context.Background(), time.Now); err != nil {
		t.Fatal(err)
	}
	before, _, _ := l.state()
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
			defer cancel()
			if err := l.wait(ctx, time.Now); err != context.DeadlineExceeded {
				t.Errorf("wait: %v, want deadline exceeded", err)
			}
		})
	}
	wg.Wait()
	if next, _, pending := l.state(); !next.Equal(before) || pending != 0 {
		t.Errorf("after 50 cancelled waits: next %v later, %d pending; want unchanged, 0", next.Sub(before), pending)
	}
}
