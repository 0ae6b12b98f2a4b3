package solver

import (
	"math"
	"testing"
	"time"

	"github.com/captchaq/captchaq/solver/internal/schedule"
)

// TestPlanWithinMaxWait: the adaptive schedule plans no poll past MaxWait,
// also on a grid that does not divide it (a kind whose median is under
// four Resolutions is planned on a quarter of its median): a poll planned
// there comes after the wait gave up, and the captchas it would have
// fetched time out.
func TestPlanWithinMaxWait(t *testing.T) {
	t.Parallel()
	for _, tm := range []Timing{{}, {PollInterval: 20 * time.Second}, {PollInterval: 2 * time.Second}} {
		k := tm.forKind(KindImage)
		for median := 500 * time.Millisecond; median < 20*time.Second; median += 137 * time.Millisecond {
			for _, sigma := range []float64{1.0, 1.3, 1.6} {
				mu := math.Log(float64(median))
				s := k.reserve(k.extend(schedule.PlanAdaptive(mu, sigma, nil, 0, k.sched())))
				if len(s) == 0 || len(s) > k.maxCalls || s[len(s)-1] > k.maxWait {
					t.Fatalf("interval %v, median %v, σ %.1f: %d polls, the last at %v, past MaxWait %v or over %d calls",
						k.interval, median, sigma, len(s), s[len(s)-1], k.maxWait, k.maxCalls)
				}
			}
		}
	}
}
