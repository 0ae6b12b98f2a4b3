package stream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/stream/internal/jscall"
	"github.com/captchaq/captchaq/stream/internal/topology"
	"github.com/captchaq/captchaq/stream/wire"
)

// A stream bounded by Topology.MaxBytes refuses what does not fit
// (DiscardNew): nothing accepted is ever dropped to make room. But the
// workers' records of a task (its events, the outcome, a dead letter) go to
// the same stream as the task, so a stream filled with tasks would leave no
// room to record the end of any of them. Producers therefore keep room:
// a Client refuses a submission when the stream's bytes, the submission and
// reservePerTask for every queued task (the new ones included) would exceed
// MaxBytes. The room is what the workers need to record every accepted task
// to its end; a worker that cannot record an attempt does not start it, so
// a stream that is full anyway (filled by raw publishers that do not check)
// costs waiting, never paid solves.

// reservePerTask is the room kept for the records of one queued task: an
// attempt, a solved or dead event, the outcome (a token of up to 2 KB), and a
// dead letter's copy of the task, with JetStream's per-message overhead.
// Measured in room_test.go.
const reservePerTask = 4 << 10

// checkRoom refuses a submission of n tasks of size bytes in all when the
// stream would not keep room for the records of every queued task after it.
// The stream's room is the least of its MaxBytes and, where the server
// reports its store (StoreStatus), of what the store can still take: the
// server's and the accounts' JetStream limits and the free disk space. A
// store that refuses writes refuses the submission at once.
func (c *Client) checkRoom(ctx context.Context, n int, size int64) error {
	st, haveStore := c.room.store.read(ctx, c.nc)
	if haveStore && st.Refusing {
		return &StoreRefusingError{Status: st}
	}
	if c.streamLimit(ctx) <= 0 && !haveStore {
		return nil // unbounded, and no store to measure: nothing to keep room in
	}
	c.room.mu.Lock()
	defer c.room.mu.Unlock()
	r := &c.room
	if now := time.Now(); now.Sub(r.read) >= roomRefresh {
		info, err := jscall.UntilAnswered(ctx, topology.LookupTimeout, func(ctx context.Context) (*jetstream.StreamInfo, error) { return c.s.Info(ctx) })
		if err != nil {
			return fmt.Errorf("read the stream's size: %w", err)
		}
		queued, err := c.queuedTasks(ctx)
		if err != nil {
			return err
		}
		r.limit, r.bytes, r.queued, r.read, r.byStore = info.Config.MaxBytes, int64(info.State.Bytes), queued, now, false
		if haveStore {
			if sl := r.bytes + st.Room; r.limit <= 0 || sl < r.limit {
				r.limit, r.byStore, r.status = sl, true, st
			}
		}
	}
	if r.limit <= 0 {
		return nil
	}
	reserved := int64(r.queued+n) * reservePerTask
	if r.bytes+size+reserved > r.limit {
		e := &StreamFullError{Stream: c.top.Stream, MaxBytes: r.limit, Bytes: uint64(r.bytes), Queued: r.queued, Reserved: reserved}
		if r.byStore {
			st := r.status
			e.Store = &st
		}
		return e
	}
	// Until the next reading, count what this Client submits itself.
	r.bytes, r.queued = r.bytes+size, r.queued+n
	return nil
}

// clientRoom is a Client's last reading of the room in a bounded stream,
// with what it submitted since: a submission costs the five requests of a
// reading at most once per roomRefresh. What other producers submitted in
// that time is seen at the next reading; the server's own limit still
// refuses what does not fit.
type clientRoom struct {
	mu     sync.Mutex
	limit  int64 // the stream's room: its MaxBytes, or less where the store has less
	bytes  int64
	queued int
	read   time.Time
	// byStore says the store, not MaxBytes, set limit, as status read.
	byStore bool
	status  StoreStatus
	// store is the last reading of the server's store.
	store storeWatch
}

// limitRefresh is how long a Client trusts what it last read of the
// stream's size limit.
const limitRefresh = 30 * time.Second

// streamLimit is the stream's MaxBytes as last read (at most limitRefresh
// ago), so that an unbounded stream costs a submission no extra request. A
// failed read keeps the last value.
func (c *Client) streamLimit(ctx context.Context) int64 {
	c.limitMu.Lock()
	defer c.limitMu.Unlock()
	if now := time.Now(); now.Sub(c.limitRead) >= limitRefresh {
		rctx, cancel := context.WithTimeout(ctx, topology.LookupTimeout)
		info, err := c.s.Info(rctx)
		cancel()
		if err == nil {
			c.limit, c.limitRead = info.Config.MaxBytes, now
		}
	}
	return c.limit
}

// queuedTasks counts the tasks that wait or run: what the workers'
// consumers have pending or handed out, or, before any consumer exists, the
// task messages in the stream.
func (c *Client) queuedTasks(ctx context.Context) (int, error) {
	queued := 0
	for _, wc := range topology.WorkerConsumers() {
		ci, err := c.s.Consumer(ctx, topology.ConsumerName(wc.Lane, wc.Priority))
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			return c.taskMessages(ctx)
		}
		if err != nil {
			return 0, fmt.Errorf("count queued tasks: %w", err)
		}
		queued += int(ci.CachedInfo().NumPending) + ci.CachedInfo().NumAckPending
	}
	// And the tasks waiting for their time (none on a stream made by an
	// earlier version, which has no waiting room).
	ci, err := c.s.Consumer(ctx, wire.WaitingRoomConsumer)
	switch {
	case err == nil:
		queued += int(ci.CachedInfo().NumPending) + ci.CachedInfo().NumAckPending
	case !errors.Is(err, jetstream.ErrConsumerNotFound):
		return 0, fmt.Errorf("count queued tasks: %w", err)
	}
	return queued, nil
}

// taskMessages counts the task messages in the stream.
func (c *Client) taskMessages(ctx context.Context) (int, error) {
	info, err := c.s.Info(ctx, jetstream.WithSubjectFilter(wire.SubjectAllTasks))
	if err != nil {
		return 0, fmt.Errorf("count queued tasks: %w", err)
	}
	n := 0
	for _, k := range info.State.Subjects {
		n += int(k)
	}
	return n, nil
}

// fullError turns JetStream's refusal of a task for the stream's limits into
// a *StreamFullError.
func (c *Client) fullError(ctx context.Context, err error) error {
	if !jscall.StreamRefusedFull(err) {
		return err
	}
	limit := int64(-1)
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), topology.LookupTimeout)
	defer cancel()
	if info, ierr := c.s.Info(ictx); ierr == nil {
		limit = info.Config.MaxBytes
	}
	return fmt.Errorf("%w (%v)", &StreamFullError{Stream: c.top.Stream, MaxBytes: limit}, err)
}

// whileStoreTakes runs publish, and stops it with a *StoreRefusingError
// when the server reports its store refusing writes meanwhile: a store
// latched by a write error answers no publish, so a producer would
// otherwise wait out its whole deadline without a word. Such a store has
// stored nothing since.
func (c *Client) whileStoreTakes(ctx context.Context, publish func(ctx context.Context) error) error {
	pctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(storeStatusTimeout)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-pctx.Done():
				return
			case <-t.C:
				if st, ok := c.room.store.read(pctx, c.nc); ok && st.Refusing {
					cancel(&StoreRefusingError{Status: st})
					return
				}
			}
		}
	}()
	err := publish(pctx)
	close(done)
	if cause := context.Cause(pctx); err != nil && ctx.Err() == nil && cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return err
}
