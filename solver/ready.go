package solver

import (
	"context"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/captchaq/captchaq/retry"
)

// The margin z of the hand-back (package doc, "Threads handed back"): its
// start, its step up at a plan-full refusal, its step down at an accepted
// submission, and its bounds.
const (
	zStart = 0.5
	zUp    = 0.25
	zDown  = 0.0125
	zMax   = 3.0
	zMin   = -2.0
)

type readyKey struct{}

// WithProbablyReady returns a copy of ctx under which Client.Solve calls f
// at most once, on the goroutine that called Solve and before Solve returns,
// when the captcha it submitted is probably solved at the service (see
// above). It is not called when the answer or an error comes first. f must
// be quick.
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

func probablyReadyHook(ctx context.Context) func() {
	f, _ := ctx.Value(readyKey{}).(func())
	return f
}

// holder is a captcha that holds a thread, as the occupancy sees it.
type holder struct {
	kind      string
	k         kindTiming
	submitted time.Time
	lo        time.Duration // offset of its last CAPCHA_NOT_READY; guarded by occupancy.mu
	back      chan struct{} // closed when it should hand its thread back
	onBack    func()        // what handing it back does, on the goroutine of Solve
	handed    bool          // guarded by occupancy.mu
	// confirm asks its wait to poll now instead of at its next scheduled
	// poll (see confirm); buffered, one at a time.
	confirm chan struct{}
	// lastOnly: its only poll left is its last, which keeps its time, so
	// it is not asked to confirm again; guarded by occupancy.mu.
	lastOnly bool
	// notBefore: it is not asked to confirm before then, the time of the
	// scheduled poll a failed confirm took; guarded by occupancy.mu.
	notBefore time.Time
}

// occupancy decides which of a Client's captchas hand their threads back
// (see above). It is safe for concurrent use; a goroutine runs while there
// are holders.
type occupancy struct {
	c       *Client
	every   time.Duration // between two estimates
	hold    time.Duration // the longest hold after a refusal
	mu      sync.Mutex
	holders map[*holder]struct{}
	z       float64
	running bool
	freed   chan struct{} // closed and replaced when a captcha of the Client is answered
	pool    Pool          // the other clients on the plan; nil: none known
	// told and toldAt: the estimate last reported to the pool, and when.
	told   Occupancy
	toldAt time.Time
	asking *holder // asked to confirm and not settled yet; nil: none
	// askedAt is when a captcha was last asked to confirm (confirm).
	askedAt time.Time
	// pace is PollInterval, askPace the service's (Service.askPace);
	// calls and callsAt: the res.php calls the
	// confirms may spend, and when they were counted (callCredit).
	pace    time.Duration
	askPace float64
	calls   float64
	callsAt time.Time
	quiet   time.Time // no confirm before then: the service refused a call for its rate
	own     Occupancy // this client's estimate at the last decision (free), for the pool
	// credit: the reports the client may make now, at most tellBurst,
	// earning one every tellEvery estimates (tell); creditAt: when it
	// was counted.
	credit   float64
	creditAt time.Time
}

// Pool is what a Client's hand-back knows of the other clients handing
// back threads of the same plan (Client.JoinPool). Implementations must be
// quick and safe for concurrent use.
type Pool interface {
	// Report is told this client's estimate at each estimate, and the zero
	// Occupancy when it has no captcha in flight.
	Report(Occupancy)
	// Others returns the estimates the other clients reported last,
	// leaving out those gone quiet. Reports out of range (not a number,
	// a variance below 0, more than 65536 captchas) are ignored.
	Others() []Occupancy
}

