package solver

import (
	"math"
	"sync"
	"time"

	"github.com/captchaq/captchaq/solver/internal/schedule"
)

const (
	learnWindow = 128 // observations kept per kind
	minLearned  = 10  // observations before the adaptive schedule is used
	replanEvery = 4   // new observations before the schedule is recomputed
	// probeEvery: while a kind is probed, one captcha in probeEvery makes an
	// early poll.
	probeEvery = 4
	// probeNeed is how many observations with a lower bound (a
	// CAPCHA_NOT_READY before the answer) the window must hold before the
	// probing of a kind stops.
	probeNeed = 8
	// coldRungs is how many early polls, each at half the next, a captcha
	// of a kind not learned yet makes before the fixed schedule's first.
	coldRungs = 5
)

// readyWindow is an observation: the captcha became ready in (lo, hi] after
// submission (schedule.Window).
type readyWindow = schedule.Window

// poller learns solve times per kind and plans poll schedules. It is safe for
// concurrent use.
type poller struct {
	mu    sync.Mutex
	kinds map[string]*kindStats
	// soon receives (without blocking) when answers of a kind the pool has
	// not learned yet are worth sharing before the next periodic share.
	soon chan struct{}
}

type kindStats struct {
	obs      []readyWindow // ring of the last learnWindow observations
	next     int           // ring position of the next observation
	fresh    int           // observations since plan was computed
	unshared int           // observations since the kind was last shared (Client.ShareTimings)
	plan     []time.Duration
	hasPlan  bool
	planFrom kindTiming
	mu       float64 // the fit plan was computed from (fit)
	sigma    float64
	probes   int     // captchas scheduled while the kind is probed
	prior    Learned // what the pool learned (Client.ShareTimings); N = 0: nothing
	// obs as survival reads them, and those with both bounds (spreadObs),
	// for the fit spreadMu, spreadSigma; spreadValid is cleared at every
	// answer.
	spread                []schedule.Spread
	bounded               []readyWindow
	spreadMu, spreadSigma float64
	spreadValid           bool
	// askMu, askSigma: the fit askSurvival reads before the kind is
	// learned, computed from askKey.
	askMu, askSigma float64
	askKey          askFitKey
	askValid        bool
}

