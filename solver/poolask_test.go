package solver

import (
	"testing"
	"time"
)

// TestPoolAsksTheClientWithTheMost: a client sure of less than half a
// thread asks the service when the pool's threads probably free come to
// half a thread and no other client has more of them, or half a thread
// more for each client that has more; not when the pool's come to less,
// nor when its own are none.
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
		{"the second of a pool of 1.4", 0.3, []Occupancy{{Ready: 0.6}, {Ready: 0.3}, {Ready: 0.2}}, true},
		{"the third of a pool of 1.2", 0.2, []Occupancy{{Ready: 0.6}, {Ready: 0.4}}, false},
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
	const pace, span = 5 * time.Second, 60 * time.Second
	// A scheduled poll every 4 s, which is never held back.
	o, hs, planned, confirms := confirmsUnderPlannedPolls(c, pace, span, 4*time.Second, 1)
	calls := planned + confirms
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
	b := newCreditBed(t)
	o := b.o
	if got := b.credit(); got < 1 {
		t.Fatalf("a fresh client has credit %.2f, want at least 1", got)
	}
	o.polled(newError("res.php", "HTTP_429", nil))
	b.clock = b.clock.Add(quietFor*DefaultPollInterval - time.Second)
	if got := b.credit(); got != 0 {
		t.Errorf("%v after a 429, credit %.2f, want none", b.clock.Sub(b.start), got)
	}
	b.clock = b.clock.Add(2 * time.Second)
	if got := b.credit(); got < 1 {
		t.Errorf("%v after a 429, credit %.2f, want the confirms back", b.clock.Sub(b.start), got)
	}
	if got := TwoCaptcha.askPace(); got != 1 {
		t.Errorf("2captcha's confirms may spend %v× its pace, want 1", got)
	}
	if got := CaptchaAI.askPace(); got <= 1 {
		t.Errorf("CaptchaAI's confirms may spend %v× its pace, want more than its recommendation", got)
	}
}

// confirmsUnderPlannedPolls runs a Client's occupancy on c, with two
// captchas long done that another client's captchas still being solved
// (the pool) keep from being handed back, for span at one estimate per
// 50 ms, the test's clock moving and no goroutine of the occupancy reading
// it; every gap, perGap planned polls are counted (they are never held
// back). It returns the occupancy, its holders, and the planned and
// confirming polls made, each confirm answered at once.
func confirmsUnderPlannedPolls(c *Client, pace, span, gap time.Duration, perGap int) (o *occupancy, hs []*holder, planned, confirms int) {
	learnImagesIn2To3s(c)
	start := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	clock := start
	c.now = func() time.Time { return clock }
	k := c.timing.forKind(KindImage)
	o = newOccupancy(c, 50*time.Millisecond, time.Hour, pace)
	o.running = true
	o.pool = &staticPool{others: []Occupancy{{V: 1, Free: -5, Ready: -4}}}
	hs = []*holder{
		o.add(KindImage, k, start.Add(-10*time.Second), nil),
		o.add(KindImage, k, start.Add(-10*time.Second), nil),
	}
	next := start
	for ; clock.Before(start.Add(span)); clock = clock.Add(50 * time.Millisecond) {
		if !clock.Before(next) {
			for range perGap {
				o.polled(nil)
				planned++
			}
			next = next.Add(gap)
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
	return o, hs, planned, confirms
}

// creditBed is an occupancy of an offline Client on a clock the test
// moves, with one image in flight since the clock's start; the test makes
// the estimates, so no goroutine of the occupancy reads the clock.
type creditBed struct {
	o            *occupancy
	start, clock time.Time
}

func newCreditBed(t *testing.T) *creditBed {
	c := offlineClient(t)
	b := &creditBed{start: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)}
	b.clock = b.start
	c.now = func() time.Time { return b.clock }
	b.o = newOccupancy(c, 50*time.Millisecond, time.Hour, DefaultPollInterval)
	b.o.running = true
	b.o.add(KindImage, c.timing.forKind(KindImage), b.start, nil)
	return b
}

// credit returns the calls the confirms may spend now.
func (b *creditBed) credit() float64 {
	b.o.mu.Lock()
	defer b.o.mu.Unlock()
	return b.o.callCredit(b.clock)
}
