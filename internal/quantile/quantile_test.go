package quantile

import "testing"

func TestOf(t *testing.T) {
	sorted := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, c := range []struct{ p, want float64 }{{0.5, 5}, {0.95, 10}, {0, 1}, {1, 10}, {0.1, 1}} {
		if got := Of(sorted, c.p); got != c.want {
			t.Errorf("Of(1..10, %v) = %v, want %v", c.p, got, c.want)
		}
	}
	if got := Of(nil, 0.5); got != 0 {
		t.Errorf("Of(nil) = %v, want 0", got)
	}
}
