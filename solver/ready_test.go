package solver

import (
	"math"
	"testing"
	"time"
)

// uniformWindows returns the windows n answers ready evenly in [lo, hi]
// are seen in when polled at polls: an answer ready by the first poll is
// left-censored, (0, first poll].
func uniformWindows(n int, lo, hi time.Duration, polls []time.Duration) []readyWindow {
	out := make([]readyWindow, 0, n)
	for i := range n {
		r := lo + (hi-lo)*time.Duration(2*i+1)/time.Duration(2*n)
		var last time.Duration
		for _, p := range polls {
			if r <= p {
				out = append(out, readyWindow{Lo: last, Hi: p})
				break
			}
			last = p
		}
	}
	return out
}

// TestYoungCaptchasAreNotDone: a kind never ready before 5 s, whose first
// poll finds a fifth of its answers (ready in 5–7 s, seen at 7 s, so
// "ready by 7 s"), is not counted done at 3 s: none of twenty captchas 3 s
// old hands its thread back, even with no margin. Spread evenly over
// (0, 7 s], those answers counted 3/7 of themselves done at 3 s, a tenth of
// the kind, and two of the twenty threads went to captchas the service
// would refuse. The estimate stays right where the answers say: at 9 s
// about 60 % are still being solved, and past the slowest none.
func TestYoungCaptchasAreNotDone(t *testing.T) {
	t.Parallel()
	c, k := learnedUniformImages(t)

	if s := c.poller.survival(KindImage, k, 3*time.Second, 0); s < 0.99 {
		t.Errorf("survival at 3 s of a kind never ready before 5 s: %.3f, want at least 0.99", s)
	}
	if s := c.poller.survival(KindImage, k, 9*time.Second, 7*time.Second); math.Abs(s-0.75) > 0.08 {
		t.Errorf("survival at 9 s of a captcha not ready at 7 s: %.3f, want about 0.75 (6/8)", s)
	}
	if s := c.poller.survival(KindImage, k, 9*time.Second, 0); math.Abs(s-0.6) > 0.08 {
		t.Errorf("survival at 9 s: %.3f, want about 0.6", s)
	}
	if s := c.poller.survival(KindImage, k, 16*time.Second, 13*time.Second); s > 0.01 {
		t.Errorf("survival at 16 s, past every answer: %.3f, want 0", s)
	}

	now := time.Now()
	o := newOccupancy(c, time.Hour, time.Hour, 0)
	o.z = 0
	var young, old []*holder
	for range 20 {
		young = append(young, o.add(KindImage, k, now.Add(-3*time.Second), nil))
	}
	for range 5 {
		old = append(old, o.add(KindImage, k, now.Add(-16*time.Second), nil))
	}
	o.mu.Lock()
	o.handBack(now)
	o.mu.Unlock()
	if n := handedBack(young); n != 0 {
		t.Errorf("%d of 20 captchas 3 s old handed back, want 0: none of the kind is ready before 5 s", n)
	}
	if n := handedBack(old); n != 5 {
		t.Errorf("%d of 5 captchas past the slowest answer handed back, want 5", n)
	}
}

// TestFirstPollAnswersFollowBoundedOnes: of a kind polled once at 14 s,
// nearly every answer is found there ("ready by 14 s"); a few captchas
// polled early at 7 s were not ready then and were found at 14 s. Those
// say the kind is ready after 7 s, so a captcha 5 s old is not counted
// done (spread evenly from submission, nine in ten answers counted 5/14
// of themselves done), while one 12 s old probably is.
func TestFirstPollAnswersFollowBoundedOnes(t *testing.T) {
	t.Parallel()
	c := offlineClient(t)
	for range 36 {
		c.poller.observe(KindRecaptcha, 0, 14*time.Second)
	}
	for range 4 {
		c.poller.observe(KindRecaptcha, 7*time.Second, 14*time.Second)
	}
	k := c.timing.forKind(KindRecaptcha)
	if s := c.poller.survival(KindRecaptcha, k, 5*time.Second, 0); s < 0.99 {
		t.Errorf("survival at 5 s, no answer ever ready before 7 s: %.3f, want at least 0.99", s)
	}
	if s := c.poller.survival(KindRecaptcha, k, 12*time.Second, 0); s > 0.5 {
		t.Errorf("survival at 12 s: %.3f, want under 0.5 (5/7 of the answers ready by then)", s)
	}
}

