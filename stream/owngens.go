// The generations a Client submitted, so that Wait by id answers a Client
// with its own submission's outcome.

package stream

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/stream/internal/jscall"
	"github.com/captchaq/captchaq/stream/internal/taskstore"
	"github.com/captchaq/captchaq/stream/wire"
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

// replayedFrom returns the generation that carries on generation gen of id:
// gen itself, or, when gen ended dead and its letter was replayed, the
// replay's generation, and so on down the chain. Only workers write dead
// letters and only the admin replay records, so no producer can add a
// link.
func (c *Client) replayedFrom(ctx context.Context, id string, gen uint64) (uint64, error) {
	letters := map[uint64]uint64{} // generation → the sequence of its dead letter
	if err := jscall.Walk(ctx, c.s, wire.DeadSubject(id), gen, 0, func(m *jetstream.RawStreamMsg) {
		if g := taskstore.GenOf(m.Header); g != 0 {
			letters[g] = m.Sequence
		}
	}); err != nil {
		return 0, fmt.Errorf("read dead letters of task %s: %w", id, err)
	}
	if _, ok := letters[gen]; !ok {
		return gen, nil
	}
	replays := map[uint64]uint64{} // dead letter → the generation its replay queued
	if err := jscall.Walk(ctx, c.s, wire.ReplaySubject(id), gen, 0, func(m *jetstream.RawStreamMsg) {
		var r wire.Replay
		if json.Unmarshal(m.Data, &r) == nil && r.TaskSeq > 0 {
			replays[r.DeadSeq] = r.TaskSeq
		}
	}); err != nil {
		return 0, fmt.Errorf("read replays of task %s: %w", id, err)
	}
	for {
		next, ok := replays[letters[gen]]
		if !ok || next <= gen {
			return gen, nil
		}
		gen = next
	}
}
