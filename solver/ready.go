package solver

import (
	"context"
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
	// notBefore: it is not asked to confirm before then: the time of the
	// scheduled poll a failed confirm took (failed), or a poll interval
	// after a confirm that left it its last polls (notYet); guarded by
	// occupancy.mu.
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

// notYet says h, not ready, has only its last polls left (wait,
// confirmKeep): it is not asked to confirm again before until, and
// another captcha of the Client may be.
func (o *occupancy) notYet(h *holder, until time.Time) {
	o.mu.Lock()
	h.notBefore = until
	o.unask(h)
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
	// e, v: what the hand-back reads; ea: what the asking reads
	// (askSurvival).
	var e, v, ea float64
	// The captcha likeliest done, handed back or not, that has a poll
	// left before its last and whose last confirm did not fail just now.
	var likeliest est
	likeliest.s = 1
	for h := range o.holders {
		age := now.Sub(h.submitted)
		s := o.c.poller.survival(h.kind, h.k, age, h.lo)
		a := s
		if s >= 1 {
			a = o.c.poller.askSurvival(h.kind, h.k, age, h.lo)
		}
		e += s
		v += s * (1 - s)
		ea += a
		if !h.handed {
			ests = append(ests, est{h, s})
		}
		if a < likeliest.s && !h.lastOnly && !now.Before(h.notBefore) {
			likeliest = est{h, a}
		}
	}
	n := float64(len(ests))
	others := o.others()
	free := o.free(n, e, v, others)
	o.own.Ready = n - ea
	if o.pool != nil {
		// The client with the most asks; one that cannot would keep the
		// others from asking until its credit or the quiet ends.
		o.own.Held = o.callCredit(now) < 1
	}
	o.tell(now)
	if free <= 0 {
		if o.ask(n-ea, others) {
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

// The calls a Client's confirms may spend: its res.php calls, scheduled or
// not, stay within its service's askPace times a poll every PollInterval
// (5 s) per captcha in flight. The schedules' own polls are never held back
// (they keep within their budget, schedule); a confirm goes only when the
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