// Occupancy is one client's estimate of its captchas at the service.
type Occupancy struct {
	// V is the variance of how many of its captchas the service is still
	// solving: ΣS(1−S).
	V float64 `json:"v"`
	// Free is how many of the plan threads it holds are free at the
	// service, less its share of the pool's margin: n − E − z·V/√ΣV. It is
	// fractional, and negative when captchas it handed back are probably
	// still being solved.
	Free float64 `json:"free"`
	// Ready is how many of the plan threads it holds are probably free at
	// the service, before the margin: n − E. The client with the most asks
	// the service whether one of its captchas is done (see ask). A report
	// without it (a worker of an earlier version) counts as none.
	Ready float64 `json:"ready,omitempty"`
	// Held says it cannot ask now: its res.php calls have spent what the
	// confirms may (callCredit), or the service refused one for its rate.
	// Its Ready counts in the pool's, but the others do not leave the
	// asking to it.
	Held bool `json:"held,omitempty"`
}

// maxOccupancy bounds what another client's report can say: no client has
// that many captchas in flight.
const maxOccupancy = 1 << 16

// sane reports whether o is a report a client can make: a variance in
// [0, maxOccupancy], free threads within ±maxOccupancy. Others are
// ignored: a NaN would stop every hand-back of the pool, and a huge
// number of free threads keep the allocation (free) counting them out
// one by one.
func (o Occupancy) sane() bool {
	return o.V >= 0 && o.V <= maxOccupancy && math.Abs(o.Free) <= maxOccupancy && math.Abs(o.Ready) <= maxOccupancy
}

// JoinPool makes c's hand-back decide with the pool's other clients how
// many plan threads are free (see handBack).
func (c *Client) JoinPool(p Pool) {
	c.occ.mu.Lock()
	c.occ.pool = p
	c.occ.mu.Unlock()
}

func newOccupancy(c *Client, every, hold, pace time.Duration) *occupancy {
	ap := 1.0
	if c != nil {
		ap = c.service.askPace()
	}
	return &occupancy{c: c, every: every, hold: hold, pace: pace, askPace: ap, calls: callBurst, holders: map[*holder]struct{}{}, z: zStart, freed: make(chan struct{}), credit: tellBurst}
}

// add registers a captcha that holds a thread from submitted on; onBack
// hands it back.
func (o *occupancy) add(kind string, k kindTiming, submitted time.Time, onBack func()) *holder {
	h := &holder{kind: kind, k: k, submitted: submitted, back: make(chan struct{}), onBack: onBack, confirm: make(chan struct{}, 1)}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.holders[h] = struct{}{}
	if !o.running {
		o.running = true
		go o.run()
	}
	return h
}

// notReady records that h (nil: none) was not ready at offset lo.
func (o *occupancy) notReady(h *holder, lo time.Duration) {
	if h == nil {
		return
	}
	o.mu.Lock()
	h.lo = max(h.lo, lo)
	// A poll said it: a confirm still buffered asks nothing new.
	o.unask(h)
	o.mu.Unlock()
}

// unask ends h's confirm, if h is the captcha the Client is asking, with
// the request still buffered for it. Callers hold o.mu.
func (o *occupancy) unask(h *holder) {
	if o.asking != h {
		return
	}
	o.asking = nil
	select {
	case <-h.confirm:
	default:
	}
}

// settled says h's wait has made, or will not make, the poll it was asked
// for (confirm): another captcha of the Client may be asked. A request
// made again since (after its poll said CAPCHA_NOT_READY, before it
// settled) goes with it: a confirm is buffered only for the captcha the
// Client counts as asking.
func (o *occupancy) settled(h *holder) {
	if h == nil {
		return
	}
	o.mu.Lock()
	o.unask(h)
	o.mu.Unlock()
}

// failed says h's confirm failed (HTTP 5xx or 429, a network error) in
// place of its scheduled poll of at: h is not asked again before then. A
// failed poll says nothing of the captcha, which stays the likeliest done;
// asked at every estimate, it would spend its schedule's polls on a
// gateway's passing refusals within milliseconds, where its schedule polls
// past them.
func (o *occupancy) failed(h *holder, at time.Time) {
	o.mu.Lock()
	h.notBefore = at
	o.mu.Unlock()
}

// declined says h was asked to confirm with only its last poll left, which
// keeps its time: it is not asked again, and another captcha of the Client
// may be.
func (o *occupancy) declined(h *holder) {
	o.mu.Lock()
	h.lastOnly = true
	if o.asking == h {
		o.asking = nil
	}
	o.mu.Unlock()
}

