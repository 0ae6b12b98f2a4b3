package solver

import (
	"context"
	"sync"
)

// A plan whose size nobody told (Config.LearnPlan) is found the way TCP
// finds a path's capacity: a Client keeps at most limit of its captchas on
// the service's threads (submitted, neither answered nor probably ready,
// ready.go), and learns limit from in.php's answers. Each accepted
// submission adds 1 (slow start: the limit doubles every round) until the
// first capacity refusal, then 1/limit (about one per round); a refusal
// multiplies it by windowDecrease, at most once per round (a refusal of a
// submission that was admitted before the last decrease says nothing new).
// Clients of several workers on one key each find a share, as TCP flows do;
// the sum is the plan.
const (
	windowStart    = 4
	windowMax      = 10000
	windowDecrease = 0.8
)

// window is the learned limit of a Client's captchas on the service's
// threads. It is safe for concurrent use.
type window struct {
	mu    sync.Mutex
	limit float64
	held  int
	slow  bool          // slow start: no refusal yet
	round int           // decreases so far
	freed chan struct{} // closed and replaced whenever a thread frees or the limit grows
}

func newWindow() *window {
	return &window{limit: windowStart, slow: true, freed: make(chan struct{})}
}

// acquire waits for a thread within the limit, or for ctx; it returns the
// round it was admitted in, for refused.
func (w *window) acquire(ctx context.Context) (round int, err error) {
	for {
		w.mu.Lock()
		if w.held < int(w.limit) {
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

// accepted grows the limit after a submission the service took.
func (w *window) accepted() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.slow {
		w.limit++
	} else {
		w.limit += 1 / w.limit
	}
	w.limit = min(w.limit, windowMax)
	w.wakeLocked()
}

// refused shrinks the limit after a capacity refusal of a submission
// admitted in round, which still holds its thread.
func (w *window) refused(round int) {
	w.mu.Lock()
	defer w.mu.Unlock()
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
