package solver

import (
	"context"
	"sync"
	"sync/atomic"
)

// The plan window's start, cap and decrease (package doc, "The plan
// window").
const (
	windowStart    = 4
	windowMax      = 10000
	windowDecrease = 0.8
	// windowStep caps what one accepted submission adds after slow start:
	// 1/limit (one a round) for a window of 8 or more, 1/8 below. A window
	// that grows by one a round is back at the limit that was refused
	// limit/5 rounds after the decrease, so its share of refused
	// submissions grows as the window shrinks: about a quarter for the
	// two or three threads each of five workers on one plan finds. Growing
	// by limit/8 a round, a small window returns there as slowly as a
	// window of 8 does.
	windowStep = 1.0 / 8
)

// window is the learned limit of a Client's captchas on the service's
// threads. It is safe for concurrent use.
type window struct {
	mu    sync.Mutex
	limit float64
	held  int
	slow  bool          // slow start: no refusal yet
	told  int           // the plan's threads as the service told them (tell); 0: untold
	share int           // this Client's share of told (setShare); 0: all of it
	round int           // decreases so far
	freed chan struct{} // closed and replaced whenever a thread frees, the limit grows or a claim is given back
	// waiting counts the captchas in acquire; claimed the claims (claim)
	// neither taken by an acquire nor given back.
	waiting, claimed int
	// pooled: a plan-wide quota bounds the pool's captchas (pool): the
	// window bounds none and learns nothing from refusals meanwhile.
	pooled bool
}

func newWindow() *window {
	return &window{limit: windowStart, slow: true, freed: make(chan struct{})}
}

// acquire waits for a thread within the limit, or for ctx; it returns the
// round it was admitted in, for refused. A claim of w that ctx carries
// (WithPlanClaim) is taken: its room is this captcha's from then on.
func (w *window) acquire(ctx context.Context) (round int, err error) {
	cl, _ := ctx.Value(planClaimKey{}).(*PlanClaim)
	w.mu.Lock()
	if cl != nil && cl.w == w && cl.state.CompareAndSwap(claimHeld, claimTaken) {
		w.claimed--
	}
	w.waiting++
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.waiting--
		w.mu.Unlock()
	}()
	for {
		w.mu.Lock()
		if w.pooled || w.held+w.claimed < int(w.limit) { // a claim's room is its captcha's
			w.held++
			r := w.round
			w.mu.Unlock()
			return r, nil
		}
		freed := w.freed
		w.mu.Unlock()
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-freed:
		}
	}
}

// claim reserves up to n of the threads that no captcha holds or waits
// for and no other claim reserved, and returns the claims.
func (w *window) claim(n int) []*PlanClaim {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.pooled {
		n = max(min(n, int(w.limit)-w.held-w.waiting-w.claimed), 0)
	}
	w.claimed += n
	out := make([]*PlanClaim, n)
	for i := range out {
		out[i] = &PlanClaim{w: w}
	}
	return out
}

// changed is closed when a thread frees, the limit grows or a claim is
// given back.
func (w *window) changed() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.freed
}

// PlanClaim is room in a Client's plan window reserved for one captcha
// whose Solve starts in a moment (Client.ClaimPlanRoom). The Solve that
// carries it (WithPlanClaim) takes it; Release gives it back if none has.
// Every claim must end one way or the other: one held on counts against
// the window until it does.
type PlanClaim struct {
	w     *window
	state atomic.Int32 // claimHeld, claimTaken or claimGiven
}

const (
	claimHeld int32 = iota
	claimTaken
	claimGiven
)

// Release gives the claim back unless a Solve took it; it may be called
// more than once, and on nil.
func (p *PlanClaim) Release() {
	if p == nil || !p.state.CompareAndSwap(claimHeld, claimGiven) {
		return
	}
	p.w.mu.Lock()
	defer p.w.mu.Unlock()
	p.w.claimed--
	p.w.wakeLocked()
}

type planClaimKey struct{}

// WithPlanClaim returns ctx carrying claim, which the Solve of the claim's
// Client under ctx takes (a nil claim: ctx as it is).
func WithPlanClaim(ctx context.Context, claim *PlanClaim) context.Context {
	if claim == nil {
		return ctx
	}
	return context.WithValue(ctx, planClaimKey{}, claim)
}

// release gives a thread back.
func (w *window) release() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.held = max(w.held-1, 0)
	w.wakeLocked()
}

func (w *window) wakeLocked() {
	close(w.freed)
	w.freed = make(chan struct{})
}

// accepted grows the limit after a submission the service took; never
// past a plan told.
func (w *window) accepted() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.slow {
		w.limit++
	} else {
		w.limit += min(1/w.limit, windowStep)
	}
	w.limit = min(w.limit, windowMax)
	if c := w.toldCapLocked(); c > 0 {
		w.limit = min(w.limit, float64(c))
	}
	w.wakeLocked()
}

// toldCapLocked is what a told plan lets this Client hold: its share, or
// the whole plan; 0 when untold.
func (w *window) toldCapLocked() int {
	if w.told > 0 && w.share > 0 {
		return min(w.share, w.told)
	}
	return w.told
}

// setShare makes share of the told plan's threads this Client's (the
// pool's other workers hold the rest); 0: all of them.
func (w *window) setShare(share int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if share == w.share {
		return
	}
	w.share = share
	if c := w.toldCapLocked(); c > 0 {
		w.limit, w.slow = float64(c), false
	}
	w.wakeLocked()
}

// tell sets the limit to the plan's threads as the service told them:
// no slow start, and no growth past them. A refusal (another client of
// the account holds threads too) still shrinks the limit, which grows
// back to the told plan.
func (w *window) tell(threads int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if threads == w.told {
		return
	}
	w.told, w.slow = threads, false
	w.limit = float64(w.toldCapLocked())
	w.wakeLocked()
}

// pool makes a plan-wide quota bound the pool's captchas (on) or not
// (Client.PoolQuota).
func (w *window) pool(on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if on != w.pooled {
		w.pooled = on
		w.wakeLocked()
	}
}

// toldSize is the plan's threads as the service told them, 0 when it did not.
func (w *window) toldSize() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.told
}

// refused shrinks the limit after a capacity refusal of a submission
// admitted in round, which still holds its thread.
func (w *window) refused(round int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pooled {
		return // the quota's early hand-back guessed wrong: no plan learned
	}
	w.slow = false
	if round != w.round {
		return
	}
	w.round++
	// In slow start the limit may be far above what was held when the
	// service said no: decrease from what was held.
	w.limit = max(min(w.limit, float64(w.held))*windowDecrease, 1)
}

// size is the limit now, rounded down.
func (w *window) size() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return int(w.limit)
}