// TestFirstPollAnswersAloneKeepTheMargin: of a kind every answer of which
// was found at its captcha's first poll (10 s), nobody knows how long
// before that it was ready: no answer has both bounds, and the fit of such
// answers alone is where its iteration started (half the poll, as narrow
// as a fit gets), not something they say. Counted by that fit, captchas
// 5.5 s old are surely done, their variance is nothing, and the margin,
// however high refusals made it, keeps none of their threads: at the
// margin's most careful, eight of ten went to the next captchas. Counted
// evenly over (0, 10 s] as nothing says otherwise, the margin keeps all
// but one.
func TestFirstPollAnswersAloneKeepTheMargin(t *testing.T) {
	t.Parallel()
	c := offlineClient(t)
	for range 40 {
		c.poller.observe(KindImage, 0, 10*time.Second)
	}
	k := c.timing.forKind(KindImage)
	now := time.Now()
	o := newOccupancy(c, time.Hour, time.Hour, 0)
	o.z = zMax
	var hs []*holder
	for range 10 {
		hs = append(hs, o.add(KindImage, k, now.Add(-5500*time.Millisecond), nil))
	}
	o.mu.Lock()
	o.handBack(now)
	o.mu.Unlock()
	s := c.poller.survival(KindImage, k, 5500*time.Millisecond, 0)
	if n := handedBack(hs); n > 3 {
		t.Errorf("%d of 10 captchas 5.5 s old handed back at the margin's most careful (survival %.3f), want at most 3: nothing says they were ready before their first poll at 10 s", n, s)
	}
}

// TestNotReadyPastTheFitIsNotDone: a captcha of a kind ready in 2–3 s was
// seen not ready at 10 s, beyond anything the kind's fit allows. It is
// still being solved: the service holds its thread. Counted done, it left
// its thread (handed back at 3 s) counted free, and a captcha probably
// done whose thread the Client still holds was handed back too: two
// threads given out where one was free.
func TestNotReadyPastTheFitIsNotDone(t *testing.T) {
	t.Parallel()
	c := offlineClient(t)
	learnImagesIn2To3s(c)
	k := c.timing.forKind(KindImage)
	if s := c.poller.survival(KindImage, k, 10100*time.Millisecond, 10*time.Second); s < 0.5 {
		t.Errorf("survival 100 ms after a CAPCHA_NOT_READY at 10 s: %.3f, want at least 0.5", s)
	}
	now := time.Now()
	o := newOccupancy(c, time.Hour, time.Hour, 0)
	slow := o.add(KindImage, k, now.Add(-10100*time.Millisecond), nil)
	slow.handed, slow.lo = true, 10*time.Second
	done := o.add(KindImage, k, now.Add(-2900*time.Millisecond), nil)
	o.mu.Lock()
	o.handBack(now)
	o.mu.Unlock()
	if handedBack([]*holder{done}) != 0 {
		t.Errorf("a captcha probably done was handed back while a captcha that handed its thread back is still being solved")
	}
}

// offlineClient is a Client whose service is never reached: for tests of
// what it estimates from answers a test feeds its poller.
func offlineClient(tb testing.TB) *Client {
	tb.Helper()
	c, err := NewClient(Config{BaseURL: "http://127.0.0.1:1", APIKey: "0123456789abcdef0123456789abcdef"})
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// learnImagesIn2To3s teaches c forty images ready evenly in 2–3 s, each
// seen not ready just before.
func learnImagesIn2To3s(c *Client) {
	for i := range 40 {
		lo := 2*time.Second + time.Second*time.Duration(i)/40
		c.poller.observe(KindImage, lo, lo+time.Second/40)
	}
}

// learnImagesAfter1s teaches c forty images seen not ready at 1 s and ready
// by 1 s + i·step.
func learnImagesAfter1s(c *Client, step time.Duration) {
	for i := range 40 {
		c.poller.observe(KindImage, time.Second, time.Second+time.Duration(i)*step)
	}
}

// TestUnlearnedKindIsAskedNotHandedBack: a kind with four answers, each
// seen not ready at 2 s and ready by 3 s, is not learned (minLearned), so
// no thread of it is handed back, however old its captchas and without a
// margin. But its captcha 10 s old is probably done by what those answers
// say, so the Client asks it (its next poll now, confirm) instead of
// leaving it to its fixed schedule's polls, 5 s apart; a captcha of a kind
// with no answer is never asked.
func TestUnlearnedKindIsAskedNotHandedBack(t *testing.T) {
	t.Parallel()
	c := offlineClient(t)
	for i := range 4 {
		lo := 2*time.Second + time.Duration(i)*100*time.Millisecond
		c.poller.observe(KindImage, lo, lo+time.Second)
	}
	k := c.timing.forKind(KindImage)
	if c.Knows(KindImage) {
		t.Fatal("four answers made the kind learned; the test wants one that is not")
	}
	now := time.Now()
	o := newOccupancy(c, time.Hour, time.Hour, 0)
	o.z = 0
	old := o.add(KindImage, k, now.Add(-10*time.Second), nil)
	young := o.add(KindImage, k, now.Add(-500*time.Millisecond), nil)
	unknown := o.add(KindTurnstile, c.timing.forKind(KindTurnstile), now.Add(-time.Minute), nil)
	o.mu.Lock()
	o.handBack(now)
	o.mu.Unlock()
	if n := handedBack([]*holder{old, young, unknown}); n != 0 {
		t.Errorf("%d threads of kinds not learned handed back, want 0", n)
	}
	if len(old.confirm) == 0 {
		t.Errorf("the captcha 10 s old, of a kind whose answers were all ready by 3.3 s, was not asked to confirm")
	}
	if len(young.confirm) > 0 || len(unknown.confirm) > 0 {
		t.Errorf("asked the young captcha (%v) or the one of a kind with no answer (%v), want only the old one", len(young.confirm) > 0, len(unknown.confirm) > 0)
	}
}
