package solver_test

import (
	"math"
	"testing"
	"time"

	"github.com/captchaq/captchaq/solver"
)

// TestMergeAtTheExtremes: summaries at the edges of what Learned holds
// (as a bucket written by anything may hold them) merge into a usable
// summary: N capped at 256 and weighing no more than that. An N near the
// largest int wrapped below zero when added: the merged summary was
// unusable, and the pool's timings were dropped at the next merge.
func TestMergeAtTheExtremes(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)
	stored := solver.Learned{Median: 10 * time.Second, Sigma: 0.5, N: math.MaxInt, At: at}
	fresh := solver.Learned{Median: 2 * time.Second, Sigma: 0.5, N: 256, At: at}
	m := stored.Merge(fresh)
	if m.N != 256 {
		t.Errorf("merged N %d, want 256", m.N)
	}
	// Equal weights: the geometric mean of the medians, about 4.5 s.
	if m.Median < 4*time.Second || m.Median > 5*time.Second {
		t.Errorf("merged median %v, want about 4.5 s: the stored N counts as 256 at most", m.Median)
	}
	if again := m.Merge(fresh); again.N != 256 || again.Median <= 0 {
		t.Errorf("merged again: %+v, want a usable summary", again)
	}
}