// done unregisters h; answered says its answer came, so a thread at the
// service is free for sure.
func (o *occupancy) done(h *holder, answered bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.holders, h)
	if o.asking == h {
		o.asking = nil
	}
	if answered {
		close(o.freed)
		o.freed = make(chan struct{})
	}
}

// refused makes the hand-back more careful, and waits until a captcha of the
// Client is answered or BatchGap (1 s) passes: the thread of the refused
// submission, which its caller gives back when Solve returns, must not carry
// the next captcha into the same full plan at once.
func (o *occupancy) refused(ctx context.Context) {
	o.mu.Lock()
	o.z = min(o.z+zUp, zMax)
	freed := o.freed
	o.mu.Unlock()
	t := time.NewTimer(o.hold)
	defer t.Stop()
	select {
	case <-freed:
	case <-t.C:
	case <-ctx.Done():
	}
}

// accepted makes the hand-back a little bolder.
func (o *occupancy) accepted() {
	o.mu.Lock()
	o.z = max(o.z-zDown, zMin)
	o.mu.Unlock()
}

func (o *occupancy) run() {
	period := o.every
	t := time.NewTicker(period)
	defer t.Stop()
	for range t.C {
		o.mu.Lock()
		if len(o.holders) == 0 {
			o.running = false
			if o.pool != nil {
				o.pool.Report(Occupancy{})
				o.told, o.toldAt = Occupancy{}, time.Time{}
				o.spend(o.c.now())
			}
			o.mu.Unlock()
			return
		}
		o.handBack(o.c.now())
		p := o.period(len(o.holders))
		o.mu.Unlock()
		if p != period {
			period = p
			t.Reset(p)
		}
	}
}

// estimateCost is what one estimate costs per captcha in flight, with
// room: about half a microsecond (BenchmarkHandBack, a kind's window of
// learnWindow answers), twenty times over, so that the estimate takes at
// most about a twentieth of a core.
const estimateCost = 10 * time.Microsecond

// period returns the time between two estimates with n captchas in flight:
// every (BatchGap/20), or, for a Client with so many captchas in flight
// that estimating that often would cost more than a twentieth of a core
// (thousands), longer, up to four times every (BatchGap/5). The pool hears
// a client at least every tellEvery·every (tell), which stays well within
// the time others count a report.
func (o *occupancy) period(n int) time.Duration {
	return min(max(time.Duration(n)*estimateCost, o.every), tellEvery*o.every)
}

// handBack signals the holders that are probably done (see above): E and σ
// count every captcha of the Client still in flight, those that handed their
// threads back too, against the threads it still holds. Callers hold o.mu.
func (o *occupancy) handBack(now time.Time) {
	type est struct {
		h *holder
		s float64
	}
	ests := make([]est, 0, len(o.holders))
	var e, v float64
	// The captcha likeliest done, handed back or not, that has a poll
	// left before its last and whose last confirm did not fail just now.
	var likeliest est
	likeliest.s = 1
	for h := range o.holders {
		s := o.c.poller.survival(h.kind, h.k, now.Sub(h.submitted), h.lo)
		e += s
		v += s * (1 - s)
		if !h.handed {
			ests = append(ests, est{h, s})
		}
		if s < likeliest.s && !h.lastOnly && !now.Before(h.notBefore) {
			likeliest = est{h, s}
		}
	}
	n := float64(len(ests))
	others := o.others()
	free := o.free(n, e, v, others)
	if o.pool != nil {
		// The client with the most asks; one that cannot would keep the
		// others from asking until its credit or the quiet ends.
		o.own.Held = o.callCredit(now) < 1
	}
	o.tell(now)
	if free <= 0 {
		if o.ask(n-e, others) {
			// A thread is probably free, but the margin keeps it.
			o.confirm(likeliest.h, now)
		}
		return
	}
	slices.SortFunc(ests, func(a, b est) int { return cmpFloat(a.s, b.s) })
	for _, x := range ests[:min(free, len(ests))] {
		x.h.handed = true
		close(x.h.back)
	}
}

