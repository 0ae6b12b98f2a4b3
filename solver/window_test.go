package solver

import (
	"context"
	"math"
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

// TestHandBack: of a Client's captchas holding threads, those its learned
// distribution says are done hand their threads back, the likeliest first,
// as many as the expected free threads less the margin; kinds not learned
// never do.
func TestHandBack(t *testing.T) {
	t.Parallel()
	c := offlineClient(t)
	learnImagesAfter1s(c, 5*time.Millisecond)
	k := c.timing.forKind(KindImage)
	now := time.Now()
	o := newOccupancy(c, time.Hour, time.Hour, 0)
	var old, young, unknown []*holder
	for range 10 {
		old = append(old, o.add(KindImage, k, now.Add(-5*time.Second), nil))
		young = append(young, o.add(KindImage, k, now.Add(-100*time.Millisecond), nil))
		unknown = append(unknown, o.add(KindTurnstile, c.timing.forKind(KindTurnstile), now.Add(-time.Hour), nil))
	}
	o.mu.Lock()
	o.handBack(now)
	o.mu.Unlock()
	closed := func(hs []*holder) (n int) {
		for _, h := range hs {
			select {
			case <-h.back:
				n++
			default:
			}
		}
		return n
	}
	if n := closed(old); n != 10 {
		t.Errorf("%d of 10 captchas surely done handed back, want 10", n)
	}
	if n := closed(young); n != 0 {
		t.Errorf("%d of 10 captchas surely not done handed back, want 0", n)
	}
	if n := closed(unknown); n != 0 {
		t.Errorf("%d of 10 captchas of a kind not learned handed back, want 0", n)
	}
	o.mu.Lock()
	o.handBack(now) // nothing handed twice
	o.mu.Unlock()

	// Captchas just past the median: over half are done; the margin keeps
	// the hand-back under that.
	o2 := newOccupancy(c, time.Hour, time.Hour, 0)
	c.poller.mu.Lock()
	median := time.Duration(math.Exp(c.poller.stats(KindImage).mu))
	c.poller.mu.Unlock()
	var mid []*holder
	for range 40 {
		mid = append(mid, o2.add(KindImage, k, now.Add(-median*11/10), nil))
	}
	done := 40 * (1 - c.poller.survival(KindImage, k, median*11/10, 0))
	o2.mu.Lock()
	o2.handBack(now)
	o2.mu.Unlock()
	if n := closed(mid); n == 0 || float64(n) >= done {
		t.Errorf("%d of 40 captchas just past the median handed back, want some, fewer than the %.1f expected done", n, done)
	}
}

// staticPool is a Pool whose other clients report fixed estimates.
type staticPool struct {
	others   []Occupancy
	reported []Occupancy
}

func (p *staticPool) Report(o Occupancy)  { p.reported = append(p.reported, o) }
func (p *staticPool) Others() []Occupancy { return p.others }

// handedBack counts the holders of hs told to hand their threads back.
func handedBack(hs []*holder) (n int) {
	for _, h := range hs {
		select {
		case <-h.back:
			n++
		default:
		}
	}
	return n
}

// TestHandBackPoolMargin: a Client in a pool keeps its share of the pool's
// one margin (z·V/√ΣV), not a margin of its own (z·√V): with three other
// clients as uncertain as it is and nothing free of theirs, it hands back
// more of its captchas just past the median than alone, still fewer than
// it expects done, and reports its estimate to the pool.
func TestHandBackPoolMargin(t *testing.T) {
	t.Parallel()
	c := offlineClient(t)
	learnImagesAfter1s(c, 25*time.Millisecond)
	k := c.timing.forKind(KindImage)
	now := time.Now()
	age := 1500 * time.Millisecond // the answers are ready evenly in 1–2 s
	s := c.poller.survival(KindImage, k, age, 0)
	handed := func(pool *staticPool) int {
		o := newOccupancy(c, time.Hour, time.Hour, 0)
		o.z = 2
		if pool != nil {
			o.pool = pool
		}
		var hs []*holder
		for range 12 {
			hs = append(hs, o.add(KindImage, k, now.Add(-age), nil))
		}
		o.mu.Lock()
		o.handBack(now)
		o.mu.Unlock()
		return handedBack(hs)
	}
	v := 12 * s * (1 - s)
	alone := handed(nil)
	pool := &staticPool{others: []Occupancy{{V: v}, {V: v}, {V: v}}}
	pooled := handed(pool)
	done := 12 * (1 - s)
	t.Logf("S %.2f, expected done %.1f: alone %d handed back, in a pool of four %d", s, done, alone, pooled)
	if pooled <= alone || float64(pooled) >= done {
		t.Errorf("in a pool %d handed back, alone %d: want more than alone, fewer than the %.1f expected done", pooled, alone, done)
	}
	if len(pool.reported) != 1 || math.Abs(pool.reported[0].V-v) > 1e-9 {
		t.Errorf("reported %v to the pool, want one report of V %v", pool.reported, v)
	}
}

// TestHandBackPoolRounding: the pool's free threads are rounded once, and
// go to the clients with the most left: a client 0.4 of a thread short of
// handing one back alone hands it back when two others are 0.4 short too
// and it is the one with the most left, and not when another has more.
func TestHandBackPoolRounding(t *testing.T) {
	t.Parallel()
	o := &occupancy{z: 0}
	o.pool = &staticPool{others: []Occupancy{{V: 1, Free: 0.3}, {V: 1, Free: 0.3}}}
	if got := o.free(1, 0.6, 1, o.others()); got != 1 {
		t.Errorf("0.4 free of its own, 0.3 and 0.3 of the others': handed back %d, want 1", got)
	}
	o.pool = &staticPool{others: []Occupancy{{V: 1, Free: 0.5}, {V: 1, Free: 0.3}}}
	if got := o.free(1, 0.6, 1, o.others()); got != 0 {
		t.Errorf("another has more free (0.5 against 0.4): handed back %d, want 0", got)
	}
	o.pool = nil
	if got := o.free(1, 0.6, 1, o.others()); got != 0 {
		t.Errorf("alone with 0.4 free: handed back %d, want 0", got)
	}
	o.pool = &staticPool{others: []Occupancy{{V: 1, Free: -2.2}}}
	if got := o.free(3, 0.5, 1, o.others()); got != 0 {
		t.Errorf("2.5 free of its own, -2.2 of another's (its hand-backs still being solved): handed back %d, want 0", got)
	}
}

// TestPoolToldWhenTheEstimateMoves: the estimate runs every 50 ms, and the
// pool hears it when this client's share moved by tellStep or tellEvery
// estimates passed, not at every estimate; a client whose captchas are all
// answered says so at once, and its next estimate is told at once again.
func TestPoolToldWhenTheEstimateMoves(t *testing.T) {
	t.Parallel()
	c := offlineClient(t)
	learnImagesAfter1s(c, 25*time.Millisecond)
	k := c.timing.forKind(KindImage)
	every := 50 * time.Millisecond
	o := newOccupancy(c, every, time.Hour, 0)
	pool := &staticPool{others: []Occupancy{{V: 1}}}
	o.pool = pool
	now := time.Now()
	for range 3 {
		o.add(KindImage, k, now.Add(-100*time.Millisecond), nil) // surely not done: the estimate stays
	}
	decide := func(at time.Time) int {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.handBack(at)
		return len(pool.reported)
	}
	if n := decide(now); n != 1 {
		t.Fatalf("first estimate: %d reports, want 1", n)
	}
	for i := 1; i < tellEvery; i++ {
		if n := decide(now.Add(time.Duration(i) * every)); n != 1 {
			t.Fatalf("estimate %d, unchanged: %d reports, want still 1", i, n)
		}
	}
	if n := decide(now.Add(tellEvery * every)); n != 2 {
		t.Fatalf("after %d estimates: %d reports, want 2", tellEvery, n)
	}
	// A captcha surely done moves its share by a thread (handed back at
	// once, and told at once).
	o.add(KindImage, k, now.Add(-5*time.Second), nil)
	if n := decide(now.Add(tellEvery*every + every)); n != 3 {
		t.Fatalf("a captcha surely done: %d reports, want 3", n)
	}
}

// TestWindowClaims: a claim takes room no captcha holds or waits for and
// no other claim has; the acquire whose context carries it takes it
// without waiting; one given back frees its room at once and says so;
// giving back a claim an acquire took changes nothing.
func TestWindowClaims(t *testing.T) {
	t.Parallel()
	w := newWindow() // limit 4
	ctx := context.Background()
	first := w.claim(3)
	if len(first) != 3 {
		t.Fatalf("claimed %d of 3 in an empty window of 4", len(first))
	}
	if got := w.claim(3); len(got) != 1 {
		t.Fatalf("claimed %d with 3 of 4 claimed, want 1", len(got))
	}
	if _, err := w.acquire(WithPlanClaim(ctx, first[0])); err != nil { // takes its claim, holds a thread
		t.Fatal(err)
	}
	first[0].Release() // taken: nothing to give back
	if got := w.claim(1); len(got) != 0 {
		t.Fatalf("claimed %d with 1 held and 3 claimed, want 0", len(got))
	}
	changed := w.changed()
	first[1].Release()
	first[1].Release() // twice: once given back
	select {
	case <-changed:
	default:
		t.Fatal("a claim given back did not say the window has room")
	}
	if got := w.claim(2); len(got) != 1 {
		t.Fatalf("claimed %d after one claim given back, want 1", len(got))
	}
	// A claim of another window is not this one's to take.
	other := newWindow().claim(1)[0]
	wctx, cancel := context.WithTimeout(WithPlanClaim(ctx, other), 20*time.Millisecond)
	defer cancel()
	if _, err := w.acquire(wctx); err == nil {
		t.Fatal("an acquire with another window's claim took a thread of a full window")
	}
}
