// The generations a Client submitted, so that Wait by id answers a Client
// with its own submission's outcome.

package stream

import (
	"sync"
)

// maxOwnGens bounds the ids a Client remembers its submissions of; past it
// the id remembered longest is forgotten first.
const maxOwnGens = 1 << 14

// ownGens remembers the generation of a Client's latest submission of each
// id it submitted (at most maxOwnGens ids). Its zero value is ready; it is
// safe for concurrent use.
type ownGens struct {
	mu   sync.Mutex
	gens map[string]uint64
	ring []string // ids in the order they were first remembered
	next int      // the ring's oldest entry once it is full
}

// put remembers gen as the latest submission of id.
func (o *ownGens) put(id string, gen uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.gens == nil {
		o.gens = map[string]uint64{}
	}
	if _, ok := o.gens[id]; !ok {
		if len(o.ring) < maxOwnGens {
			o.ring = append(o.ring, id)
		} else {
			delete(o.gens, o.ring[o.next])
			o.ring[o.next] = id
			o.next = (o.next + 1) % maxOwnGens
		}
	}
	o.gens[id] = max(o.gens[id], gen)
}

// get returns the remembered generation of id.
func (o *ownGens) get(id string) (uint64, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	g, ok := o.gens[id]
	return g, ok
}