// ask reports whether the Client asks the service whether its likeliest
// done captcha is done (confirm), ready being its n − E, the threads it
// holds that are probably free before the margin: when that is half a
// thread or more, or, in a pool, when the pool's threads probably free
// come to half a thread or more and no other client that can ask (not
// Held) has more of them. In a
// pool of five workers with three threads each, no worker alone is often
// half a thread sure, while the pool is most of the time: asked by the
// worker likeliest to find one, the service frees the margin's threads
// sooner. Callers hold o.mu.
func (o *occupancy) ask(ready float64, others []Occupancy) bool {
	if ready >= askAt {
		return true
	}
	if ready <= 0 || len(others) == 0 {
		return false
	}
	sum := ready
	for _, x := range others {
		if x.Ready > ready && !x.Held {
			return false // it asks
		}
		sum += x.Ready
	}
	return sum >= askAt
}

// askAt is how many threads must probably be free before one is asked
// about.
const askAt = 0.5

// confirm asks h (nil: none) to poll res.php now, in place of its next
// scheduled poll, unless a captcha of the Client was asked and has not
// settled yet, or one was asked less than tellEvery estimates (BatchGap/5,
// 200 ms) ago: at most one such poll in flight per Client, at most one per
// 200 ms. The estimate runs every 50 ms so that threads come back soon;
// asking that often spends a captcha's scheduled polls ahead of their time
// (a straggler past everything its kind's answers say is asked again and
// again), and the calls per solve rise without the plan used rising with
// them. Callers hold o.mu.
func (o *occupancy) confirm(h *holder, now time.Time) {
	// An ask "later" than now was made before the clock (Config.Now)
	// stepped back: it does not hold the next one back for the step.
	if since := now.Sub(o.askedAt); h == nil || o.asking != nil || !o.askedAt.IsZero() && since >= 0 && since < tellEvery*o.every {
		return
	}
	if o.callCredit(now) < 1 {
		return
	}
	select {
	case h.confirm <- struct{}{}:
		o.asking, o.askedAt = h, now
	default:
	}
}

// others returns the other clients' reports that are sane; nil without a
// pool. Callers hold o.mu.
func (o *occupancy) others() []Occupancy {
	if o.pool == nil {
		return nil
	}
	return slices.DeleteFunc(slices.Clone(o.pool.Others()), func(x Occupancy) bool { return !x.sane() })
}

// free returns how many of the n threads the Client holds (not handed back)
// to hand back, E and V being the expectation and variance of how many of
// its captchas the service is still solving. Callers hold o.mu.
//
// Alone: round(n − E − z·√V). In a pool, the threads free pool-wide are
// Σn − ΣE − z·√ΣV; each client counts its share of them, x = n − E −
// z·V/√ΣV (the shares of the margin sum to z·√ΣV, less than the Σz·√V the
// clients would keep each alone), reports it, and the pool's
// round(Σx) threads go one by one to the client with the most left, so
// that five clients each a fraction of a thread short of handing one back
// do not all keep it. Every client runs the same allocation on the same
// reports; the others' are up to one estimate old.
func (o *occupancy) free(n, e, v float64, others []Occupancy) int {
	if o.pool == nil {
		return int(math.Round(n - e - o.z*math.Sqrt(v)))
	}
	all := v
	for _, x := range others {
		all += x.V
	}
	own := n - e
	if all > 0 {
		own -= o.z * v / math.Sqrt(all)
	}
	o.own = Occupancy{V: v, Free: own, Ready: n - e}
	total := own
	left := make([]float64, 0, len(others)+1)
	for _, x := range others {
		total += x.Free
		left = append(left, x.Free)
	}
	self := len(left)
	left = append(left, own)
	mine := 0
	for range int(math.Round(total)) {
		// The client with the most left takes the thread; on a tie, one
		// of the others.
		best := 0
		for i := range left {
			if left[i] > left[best] || left[i] == left[best] && best == self {
				best = i
			}
		}
		if left[best] <= 0 {
			break
		}
		left[best]--
		if best == self {
			mine++
		}
	}
	return min(mine, int(n))
}

