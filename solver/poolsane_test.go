package solver

import (
	"math"
	"testing"
)

// TestPoolReportsOutOfRangeIgnored: the reports no client can make (a
// negative variance, a variance or free count beyond maxOccupancy, not a
// number) are left out of the others' estimates; reports at the bounds
// are kept.
func TestPoolReportsOutOfRangeIgnored(t *testing.T) {
	t.Parallel()
	keep := []Occupancy{{}, {V: maxOccupancy, Free: -maxOccupancy, Ready: maxOccupancy}, {V: 0.25, Free: 0.5, Ready: 0.75}}
	drop := []Occupancy{{V: -0.5, Free: 1}, {V: maxOccupancy + 1}, {V: 1, Free: maxOccupancy + 1}, {V: 1, Ready: -maxOccupancy - 1},
		{V: math.NaN()}, {V: 1, Free: math.Inf(1)}}
	o := &occupancy{pool: &staticPool{others: append(append([]Occupancy{}, drop...), keep...)}}
	got := o.others()
	if len(got) != len(keep) {
		t.Fatalf("others: %+v, want %+v", got, keep)
	}
	for i := range keep {
		if got[i] != keep[i] {
			t.Fatalf("others: %+v, want %+v", got, keep)
		}
	}
}
