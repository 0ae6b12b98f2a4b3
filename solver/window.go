package solver

import (
	"context"
	"sync"
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
		w.limit += min(1/w.limit, windowStep)
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
