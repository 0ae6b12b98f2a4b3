package solver

import (
	"testing"
	"time"
)

// TestSurvivalBeyondTheAnswersFollowsTheFit: a captcha not ready at 15 s,
// past what the kind's answers (5–15 s) say, is judged by the fitted
// log-normal: most of those still not ready at 15 s are ready by 20 s,
// so its chance of still being solved there is well below one, and
// never above it.
func TestSurvivalBeyondTheAnswersFollowsTheFit(t *testing.T) {
	t.Parallel()
	c, k := learnedUniformImages(t)
	s := c.poller.survival(KindImage, k, 20*time.Second, 15*time.Second)
	if s <= 0 || s > 0.5 {
		t.Errorf("survival at 20 s of a captcha not ready at 15 s: %.3f, want in (0, 0.5]", s)
	}
	if s2 := c.poller.survival(KindImage, k, 17*time.Second, 15*time.Second); s2 < s {
		t.Errorf("survival at 17 s (%.3f) below the one at 20 s (%.3f)", s2, s)
	}
}

// learnedUniformImages is an offline Client that learned 100 image
// captchas ready evenly over 5–15 s, polled at 7, 10, 13 and 15 s, and
// the timing of their kind.
func learnedUniformImages(t *testing.T) (*Client, kindTiming) {
	t.Helper()
	c := offlineClient(t)
	polls := []time.Duration{7 * time.Second, 10 * time.Second, 13 * time.Second, 15 * time.Second}
	for _, w := range uniformWindows(100, 5*time.Second, 15*time.Second, polls) {
		c.poller.observe(KindImage, w.Lo, w.Hi)
	}
	return c, c.timing.forKind(KindImage)
}
