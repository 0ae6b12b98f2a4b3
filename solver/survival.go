// Survival statistics for the hand-back: the chance a captcha not ready at
// one offset is still being solved at another, read from its kind's answers
// where they say enough and from the fitted distribution beyond them.

package solver

import (
	"math"
	"time"

	"github.com/captchaq/captchaq/solver/internal/schedule"
)

// survival returns the chance that a captcha of kind, not ready at offset lo,
// is still being solved at offset age; 1 when the kind is not learned, or
// lo is beyond anything its answers and fit allow. It
// reads the kind's own answers where they say enough, the fitted
// distribution beyond them and for the pool's learning alone. An answer
// seen after a CAPCHA_NOT_READY counts as ready evenly over its window; an
// answer found at a captcha's first poll says only that it was ready by
// then, and counts as ready before that poll as the answers with both
// bounds say (spreadObs), not evenly from its submission on: of a kind
// solved in 5–15 s whose first poll is at 7 s, the fifth found there would
// count 3/7 of itself done at 3 s, and the hand-back would give those
// threads to captchas the service refuses.
func (p *poller) survival(kind string, k kindTiming, age, lo time.Duration) float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	ks := p.stats(kind)
	if k.fixed {
		// Polled on the fixed schedule, still learned from.
		k.fixed = false
	}
	ks.planned(k)
	if !ks.hasPlan {
		return 1
	}
	if n := len(ks.obs); n >= minLearned {
		obs, bounded := ks.spreadObs()
		if from := schedule.EmpiricalSurvival(obs, bounded, lo, ks.mu, ks.sigma); from >= 2/float64(n) {
			return math.Min(schedule.EmpiricalSurvival(obs, bounded, age, ks.mu, ks.sigma)/from, 1)
		}
	}
	surv := func(t time.Duration) float64 {
		if t <= 0 {
			return 1
		}
		return 1 - schedule.NormCDF((math.Log(float64(t))-ks.mu)/ks.sigma)
	}
	from := surv(lo)
	if from <= 1e-12 {
		// Seen not ready where the fit allows nothing: the fit says
		// nothing of it, and the service holds its thread. Counted done,
		// its thread counted free and was given out twice.
		return 1
	}
	return math.Min(surv(age)/from, 1)
}

// minAsked is how many answers of a kind, the Client's and the pool's
// together, let the hand-back ask about its captchas (askSurvival) before
// the kind is learned (minLearned).
const minAsked = 3

// askSurvival is survival as the hand-back's asking reads it (confirm,
// Occupancy.Ready): for a kind not learned yet (fewer than minLearned
// answers), from the log-normal fit of the answers there are, once there
// are minAsked of them and one was seen not ready before its answer (or
// the pool's), as a learned kind's fit is read beyond its answers; 1 with
// fewer. Asking spends only the captcha's own scheduled polls, within the
// confirms' budget, and never gives a thread back: so a fit that would
// hand back threads the service still holds may still say which captcha
// to ask first, where the kind's first answers would otherwise wait for
// its fixed schedule's polls, 5 s apart.
func (p *poller) askSurvival(kind string, k kindTiming, age, lo time.Duration) float64 {
	p.mu.Lock()
	ks := p.stats(kind)
	if k.fixed {
		k.fixed = false
	}
	ks.planned(k)
	if ks.hasPlan {
		p.mu.Unlock()
		return p.survival(kind, k, age, lo)
	}
	defer p.mu.Unlock()
	mu, sigma, ok := ks.askFit()
	if !ok {
		return 1
	}
	surv := func(t time.Duration) float64 {
		if t <= 0 {
			return 1
		}
		return 1 - schedule.NormCDF((math.Log(float64(t))-mu)/sigma)
	}
	from := surv(lo)
	if from <= 1e-12 {
		return 1
	}
	return math.Min(surv(age)/from, 1)
}

// askFit returns the fit askSurvival reads, false while the kind has too
// few answers; computed again only when an answer or the pool's prior
// came. Callers hold the poller's lock.
func (ks *kindStats) askFit() (mu, sigma float64, ok bool) {
	bounded := ks.prior.N > 0
	for _, o := range ks.obs {
		bounded = bounded || o.Lo > 0
	}
	if len(ks.obs)+ks.prior.N < minAsked || !bounded {
		return 0, 0, false
	}
	key := askFitKey{len(ks.obs), ks.next, ks.prior}
	if !ks.askValid || ks.askKey != key {
		ks.askMu, ks.askSigma = ks.fit()
		ks.askKey, ks.askValid = key, true
	}
	return ks.askMu, ks.askSigma, ks.askSigma > 0
}

// askFitKey is what askFit's fit was computed from.
type askFitKey struct {
	n, next int
	prior   Learned
}

// spreadObs returns the kind's observations, each answer found at a first
// poll with what says when it was ready (schedule.Spread), and the answers
// with both bounds; computed again only when an answer came or the fit
// changed. Callers hold the poller's lock.
//
// Such an answer counts as ready by t < hi in the proportion the answers
// with both bounds were ready by t to those ready by hi: they were each
// seen not ready at some poll, so they say how soon the kind can be ready.
// Where none of them was ready before hi, the fit's proportion F(t)/F(hi);
// where the fit gives the window no mass, or rests on no answer with both
// bounds (the Client's or the pool's), evenly. The answers with both
// bounds are not refined by the others in turn: a self-consistent estimate
// would put every answer found at a first poll at the earliest time any
// window allows.
func (ks *kindStats) spreadObs() ([]schedule.Spread, []readyWindow) {
	if ks.spreadValid && ks.spreadMu == ks.mu && ks.spreadSigma == ks.sigma && len(ks.spread) == len(ks.obs) {
		return ks.spread, ks.bounded
	}
	ks.bounded = ks.bounded[:0]
	for _, o := range ks.obs {
		if o.Lo > 0 {
			ks.bounded = append(ks.bounded, o)
		}
	}
	// The fit says something below a first poll only when answers with
	// both bounds, the Client's or the pool's, went into it: of answers
	// found at their first polls alone it is where its iteration started
	// (half the poll, as narrow as a fit gets), and it would count every
	// captcha past that surely done, leaving the margin nothing to keep.
	informed := len(ks.bounded) > 0 || ks.prior.N > 0
	ks.spread = ks.spread[:0]
	for _, o := range ks.obs {
		w := schedule.Spread{Lo: o.Lo, Hi: o.Hi}
		if o.Lo == 0 {
			w.Ref = schedule.EvenReady(ks.bounded, o.Hi)
			if informed {
				w.FHi = schedule.LogNormalCDF(ks.mu, ks.sigma, o.Hi)
			}
		}
		ks.spread = append(ks.spread, w)
	}
	ks.spreadValid, ks.spreadMu, ks.spreadSigma = true, ks.mu, ks.sigma
	return ks.spread, ks.bounded
}
