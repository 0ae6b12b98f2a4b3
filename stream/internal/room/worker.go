package room

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/stream/wire"
)

// Worker keeps a worker from starting attempts it could not record to
// their end: an attempt starts only when the stream (bounded by MaxBytes, or
// by what the server's store can still take) has ReservePerTask free for it
// and for every other attempt of this worker still under way, and never
// while the store refuses writes. Producers that keep room (Producer) never
// let it come to that; a stream filled to the last byte by raw publishers,
// or a disk filled by something else, would otherwise take the attempt
// events of many tasks, pay for their solves, and have no room left for a
// single outcome.
type Worker struct {
	s jetstream.Stream
	// nc asks the server for its store's status; nil: only MaxBytes counts.
	nc *nats.Conn
	// maxBytes is the stream's limit when the worker started; 0: unbounded,
	// only the store's room counts.
	maxBytes int64
	running  atomic.Int64
	mu       sync.Mutex
	limit    int64     // the room's limit when last read; 0: none
	bytes    uint64    // the stream's size then
	read     time.Time // when
	ended    int64     // attempts ended since then, whose records the reading may not hold
	store    StoreWatch
}

// NewWorker is the room of a worker on stream s, whose limit when the
// worker started is maxBytes (0: unbounded); nc asks the server for its
// store's status (nil: only MaxBytes counts).
func NewWorker(s jetstream.Stream, nc *nats.Conn, maxBytes int64) *Worker {
	return &Worker{s: s, nc: nc, maxBytes: maxBytes}
}

// Refresh is how long a reading of the stream's size, or of the store's
// status, is used. stream.Worker.StoreRefusing states its value to users.
const Refresh = 100 * time.Millisecond

// Take reserves room for one attempt, reading the stream's size at most
// every Refresh; false means no room (or the size could not be read).
func (r *Worker) Take(ctx context.Context, now time.Time) bool {
	var st wire.StoreStatus
	haveStore := false
	if r.nc != nil {
		st, haveStore = r.store.Read(ctx, r.nc)
	}
	if haveStore && st.Refusing {
		return false
	}
	if r.maxBytes <= 0 && !haveStore {
		r.running.Add(1)
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	over := func() bool {
		return r.limit > 0 && int64(r.bytes)+(r.running.Load()+r.ended+1)*ReservePerTask > r.limit
	}
	// A reading is used for Refresh; but one that leaves no room
	// while attempts ended since it (whose records it may or may not
	// hold, so each still counts) is read again at once: the attempt
	// refused would otherwise wait a whole lease for room that is there.
	if now.Sub(r.read) >= Refresh || (over() && r.ended > 0) {
		info, err := r.s.Info(ctx)
		if err != nil {
			return false
		}
		r.bytes, r.read, r.limit, r.ended = info.State.Bytes, now, info.Config.MaxBytes, 0
		if haveStore {
			if sl := int64(r.bytes) + st.Room; r.limit <= 0 || sl < r.limit {
				r.limit = sl
			}
		}
	}
	if over() {
		return false
	}
	r.running.Add(1)
	return true
}

// Give returns the room of an attempt that ended (recorded or not).
func (r *Worker) Give() {
	r.mu.Lock()
	r.ended++
	r.mu.Unlock()
	r.running.Add(-1)
}

// Store is the store's status as the server last reported it (read again
// when older than Refresh); false when it reports none.
func (r *Worker) Store(ctx context.Context) (wire.StoreStatus, bool) {
	if r.nc == nil {
		return wire.StoreStatus{}, false
	}
	return r.store.Read(ctx, r.nc)
}
