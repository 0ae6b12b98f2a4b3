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
			// The debt floor: a minute of the budget.
			floor := -max(callBurst, o.askPace*quietFor)
			if got := credit(); got > callBurst || got < floor {
				t.Errorf("%s: credit %.2f, want within [%v, %d]", tc.name, got, floor, callBurst)
			}
		}
		// A minute and a half of the clock's own time: the quiet is over
		// and the debt of the eleven polls earned back.
		for range 18 {
			clock = clock.Add(DefaultPollInterval)
			if got := credit(); got > callBurst {
				t.Errorf("%s: credit %.2f, want at most %d", tc.name, got, callBurst)
			}
		}
		if got := credit(); got < 1 {
			t.Errorf("%s: %v after the clock stepped %v, credit %.2f, want the confirms back", tc.name, 18*DefaultPollInterval, tc.jump, got)
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

// TestConfirmsWithinThePaceOnTwoCaptcha: on 2captcha the confirms may
// spend only what the planned polls leave of the pace itself (a poll every
// 5 s per captcha in flight). Two captchas, long done and kept by the
// pool's margin, whose planned polls come five at a time every 10 s (an
// adaptive schedule's polls of captchas submitted together), more than
// the pace's four: the planned polls leave nothing, and over two minutes
// the confirms spend at most the burst the Client starts with. Forgiving
// the debt past two calls after each burst let a confirm through in every
// gap between them.
func TestConfirmsWithinThePaceOnTwoCaptcha(t *testing.T) {
	t.Parallel()
	c := offlineClient(t)
	c.service = TwoCaptcha
	learnImagesIn2To3s(c)
	start := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	clock := start
	c.now = func() time.Time { return clock }
	k := c.timing.forKind(KindImage)
	o := newOccupancy(c, 50*time.Millisecond, time.Hour, DefaultPollInterval)
	// The test makes the estimates: no goroutine of its own.
	o.running = true
	o.pool = &staticPool{others: []Occupancy{{V: 1, Free: -5, Ready: -4}}}
	hs := []*holder{
		o.add(KindImage, k, start.Add(-10*time.Second), nil),
		o.add(KindImage, k, start.Add(-10*time.Second), nil),
	}
	const span = 2 * time.Minute
	planned, confirms := 0, 0
	next := start
	for ; clock.Before(start.Add(span)); clock = clock.Add(50 * time.Millisecond) {
		if !clock.Before(next) {
			for range 5 {
				o.polled(nil)
				planned++
			}
			next = next.Add(10 * time.Second)
		}
		o.mu.Lock()
		o.handBack(clock)
		o.mu.Unlock()
		for _, h := range hs {
			select {
			case <-h.confirm:
				o.polled(nil)
				confirms++
				o.settled(h)
			default:
			}
		}
	}
	pace := float64(len(hs)) * float64(span) / float64(DefaultPollInterval)
	if confirms > callBurst {
		t.Errorf("%d confirms with %d planned polls in %v, the pace %.0f: want at most the %d calls of the burst",
			confirms, planned, span, pace, callBurst)
	}
}
