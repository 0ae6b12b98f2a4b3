package solver

import (
	"testing"
	"time"
)

// TestOneConfirmInFlight: the likeliest-done captcha is asked to confirm,
// polls, and is found not ready; before its wait says the poll is made
// (settled), the next decision asks it again. Settling must not leave
// that second request buffered while the Client counts none: a later
// decision would then ask another captcha, and two confirming polls would
// be in flight at once.
func TestOneConfirmInFlight(t *testing.T) {
	t.Parallel()
	c := offlineClient(t)
	// Images ready evenly in 2–3 s, each seen not ready before.
	learnImagesIn2To3s(c)
	k := c.timing.forKind(KindImage)
	now := time.Now()
	o := newOccupancy(c, time.Hour, time.Hour, 0)
	o.z = zMax
	h1 := o.add(KindImage, k, now.Add(-2700*time.Millisecond), nil)
	o.add(KindImage, k, now.Add(-time.Second), nil)
	decide := func(at time.Time) {
		o.mu.Lock()
		o.handBack(at)
		o.mu.Unlock()
	}
	pending := func(h *holder) bool { return len(h.confirm) > 0 }

	decide(now)
	if !pending(h1) {
		t.Fatal("the captcha likeliest done was not asked to confirm")
	}
	<-h1.confirm // its wait polls
	o.notReady(h1, 2700*time.Millisecond)
	decide(now.Add(200 * time.Millisecond)) // before the wait settles
	o.settled(h1)

	// A captcha probably done and not handed back comes in: a decision
	// that asks it while h1 still has a request buffered puts two
	// confirming polls in flight.
	h3 := o.add(KindImage, k, now.Add(-10*time.Second), nil)
	decide(now.Add(200 * time.Millisecond))
	if pending(h1) && pending(h3) {
		t.Errorf("two captchas asked to confirm at once, want at most one per Client")
	}
	o.mu.Lock()
	asking := o.asking
	o.mu.Unlock()
	for _, h := range []*holder{h1, h3} {
		if pending(h) && asking != h {
			t.Errorf("a captcha has a confirm buffered that the Client does not count as asked")
		}
	}
}
