package stream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// workerRoom keeps a worker from starting attempts it could not record to
// their end: an attempt starts only when the stream (bounded by MaxBytes, or
// by what the server's store can still take) has reservePerTask free for it
// and for every other attempt of this worker still under way, and never
// while the store refuses writes. Producers that keep room (Client) never
// let it come to that; a stream filled to the last byte by raw publishers,
// or a disk filled by something else, would otherwise take the attempt
// events of many tasks, pay for their solves, and have no room left for a
// single outcome.
type workerRoom struct {
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
	store    storeWatch
}

// roomRefresh is how long a reading of the stream's size is used.
// Worker.StoreRefusing states its value to users.
const roomRefresh = 100 * time.Millisecond

// Take reserves room for one attempt, reading the stream's size at most
// every roomRefresh; false means no room (or the size could not be read).
func (r *workerRoom) Take(ctx context.Context, now time.Time) bool {
	var st StoreStatus
	haveStore := false
	if r.nc != nil {
		st, haveStore = r.store.read(ctx, r.nc)
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
		return r.limit > 0 && int64(r.bytes)+(r.running.Load()+r.ended+1)*reservePerTask > r.limit
	}
	// A reading is used for roomRefresh; but one that leaves no room
	// while attempts ended since it (whose records it may or may not
	// hold, so each still counts) is read again at once: the attempt
	// refused would otherwise wait a whole lease for room that is there.
	if now.Sub(r.read) >= roomRefresh || (over() && r.ended > 0) {
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
func (r *workerRoom) Give() {
	r.mu.Lock()
	r.ended++
	r.mu.Unlock()
	r.running.Add(-1)
}

// StoreRefusing reports the broker's store refusing writes, as the server
// that runs it last said (at most 100 ms ago): nil when it takes
// writes or reports nothing.
func (w *Worker) StoreRefusing(ctx context.Context) error {
	if w.room.nc == nil {
		return nil
	}
	st, ok := w.room.store.read(ctx, w.room.nc)
	if !ok || !st.Refusing {
		return nil
	}
	msg := fmt.Sprintf("the broker's store (%s) refuses writes (measured at %s): %s", st.Dir, st.At.UTC().Format(time.RFC3339), st.Error)
	if st.Action != "" {
		msg += "; " + st.Action
	}
	return errors.New(msg)
}
