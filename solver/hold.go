package solver

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// hangs tracks the in.php calls on their way, so that submissions do not
// follow one that hangs: a frozen service keeps every call sent to it,
// and answers them all within a second when it comes back, which earns
// the key a MAX_USER_TURN ban. Once the oldest call has had no reply for
// StallAfter/5, a submission waits for it (wait) until it ends, an outage
// begins (StallAfter after it was sent, with no reply to any call since),
// or StallAfter has passed.
type hangs struct {
	mu      sync.Mutex
	sent    map[uint64]time.Time // the in.php calls without a reply yet
	next    uint64
	changed chan struct{} // closed, and replaced, when a call ends or stalls
}

// begin records an in.php call sent at now; call the returned function
// when it ends.
func (h *hangs) begin(now time.Time) func() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sent == nil {
		h.sent = map[uint64]time.Time{}
	}
	h.next++
	n := h.next
	h.sent[n] = now
	return func() {
		h.mu.Lock()
		delete(h.sent, n)
		h.mu.Unlock()
		h.wake()
	}
}

// wake tells the waiters that something changed: a call ended, or one
// stalled (an outage may have begun).
func (h *hangs) wake() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.changed != nil {
		close(h.changed)
		h.changed = nil
	}
}

// hung returns the send time of the oldest call without a reply, and a
// channel closed at the next change.
func (h *hangs) hung() (time.Time, bool, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var oldest time.Time
	found := false
	for _, at := range h.sent {
		if !found || at.Before(oldest) {
			oldest, found = at, true
		}
	}
	if h.changed == nil {
		h.changed = make(chan struct{})
	}
	return oldest, found, h.changed
}

// holdWhileHung makes a submission wait while an in.php call has hung for
// longer than StallAfter/5: until no call has, or an outage is on (the
// caller then refuses the submission), or StallAfter has passed, or ctx
// ends.
func (c *Client) holdWhileHung(ctx context.Context) error {
	limit := time.NewTimer(c.outage.stall)
	defer limit.Stop()
	for {
		oldest, found, changed := c.hangs.hung()
		if !found || c.now().Sub(oldest) < c.outage.stall/5 || c.outage.active() {
			return nil
		}
		select {
		case <-changed:
		case <-limit.C:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("solver: wait for the hung in.php call: %w", ctx.Err())
		}
	}
}
