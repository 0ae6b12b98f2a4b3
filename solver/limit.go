package solver

import (
	"context"
	"crypto/sha256"
	"sync"
	"time"
)

// submitLimiter spaces in.php calls of one API key: at least interval between
// two calls and at most burst calls in any window. Callers reserve a start
// time in arrival order, then wait for it.
type submitLimiter struct {
	interval time.Duration
	window   time.Duration
	burst    int

	mu     sync.Mutex
	next   time.Time   // earliest start of the next call
	recent []time.Time // start times of the last burst calls, oldest first
}

// wait blocks until the caller may send an in.php call, or ctx is done.
func (l *submitLimiter) wait(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	now := time.Now()
	at := now
	if l.next.After(at) {
		at = l.next
	}
	if l.burst > 0 && len(l.recent) >= l.burst {
		if free := l.recent[0].Add(l.window); free.After(at) {
			at = free
		}
		l.recent = l.recent[1:]
	}
	if l.burst > 0 {
		l.recent = append(l.recent, at)
	}
	l.next = at.Add(l.interval)
	l.mu.Unlock()

	d := at.Sub(now)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		// The reserved slot stays used: being early is what the service
		// punishes, being late costs nothing.
		return ctx.Err()
	}
}

// limiterKey identifies one limiter: the service, the key and the limits. The
// API key enters only through a hash.
type limiterKey struct {
	hash     [sha256.Size]byte
	interval time.Duration
	window   time.Duration
	burst    int
}

var (
	limitersMu sync.Mutex
	limiters   = map[limiterKey]*submitLimiter{}
)

// sharedLimiter returns the process-wide limiter of (baseURL, apiKey): every
// Client of the same key in this process shares it, so the service sees one
// well-behaved caller however many clients and goroutines there are.
func sharedLimiter(baseURL, apiKey string, interval, window time.Duration, burst int) *submitLimiter {
	k := limiterKey{
		hash:     sha256.Sum256([]byte(baseURL + "\x00" + apiKey)),
		interval: interval, window: window, burst: burst,
	}
	limitersMu.Lock()
	defer limitersMu.Unlock()
	l, ok := limiters[k]
	if !ok {
		l = &submitLimiter{interval: interval, window: window, burst: burst}
		limiters[k] = l
	}
	return l
}
