package solver

import (
	"testing"
	"time"
)

// TestPoolAsksTheClientWithTheMost: a client sure of less than half a
// thread asks the service when the pool's threads probably free come to
// half a thread and no other client has more of them; not when another
// has more, nor when the pool's come to less, nor when its own are none.
func TestPoolAsksTheClientWithTheMost(t *testing.T) {
	t.Parallel()
	o := &occupancy{}
	for _, c := range []struct {
		name   string
		ready  float64
		others []Occupancy
		want   bool
	}{
		{"alone, half a thread", 0.5, nil, true},
		{"alone, less", 0.4, nil, false},
		{"the most of a pool of 0.9", 0.3, []Occupancy{{Ready: 0.3}, {Ready: 0.2}, {Ready: 0.1}}, true},
		{"another has more", 0.3, []Occupancy{{Ready: 0.35}, {Ready: 0.2}}, false},
		{"the pool has 0.45", 0.3, []Occupancy{{Ready: 0.1}, {Ready: 0.05}}, false},
		{"another's hand-backs still being solved", 0.3, []Occupancy{{Ready: 0.25}, {Ready: -0.2}}, false},
		{"none of its own", 0, []Occupancy{{Ready: 0}, {Ready: 0}}, false},
		{"reports without Ready (an earlier version)", 0.3, []Occupancy{{V: 1, Free: 0.4}}, false},
	} {
		if got := o.ask(c.ready, c.others); got != c.want {
			t.Errorf("%s: ask(%v, %v) = %v, want %v", c.name, c.ready, c.others, got, c.want)
		}
	}
}

// TestPoolAskConfirms: a client that alone would not ask (its captchas
// are young) asks its likeliest done captcha to confirm when the pool
// says it has the most threads probably free, and a client told that
// another has more does not.
func TestPoolAskConfirms(t *testing.T) {
	t.Parallel()
	c := offlineClient(t)
	learnImagesIn2To3s(c)
	k := c.timing.forKind(KindImage)
	now := time.Now()
	for _, tc := range []struct {
		other Occupancy
		want  bool
	}{
		{Occupancy{V: 0.2, Free: 0, Ready: 0.2}, true},
		{Occupancy{V: 0.2, Free: 0, Ready: 0.45}, false},
	} {
		o := newOccupancy(c, time.Hour, time.Hour, DefaultPollInterval)
		o.z = zMax
		o.pool = &staticPool{others: []Occupancy{tc.other}}
		// An image 2.3 s old: about 30 % likely done.
		h := o.add(KindImage, k, now.Add(-2300*time.Millisecond), nil)
		o.mu.Lock()
		o.handBack(now)
		ready := o.own.Ready
		o.mu.Unlock()
		if ready <= 0 || ready >= askAt || ready+tc.other.Ready < askAt {
			t.Fatalf("own threads probably free %.2f, want less than %v alone and %v with the other's", ready, askAt, askAt)
		}
		if got := len(h.confirm) > 0; got != tc.want {
			t.Errorf("own %.2f probably free, another client's %.2f: asked %v, want %v", ready, tc.other.Ready, got, tc.want)
		}
	}
}

// TestConfirmsWithinThePace: a Client whose captchas are probably done
// and kept by the margin asks again and again; with its scheduled polls,
// its res.php calls stay within its service's askPace times a poll every PollInterval per
// captcha in flight (and the credit's burst), and the confirms still come.
func TestConfirmsWithinThePace(t *testing.T) {
	t.Parallel()
	c := offlineClient(t)
	learnImagesIn2To3s(c)
	var clock time.Time
	start := time.Now()
	clock = start
	c.now = func() time.Time { return clock }
	k := c.timing.forKind(KindImage)
	const pace = 5 * time.Second
	o := newOccupancy(c, 50*time.Millisecond, time.Hour, pace)
	// The test makes the estimates and moves the clock: no goroutine
	// of the occupancy reads it meanwhile.
	o.running = true
	// Another client's captchas are still being solved: the pool hands
	// nothing back, while this client's two captchas are long done.
	o.pool = &staticPool{others: []Occupancy{{V: 1, Free: -5, Ready: -4}}}
	hs := []*holder{
		o.add(KindImage, k, start.Add(-10*time.Second), nil),
		o.add(KindImage, k, start.Add(-10*time.Second), nil),
	}
	const span = 60 * time.Second
	calls, confirms := 0, 0
	nextScheduled := start
	for clock = start; clock.Before(start.Add(span)); clock = clock.Add(50 * time.Millisecond) {
		if !clock.Before(nextScheduled) {
			// A scheduled poll every 4 s, which is never held back.
			o.polled(nil)
			calls++
			nextScheduled = nextScheduled.Add(4 * time.Second)
		}
		o.mu.Lock()
		o.handBack(clock)
		o.mu.Unlock()
		for _, h := range hs {
			select {
			case <-h.confirm:
				o.polled(nil)
				calls++
				confirms++
				o.settled(h)
			default:
			}
		}
	}
	budget := o.askPace*float64(len(hs))*float64(span)/float64(pace) + callBurst
	if float64(calls) > budget+1 {
		t.Errorf("%d res.php calls in %v with %d captchas in flight, want at most %.0f (%.1f× a poll every %v each, and the burst)", calls, span, len(hs), budget, o.askPace, pace)
	}
	if float64(confirms) < budget-float64(span/(4*time.Second))-callBurst-1 {
		t.Errorf("%d confirms, want the calls the scheduled polls leave (%d calls in all)", confirms, calls)
	}
	for _, h := range hs {
		if h.handed {
			t.Errorf("a captcha handed back while the pool has no thread free")
		}
	}
}

// TestConfirmsQuietAfterARateRefusal: a res.php call the service refuses
// for its rate (HTTP 429) stops the confirms for a minute of poll
// intervals, with credit to spare; then they come again. On 2captcha,
// which blocks keys polling faster than its 5 s, the confirms keep to the
// pace itself.
func TestConfirmsQuietAfterARateRefusal(t *testing.T) {
	t.Parallel()
	c := offlineClient(t)
	start := time.Now()
	clock := start
	c.now = func() time.Time { return clock }
	o := newOccupancy(c, 50*time.Millisecond, time.Hour, DefaultPollInterval)
	// The test makes the estimates and moves the clock: no goroutine
	// of the occupancy reads it meanwhile.
	o.running = true
	o.add(KindImage, c.timing.forKind(KindImage), start, nil)
	credit := func() float64 {
		o.mu.Lock()
		defer o.mu.Unlock()
		return o.callCredit(clock)
	}
	if got := credit(); got < 1 {
		t.Fatalf("a fresh client has credit %.2f, want at least 1", got)
	}
	o.polled(newError("res.php", "HTTP_429", nil))
	clock = clock.Add(quietFor*DefaultPollInterval - time.Second)
	if got := credit(); got != 0 {
		t.Errorf("%v after a 429, credit %.2f, want none", clock.Sub(start), got)
	}
	clock = clock.Add(2 * time.Second)
	if got := credit(); got < 1 {
		t.Errorf("%v after a 429, credit %.2f, want the confirms back", clock.Sub(start), got)
	}
	if got := TwoCaptcha.askPace(); got != 1 {
		t.Errorf("2captcha's confirms may spend %v× its pace, want 1", got)
	}
	if got := CaptchaAI.askPace(); got <= 1 {
		t.Errorf("CaptchaAI's confirms may spend %v× its pace, want more than its recommendation", got)
	}
}
