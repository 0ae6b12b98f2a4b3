package solver

import (
	"context"
	"math"
	"sync"
	"time"
)

// The service frees a plan thread when it has solved a captcha, not when the
// client fetches the answer: between the two, the thread is paid and idle.
// A Client can tell when a captcha is probably solved from what it learned
// of the kind's ready times, and say so (WithProbablyReady, and its own
// plan window, window.go), so that the next captcha goes to the service
// about when a thread frees there.
//
// "Probably" is the kind's fitted distribution at 1 − miss: the captcha is
// still being solved with probability miss. A capacity refusal at in.php
// says a thread was not free after all: miss halves (down to minMiss); each
// accepted submission lets it creep back up by missStep (up to maxMiss), so
// the hand-out comes as early as refusals allow.
const (
	maxMiss  = 0.10
	minMiss  = 0.002
	missStep = 0.002
)

type readyKey struct{}

// WithProbablyReady returns a copy of ctx under which Client.Solve calls f
// once, on the goroutine that called Solve and before Solve returns, when the
// captcha it submitted is probably solved at the service (see above). It is
// not called for a kind the Client has not learned yet, nor when the
// answer or an error comes first. f must be quick.
func WithProbablyReady(ctx context.Context, f func()) context.Context {
	return context.WithValue(ctx, readyKey{}, f)
}

// ProbablyReady calls the function WithProbablyReady put in ctx, if there
// is one: how a Solver other than Client (an in-process solver, a test)
// says that the captcha of the Solve call under ctx is probably solved.
func ProbablyReady(ctx context.Context) {
	if f := probablyReadyHook(ctx); f != nil {
		f()
	}
}

// probablyReadyHook returns the function WithProbablyReady put in ctx, nil
// when there is none.
func probablyReadyHook(ctx context.Context) func() {
	f, _ := ctx.Value(readyKey{}).(func())
	return f
}

// holdBack is a Client's miss rate: how early it says a captcha is probably
// ready. It is safe for concurrent use.
type holdBack struct {
	mu   sync.Mutex
	miss float64
}

func (h *holdBack) rate() float64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.miss == 0 {
		h.miss = maxMiss
	}
	return h.miss
}

// refused halves the miss rate: a thread was not free when it was thought to
// be.
func (h *holdBack) refused() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.miss == 0 {
		h.miss = maxMiss
	}
	h.miss = max(h.miss/2, minMiss)
}

// accepted lets the miss rate creep back up.
func (h *holdBack) accepted() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.miss == 0 {
		h.miss = maxMiss
	}
	h.miss = min(h.miss+missStep, maxMiss)
}

// readyBy returns the offset from submission by which a captcha of kind is
// ready with probability q, from the kind's plan; false when the kind is not
// learned yet.
func (p *poller) readyBy(kind string, k kindTiming, q float64) (time.Duration, bool) {
	if k.fixed {
		return 0, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	ks := p.stats(kind)
	ks.planned(k)
	if !ks.hasPlan {
		return 0, false
	}
	z := math.Sqrt2 * math.Erfinv(2*q-1)
	return time.Duration(math.Exp(ks.mu + ks.sigma*z)), true
}