// The estimate runs every BatchGap / 20 (50 ms): a captcha the service
// finishes waits for the next one to hand its thread back, half a period on
// average, and at 1.35 solves a second on a plan of 15 (5–15-s solves)
// 200 ms between estimates cost a tenth of a thread. The pool need not hear
// every estimate: a client tells it when its share moved by tellStep, or
// tellEvery estimates passed, and no more often on average than once every
// tellEvery estimates (tellBurst at once), so the messages stay at most
// five a second per worker, as when it heard every estimate at BatchGap/5:
// a client with many captchas in flight moves its share at every estimate.
const (
	tellStep  = 0.1
	tellEvery = 4
	tellBurst = 2
)

// tell reports the last decision's estimate to the pool when it moved by
// tellStep since the last report, or tellEvery estimates passed, or none
// was made since the client had nothing in flight; a report that moved
// waits while the client has no credit. Callers hold o.mu.
func (o *occupancy) tell(now time.Time) {
	if o.pool == nil {
		return
	}
	x := o.own
	if !o.toldAt.IsZero() && now.Sub(o.toldAt) < tellEvery*o.every &&
		math.Abs(x.Free-o.told.Free) < tellStep && math.Abs(x.V-o.told.V) < tellStep &&
		math.Abs(x.Ready-o.told.Ready) < tellStep && x.Held == o.told.Held {
		return
	}
	if o.earn(now) < 1 {
		return
	}
	o.pool.Report(x)
	o.told, o.toldAt = x, now
	o.spend(now)
}

// earn counts the credit earned since it was last counted, one report
// every tellEvery estimates, up to tellBurst, and returns it. Callers hold
// o.mu.
func (o *occupancy) earn(now time.Time) float64 {
	if !o.creditAt.IsZero() && now.After(o.creditAt) {
		o.credit = min(o.credit+float64(now.Sub(o.creditAt))/float64(tellEvery*o.every), tellBurst)
	}
	o.creditAt = now
	return o.credit
}

// spend counts a report made at now: the zero report of a client with
// nothing in flight is made whatever its credit, and the next waits for
// it. Callers hold o.mu.
func (o *occupancy) spend(now time.Time) {
	o.earn(now)
	o.credit = max(o.credit-1, -1)
}

// The calls a Client's confirms may spend: its res.php calls, scheduled or
// not, stay within its service's askPace times a poll every PollInterval
// (5 s) per captcha in flight. The schedules' own polls are never held back
// (they keep within their budget, fit.go); a confirm goes only when the
// calls made so far leave room for it. The credit is at most callBurst,
// and a debt of more than a minute of the budget (quietFor poll intervals)
// is forgotten: a burst of scheduled polls silences the confirms for about
// a minute at most, as a rate refusal does. A shorter memory would let a
// confirm through between every two bursts of a schedule that already
// spends more than the budget, as an adaptive one does on 2captcha, whose
// budget is its pace itself. A res.php
// call the service refuses for its rate (HTTP 429, ERROR_TOO_MUCH_REQUESTS,
// ERROR: 1005) stops the confirms for quietFor poll intervals (a minute):
// the schedules alone then poll, as the service asks.
const (
	callBurst = 2
	quietFor  = 12
)

// callCredit returns the calls the confirms may spend now. Callers hold
// o.mu.
func (o *occupancy) callCredit(now time.Time) float64 {
	if o.pace <= 0 {
		return 1 // a test's occupancy: no budget
	}
	if q := o.quiet.Sub(now); q > 0 {
		if q > quietFor*o.pace {
			// Set before the clock (Config.Now) stepped back: a minute
			// from now, not the minute and the step.
			o.quiet = now.Add(quietFor * o.pace)
		}
		return 0
	}
	if !o.callsAt.IsZero() && now.After(o.callsAt) {
		earned := o.askPace * float64(len(o.holders)) * float64(now.Sub(o.callsAt)) / float64(o.pace)
		o.calls = min(o.calls+earned, callBurst)
	}
	o.callsAt = now
	return o.calls
}

