package executor

import (
	"cmp"
	"slices"
	"strings"
	"sync"

	"github.com/captchaq/captchaq/stream/wire"
)

// Held is the set of task generations a worker holds, for its
// heartbeats: another worker given one of them again (a redelivery after a
// broker restart) sees the holder is alive and waits (attemptLives).
type Held struct {
	mu sync.Mutex
	m  map[wire.HeldTask]int
}

// Add notes that t is held (once more).
func (h *Held) Add(t wire.HeldTask) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[wire.HeldTask]int{}
	}
	h.m[t]++
}

// Remove notes that t is held once less.
func (h *Held) Remove(t wire.HeldTask) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m[t]--; h.m[t] <= 0 {
		delete(h.m, t)
	}
}

// Has reports whether t is held.
func (h *Held) Has(t wire.HeldTask) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.m[t] > 0
}

// List returns the held generations, by id and generation.
func (h *Held) List() []wire.HeldTask {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]wire.HeldTask, 0, len(h.m))
	for t := range h.m {
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b wire.HeldTask) int { return cmp.Or(strings.Compare(a.ID, b.ID), cmp.Compare(a.Gen, b.Gen)) })
	return out
}
