package solver

import (
	"testing"
	"time"
)

// TestCallCreditAfterTheClockJumps: the Client's clock (Config.Now) steps
// back an hour, or forward a day, while its captchas poll. The confirms'
// credit never exceeds the burst, is never owed beyond the debt floor, and
// comes back within a few poll intervals of the clock's own time: a rate
// refusal read just before the clock stepped back quiets the confirms for
// a minute of that clock, not for the hour it stepped back as well.
func TestCallCreditAfterTheClockJumps(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		jump   time.Duration
		refuse bool
	}{
		{"back an hour", -time.Hour, false},
		{"forward a day", 24 * time.Hour, false},
		{"back an hour after a 429", -time.Hour, true},
		{"forward a day after a 429", 24 * time.Hour, true},
	} {
		c := offlineClient(t)
		start := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
		clock := start
		c.now = func() time.Time { return clock }
		o := newOccupancy(c, 50*time.Millisecond, time.Hour, DefaultPollInterval)
		// The test makes the estimates: no goroutine of its own.
		o.running = true
		o.add(KindImage, c.timing.forKind(KindImage), start, nil)
		credit := func() float64 {
			o.mu.Lock()
			defer o.mu.Unlock()
			return o.callCredit(clock)
		}
		for range 5 {
			o.polled(nil) // a burst of planned polls: in debt
		}
		if tc.refuse {
			o.polled(newError("res.php", "HTTP_429", nil))
		}
		clock = clock.Add(tc.jump)
		for range 5 {
			o.polled(nil)
			if got := credit(); got > callBurst || got < -callBurst {
				t.Errorf("%s: credit %.2f, want within ±%d", tc.name, got, callBurst)
			}
		}
		// A minute and a bit of the clock's own time, polled by the
		// schedule at the pace: the confirms have their credit back.
		for range 14 {
			clock = clock.Add(DefaultPollInterval)
			if got := credit(); got > callBurst {
				t.Errorf("%s: credit %.2f, want at most %d", tc.name, got, callBurst)
			}
		}
		if got := credit(); got < 1 {
			t.Errorf("%s: %v after the clock stepped %v, credit %.2f, want the confirms back", tc.name, 14*DefaultPollInterval, tc.jump, got)
		}
	}
}

// TestConfirmAfterTheClockStepsBack: a Client's captcha is probably done,
// kept by the pool's margin and asked to confirm; its poll says not ready, and the clock (Config.Now)
// steps back an hour. The hand-back asks again within a second of that
// clock, as it would have without the step, not an hour later.
func TestConfirmAfterTheClockStepsBack(t *testing.T) {
	t.Parallel()
	c := offlineClient(t)
	learnImagesIn2To3s(c)
	start := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	clock := start
	c.now = func() time.Time { return clock }
	o := newOccupancy(c, 50*time.Millisecond, time.Hour, DefaultPollInterval)
	// The test makes the estimates: no goroutine of its own.
	o.running = true
	// Another client's captchas are still being solved: the pool hands
	// nothing back, and this client's captcha is kept and asked about.
	o.pool = &staticPool{others: []Occupancy{{V: 1, Free: -5, Ready: -4}}}
	h := o.add(KindImage, c.timing.forKind(KindImage), start.Add(-2900*time.Millisecond), nil)
	step := func() bool {
		o.mu.Lock()
		o.handBack(clock)
		o.mu.Unlock()
		select {
		case <-h.confirm:
			o.polled(nil)
			o.notReady(h, clock.Sub(h.submitted))
			o.settled(h)
			return true
		default:
			return false
		}
	}
	if !step() {
		t.Fatal("a captcha probably done was not asked to confirm")
	}
	clock = clock.Add(-time.Hour)
	// Submitted "later" than the clock reads now; its age is what the
	// survival reads, so move it with the clock.
	o.mu.Lock()
	h.submitted = h.submitted.Add(-time.Hour)
	o.mu.Unlock()
	for range 20 {
		clock = clock.Add(50 * time.Millisecond)
		if step() {
			return
		}
	}
	t.Errorf("no confirm within a second after the clock stepped back an hour")
}