// polled counts one res.php call of the Client against the confirms'
// credit; err is how it ended.
func (o *occupancy) polled(err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := o.c.now()
	o.callCredit(now)
	o.calls = max(o.calls-1, -max(callBurst, o.askPace*float64(len(o.holders))*quietFor))
	if ClassOf(err) == retry.Capacity {
		o.quiet = now.Add(quietFor * o.pace)
	}
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

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
		if from := empiricalSurvival(obs, bounded, lo, ks.mu, ks.sigma); from >= 2/float64(n) {
			return math.Min(empiricalSurvival(obs, bounded, age, ks.mu, ks.sigma)/from, 1)
		}
	}
	surv := func(t time.Duration) float64 {
		if t <= 0 {
			return 1
		}
		return 1 - normCDF((math.Log(float64(t))-ks.mu)/ks.sigma)
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

// spreadWindow is an observed window and, for an answer found at its
// captcha's first poll (lo = 0), what says when before hi it was ready:
// ref, how many of the answers with both bounds were ready by hi (each
// spread evenly over its window), and fhi, the fit's distribution function
// at hi.
type spreadWindow struct {
	lo, hi   time.Duration
	ref, fhi float64
}

// spreadObs returns the kind's observations, each answer found at a first
// poll with what says when it was ready (spreadWindow), and the answers
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
func (ks *kindStats) spreadObs() ([]spreadWindow, []readyWindow) {
	if ks.spreadValid && ks.spreadMu == ks.mu && ks.spreadSigma == ks.sigma && len(ks.spread) == len(ks.obs) {
		return ks.spread, ks.bounded
	}
	ks.bounded = ks.bounded[:0]
	for _, o := range ks.obs {
		if o.lo > 0 {
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
		w := spreadWindow{lo: o.lo, hi: o.hi}
		if o.lo == 0 {
			w.ref = evenReady(ks.bounded, o.hi)
			if informed {
				w.fhi = logNormalCDF(ks.mu, ks.sigma, o.hi)
			}
		}
		ks.spread = append(ks.spread, w)
	}
	ks.spreadValid, ks.spreadMu, ks.spreadSigma = true, ks.mu, ks.sigma
	return ks.spread, ks.bounded
}

// logNormalCDF is F(t) of the log-normal (μ, σ of the log in nanoseconds).
func logNormalCDF(mu, sigma float64, t time.Duration) float64 {
	if t <= 0 {
		return 0
	}
	return normCDF((math.Log(float64(t)) - mu) / sigma)
}

// evenReady is how many of obs were ready by t, each spread evenly over its
// window.
func evenReady(obs []readyWindow, t time.Duration) float64 {
	var ready float64
	for _, o := range obs {
		switch {
		case t >= o.hi:
			ready++
		case t > o.lo:
			ready += float64(t-o.lo) / float64(o.hi-o.lo)
		}
	}
	return ready
}

// empiricalSurvival is the share of obs not ready by t (see spreadObs;
// bounded are its answers with both bounds, (μ, σ) the fit).
func empiricalSurvival(obs []spreadWindow, bounded []readyWindow, t time.Duration, mu, sigma float64) float64 {
	rt := evenReady(bounded, t)
	ft := logNormalCDF(mu, sigma, t)
	var ready float64
	for _, o := range obs {
		switch {
		case t >= o.hi:
			ready++
		case t <= o.lo:
		case o.lo > 0:
			ready += float64(t-o.lo) / float64(o.hi-o.lo)
		case o.ref > 1e-9:
			ready += math.Min(rt/o.ref, 1)
		case o.fhi > 0:
			ready += math.Min(ft/o.fhi, 1)
		default:
			ready += float64(t) / float64(o.hi)
		}
	}
	return 1 - ready/float64(len(obs))
}
