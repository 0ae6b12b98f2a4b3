package solver

import (
	"context"
	"crypto/sha256"
	"slices"
	"sync"
	"time"
)

// clockBack is how far a clock reading must be behind one taken before to
// count as the clock going back: readings taken by callers that then wait
// for one lock arrive a little out of order, and those are no jump.
const clockBack = time.Second

// submitLimiter spaces in.php calls of one API key: at least interval between
// two calls and, for each of its burst rules, at most burst calls in any
// window. Callers reserve a start time in arrival order, then wait for it; a
// caller that gives up while its slot is still the last one reserved gives
// it back.
//
// One limiter serves every Client of a BaseURL and key in the process, and
// the strictest limits of those clients bind all of them: the longest
// interval, and every (burst, window) rule at once. A client asking for no
// spacing or no cap (a negative MinSubmitInterval or SubmitBurst) adds no
// rule and loosens nobody else's. Limits never loosen while the process
// lives: a Client has no Close that could take its rules away.
type submitLimiter struct {
	mu        sync.Mutex
	interval  time.Duration
	rules     []burstRule // distinct rules, each enforced
	maxWindow time.Duration
	next      time.Time      // earliest start of the next call
	recent    []time.Time    // reserved start times within maxWindow, oldest first
	pending   []*reservation // reservations still waiting, oldest first
	seen      time.Time      // the latest clock reading reserve was given
}

// burstRule is at most burst calls in any window.
type burstRule struct {
	burst  int
	window time.Duration
}

// reservation is one caller's slot, and what undoing it restores.
type reservation struct {
	at        time.Time
	prevNext  time.Time // l.next before this reservation
	recorded  bool      // at was appended to l.recent
	cancelled bool
}

// tighten adds a client's limits: interval (0: none) and a rule of burst
// calls per window (burst 0: none).
func (l *submitLimiter) tighten(interval time.Duration, burst int, window time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.interval = max(l.interval, interval)
	if burst <= 0 || window <= 0 {
		return
	}
	r := burstRule{burst: burst, window: window}
	if !slices.Contains(l.rules, r) {
		l.rules = append(l.rules, r)
		l.maxWindow = max(l.maxWindow, window)
	}
}

// wait blocks until the caller may send an in.php call, or ctx is done,
// reading the time from now.
func (l *submitLimiter) wait(ctx context.Context, now func() time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r := l.reserve(now())
	if r == nil {
		return nil
	}
	t := time.NewTimer(r.at.Sub(now()))
	defer t.Stop()
	select {
	case <-t.C:
		l.done(r)
		return nil
	case <-ctx.Done():
		l.cancel(r)
		return ctx.Err()
	}
}

// reserve takes the earliest slot the limits allow from now on. It returns
// nil when that slot is now, and the reservation to wait for otherwise.
func (l *submitLimiter) reserve(now time.Time) *reservation {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen.Sub(now) > clockBack {
		// The clock went back (a Client's clock that jumps, or Clients
		// of one key on clocks apart): the times kept are moved back as
		// far, so the spacing they keep is the time that really passes,
		// not the jump.
		d := l.seen.Sub(now)
		l.next = l.next.Add(-d)
		for i := range l.recent {
			l.recent[i] = l.recent[i].Add(-d)
		}
		for _, r := range l.pending {
			r.at, r.prevNext = r.at.Add(-d), r.prevNext.Add(-d)
		}
		l.seen = now
	}
	l.seen = latest(l.seen, now)
	// Calls that started a whole window ago bind nothing any more.
	cut := 0
	for cut < len(l.recent) && !l.recent[cut].Add(l.maxWindow).After(now) {
		cut++
	}
	l.recent = l.recent[cut:]

	at := now
	if l.next.After(at) {
		at = l.next
	}
	for _, rule := range l.rules {
		if n := len(l.recent); n >= rule.burst {
			if free := l.recent[n-rule.burst].Add(rule.window); free.After(at) {
				at = free
			}
		}
	}
	r := &reservation{at: at, prevNext: l.next, recorded: len(l.rules) > 0}
	if r.recorded {
		l.recent = append(l.recent, at)
	}
	l.next = at.Add(l.interval)
	if !at.After(now) {
		// Used at once: no earlier reservation can be given back any more.
		clear(l.pending)
		l.pending = l.pending[:0]
		return nil
	}
	l.pending = append(l.pending, r)
	return r
}

// done marks r used: it and the reservations before it can no longer be
// given back.
func (l *submitLimiter) done(r *reservation) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if i := slices.Index(l.pending, r); i >= 0 {
		clear(l.pending[:i+1])
		l.pending = l.pending[i+1:]
	}
}

// cancel gives r up. Its slot returns to the limiter when no later
// reservation is still held, together with the cancelled ones right before
// it; otherwise it stays used (being early is what the service punishes,
// being late costs nothing) and returns once the later ones are given back
// too.
func (l *submitLimiter) cancel(r *reservation) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r.cancelled = true
	for n := len(l.pending); n > 0 && l.pending[n-1].cancelled; n = len(l.pending) {
		last := l.pending[n-1]
		l.next = last.prevNext
		if last.recorded {
			if m := len(l.recent); m > 0 && l.recent[m-1].Equal(last.at) {
				l.recent = l.recent[:m-1]
			}
		}
		l.pending[n-1] = nil
		l.pending = l.pending[:n-1]
	}
}

var (
	limitersMu sync.Mutex
	limiters   = map[[sha256.Size]byte]*submitLimiter{}
)

// sharedLimiter returns the process-wide limiter of (baseURL, apiKey),
// tightened to interval (0: none) and burst calls per window (burst 0: none).
// Every Client of the same key in this process shares it, whatever its own
// limits, so the service sees one well-behaved caller however many clients
// and goroutines there are. The API key enters the map only through a hash.
func sharedLimiter(baseURL, apiKey string, interval, window time.Duration, burst int) *submitLimiter {
	k := sha256.Sum256([]byte(baseURL + "\x00" + apiKey))
	limitersMu.Lock()
	l, ok := limiters[k]
	if !ok {
		l = &submitLimiter{}
		limiters[k] = l
	}
	limitersMu.Unlock()
	l.tighten(interval, burst, window)
	return l
}
