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
		b := newCreditBed(t)
		o := b.o
		for range 5 {
			o.polled(nil) // a burst of planned polls: in debt
		}
		if tc.refuse {
			o.polled(newError("res.php", "HTTP_429", nil))
		}
		b.clock = b.clock.Add(tc.jump)
		for range 5 {
			o.polled(nil)
			// The debt floor: a minute of the budget.
			floor := -max(callBurst, o.askPace*quietFor)
			if got := b.credit(); got > callBurst || got < floor {
				t.Errorf("%s: credit %.2f, want within [%v, %d]", tc.name, got, floor, callBurst)
			}
		}
		// A minute and a half of the clock's own time: the quiet is over
		// and the debt of the eleven polls earned back.
		for range 18 {
			b.clock = b.clock.Add(DefaultPollInterval)
			if got := b.credit(); got > callBurst {
				t.Errorf("%s: credit %.2f, want at most %d", tc.name, got, callBurst)
			}
		}
		if got := b.credit(); got < 1 {
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
	const span = 2 * time.Minute
	_, hs, planned, confirms := confirmsUnderPlannedPolls(c, DefaultPollInterval, span, 10*time.Second, 5)
	pace := float64(len(hs)) * float64(span) / float64(DefaultPollInterval)
	if confirms > callBurst {
		t.Errorf("%d confirms with %d planned polls in %v, the pace %.0f: want at most the %d calls of the burst",
			confirms, planned, span, pace, callBurst)
	}
}
