package solver

import (
	"context"
	"testing"
	"time"
)

// TestWindowAIMD: the limit doubles a round in slow start, shrinks by
// windowDecrease from what was held at the first refusal, grows by about one
// a round after, and shrinks once for refusals of one round.
func TestWindowAIMD(t *testing.T) {
	t.Parallel()
	w := newWindow()
	ctx := context.Background()
	for range 12 { // 4 → 16
		if _, err := w.acquire(ctx); err != nil {
			t.Fatal(err)
		}
		w.accepted()
	}
	if got := w.size(); got != 16 {
		t.Fatalf("limit %d after 12 accepted in slow start, want 16", got)
	}
	round, _ := w.acquire(ctx) // the 13th held
	w.refused(round)
	w.release()
	if got := w.size(); got != 10 { // 13 × 0.8
		t.Fatalf("limit %d after a refusal with 13 held, want 10", got)
	}
	w.refused(round) // the same round: nothing new
	if got := w.size(); got != 10 {
		t.Fatalf("limit %d after a second refusal of the same round, want 10", got)
	}
	for range 12 {
		w.release()
	}
	for range 10 {
		if _, err := w.acquire(ctx); err != nil {
			t.Fatal(err)
		}
		w.accepted()
		w.release()
	}
	if got := w.size(); got != 10 && got != 11 {
		t.Fatalf("limit %d after a round of accepted, want about 11", got)
	}
}

// TestWindowWaits: at the limit, acquire waits for a release, or for ctx.
func TestWindowWaits(t *testing.T) {
	t.Parallel()
	w := newWindow()
	for range windowStart {
		if _, err := w.acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := w.acquire(ctx); err == nil {
		t.Fatal("acquire beyond the limit did not wait")
	}
	got := make(chan error, 1)
	go func() { _, err := w.acquire(context.Background()); got <- err }()
	w.release()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

// TestHoldBack: refusals halve the miss rate, accepted submissions let it
// creep back up, within its bounds.
func TestHoldBack(t *testing.T) {
	t.Parallel()
	var h holdBack
	if got := h.rate(); got != maxMiss {
		t.Fatalf("initial miss rate %v, want %v", got, maxMiss)
	}
	h.refused()
	h.refused()
	if got := h.rate(); got != maxMiss/4 {
		t.Fatalf("miss rate %v after two refusals, want %v", got, maxMiss/4)
	}
	for range 100 {
		h.refused()
	}
	if got := h.rate(); got != minMiss {
		t.Fatalf("miss rate %v after many refusals, want the floor %v", got, minMiss)
	}
	for range 1000 {
		h.accepted()
	}
	if got := h.rate(); got != maxMiss {
		t.Fatalf("miss rate %v after many accepted, want %v", got, maxMiss)
	}
}