// observe records that a captcha of kind became ready in (lo, hi].
func (p *poller) observe(kind string, lo, hi time.Duration) {
	if hi <= 0 || lo < 0 || lo > hi {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	ks := p.stats(kind)
	if len(ks.obs) < learnWindow {
		ks.obs = append(ks.obs, readyWindow{Lo: lo, Hi: hi})
	} else {
		ks.obs[ks.next] = readyWindow{Lo: lo, Hi: hi}
	}
	ks.next = (ks.next + 1) % learnWindow
	ks.spreadValid = false
	ks.fresh++
	ks.unshared = min(ks.unshared+1, learnWindow)
	// While the pool has not learned the kind, its answers are shared at
	// once: other workers then plan the kind as soon as the pool has seen
	// minLearned answers, not after the next periodic share.
	if ks.prior.N < minLearned {
		select {
		case p.soonChan() <- struct{}{}:
		default:
		}
	}
}

// soonChan returns p.soon, made on first use. Callers hold p.mu.
func (p *poller) soonChan() chan struct{} {
	if p.soon == nil {
		p.soon = make(chan struct{}, 1)
	}
	return p.soon
}

func (p *poller) stats(kind string) *kindStats {
	if p.kinds == nil {
		p.kinds = map[string]*kindStats{}
	}
	ks, ok := p.kinds[kind]
	if !ok {
		ks = &kindStats{}
		p.kinds[kind] = ks
	}
	return ks
}

// schedule returns the offsets from submission at which to call res.php for
// a captcha of kind. The slice must not be modified.
//
// It is the kind's plan (planned). While neither the Client nor the pool
// has learned the kind, every captcha climbs a ladder of early polls before
// the fixed schedule (coldLadder). Once the plan is learned, while the kind
// is probed (probeAt), every probeEvery-th captcha polls once more before
// the plan's first poll, the calls still capped at MaxCalls.
func (p *poller) schedule(kind string, k kindTiming) []time.Duration {
	if k.fixed {
		return k.fixedSchedule()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	ks := p.stats(kind)
	base := ks.planned(k)
	if !ks.learned() {
		return k.coldLadder(base, ks.notReadyBy())
	}
	at := probeAt(ks.obs, base, k)

	if at <= 0 {
		return base
	}
	ks.probes++
	if ks.probes%probeEvery != 1 {
		return base
	}
	s := append([]time.Duration{at}, base...)
	return s[:min(len(s), k.maxCalls)]
}

// learned reports whether the Client or the pool saw minLearned answers of
// the kind: enough to plan its schedule from.
func (ks *kindStats) learned() bool { return len(ks.obs) >= minLearned || ks.prior.N >= minLearned }

// notReadyBy returns the earliest offset by which every answer seen was
// still being solved: the least lower bound of the observations (0 when
// there are none, or one was found at its first poll).
func (ks *kindStats) notReadyBy() time.Duration {
	if len(ks.obs) == 0 {
		return 0
	}
	least := ks.obs[0].Lo
	for _, o := range ks.obs[1:] {
		least = min(least, o.Lo)
	}
	return least
}

// planned returns the kind's schedule without probes: the fixed one until
// the kind is learned, then the adaptive one, recomputed every replanEvery
// answers. Callers hold the poller's lock.
func (ks *kindStats) planned(k kindTiming) []time.Duration {
	if !ks.learned() {
		return k.fixedSchedule()
	}
	if !ks.hasPlan || ks.fresh >= replanEvery || ks.planFrom != k {
		ks.mu, ks.sigma = ks.fit()
		ks.plan = k.extend(schedule.PlanAdaptive(ks.mu, ks.sigma, ks.obs, float64(min(ks.prior.N, learnWindow)), k.sched()))
		ks.plan = k.reserve(ks.plan)
		ks.hasPlan, ks.fresh, ks.planFrom = true, 0, k
	}
	return ks.plan
}

// probeAt returns when a probing captcha of a kind makes its early poll,
// or 0 when the kind needs no probing.
//
// An answer found at a captcha's first poll says only that it was ready by
// then. While fewer than probeNeed of the window's observations say more
// (ready after some poll), a probe polls at half the tightest such bound
// seen, or half the plan's first poll if that is earlier: it either halves
// what is known or brackets the ready time. So a service, or a kind, faster
// than the schedule assumes is found in a few probes, and one that is not
// stops the probing after probeNeed of them.
func probeAt(obs []readyWindow, base []time.Duration, k kindTiming) time.Duration {
	if len(obs) == 0 || len(base) == 0 {
		return 0
	}
	bounded, tight := 0, time.Duration(math.MaxInt64)
	for _, o := range obs {
		if o.Lo > 0 {
			bounded++
		} else {
			tight = min(tight, o.Hi)
		}
	}
	if bounded >= probeNeed || tight == math.MaxInt64 {
		return 0
	}
	at := min(tight, base[0]) / 2
	if at < k.resolution/4 {
		return 0 // as early as polling gets: nothing more to learn
	}
	return at
}

// fit returns the log-normal fit (μ, σ of the log of the ready time in
// nanoseconds) the kind is planned with: its own window's, pooled with what
// the pool learned (prior), each weighted by the observations it
// summarises.
func (ks *kindStats) fit() (mu, sigma float64) {
	own := len(ks.obs)
	if own > 0 {
		mu, sigma = schedule.FitLogNormal(ks.obs)
	}
	if ks.prior.N == 0 {
		return mu, sigma
	}
	pm, ps := ks.prior.logNanos()
	if own == 0 {
		return pm, ps
	}
	return pool(mu, sigma, float64(own), pm, ps, float64(min(ks.prior.N, learnWindow)))
}

// pool returns the log-normal whose log has the mean and variance of two
// samples together, summarised by (μ, σ, weight) each.
func pool(mu1, s1, w1, mu2, s2, w2 float64) (mu, sigma float64) {
	w := w1 + w2
	mu = (w1*mu1 + w2*mu2) / w
	m2 := (w1*(s1*s1+mu1*mu1) + w2*(s2*s2+mu2*mu2)) / w
	return mu, math.Max(math.Sqrt(math.Max(m2-mu*mu, 0)), minSigma)
}

// kindsLearned returns, per kind with observations not yet shared, the fit
// of its window weighted by those observations, and counts them shared.
func (p *poller) kindsLearned(now time.Time) map[string]Learned {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]Learned{}
	for kind, ks := range p.kinds {
		if ks.unshared == 0 || len(ks.obs) == 0 {
			continue
		}
		mu, sigma := schedule.FitLogNormal(ks.obs)
		out[kind] = learnedOf(mu, sigma, ks.unshared, now)
		ks.unshared = 0
	}
	return out
}

// setPriors makes what the pool learned the prior of each kind it names.
func (p *poller) setPriors(pooled map[string]Learned) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for kind, l := range pooled {
		if l.valid() != nil {
			continue
		}
		ks := p.stats(kind)
		// survival's view of the answers depends on whether the pool
		// knows the kind (spreadObs): computed again.
		ks.prior, ks.hasPlan, ks.spreadValid = l, false, false
	}
}

// unshare counts the answers of fresh, which could not be shared, as not
// shared yet.
func (p *poller) unshare(fresh map[string]Learned) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for kind, l := range fresh {
		ks := p.stats(kind)
		ks.unshared = min(ks.unshared+l.N, learnWindow)
	}
}

// readyBy returns the offset from submission by which a captcha of kind is
// ready with probability q under the kind's fit; false when the kind is not
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
