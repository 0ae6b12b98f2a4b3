package room

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/stream/internal/jscall"
	"github.com/captchaq/captchaq/stream/internal/topology"
	"github.com/captchaq/captchaq/stream/wire"
)

// A stream bounded by stream.Topology.MaxBytes refuses what does not fit
// (DiscardNew): nothing accepted is ever dropped to make room. But the
// workers' records of a task (its events, the outcome, a dead letter) go to
// the same stream as the task, so a stream filled with tasks would leave no
// room to record the end of any of them. Producers therefore keep room:
// a stream.Client refuses a submission when the stream's bytes, the submission and
// ReservePerTask for every queued task (the new ones included) would exceed
// MaxBytes. The room is what the workers need to record every accepted task
// to its end; a worker that cannot record an attempt does not start it, so
// a stream that is full anyway (filled by raw publishers that do not check)
// costs waiting, never paid solves.

// ReservePerTask is the room kept for the records of one queued task: an
// attempt, a solved or dead event, the outcome (a token of up to 2 KB), and a
// dead letter's copy of the task, with JetStream's per-message overhead.
const ReservePerTask = 4 << 10

// MessageBytes is what the stream's store counts for m once it holds it:
// its subject, headers and body, and the record's own 30 bytes (nats-server's
// file store: a 22-byte record header and an 8-byte checksum). A producer
// counts its submissions with it until its next reading (Check): counting
// the body alone, the stream it thought had room for every queued task's
// records had a few dozen bytes less per task.
func MessageBytes(m *nats.Msg) int64 {
	n := int64(30 + len(m.Subject) + len(m.Data))
	if len(m.Header) > 0 {
		n += int64(len("NATS/1.0\r\n") + len("\r\n"))
		for k, vs := range m.Header {
			for _, v := range vs {
				n += int64(len(k) + len(": ") + len(v) + len("\r\n"))
			}
		}
	}
	return n
}

// Check refuses a submission of n tasks of size bytes in all when the
// stream would not keep room for the records of every queued task after
// it (a *Full).
// The stream's room is the least of its MaxBytes and, where the server
// reports its store (StoreStatus), of what the store can still take: the
// server's and the accounts' JetStream limits and the free disk space. A
// store that refuses writes refuses the submission at once.
func (r *Producer) Check(ctx context.Context, n int, size int64) error {
	st, haveStore := r.store.Read(ctx, r.nc)
	if haveStore && st.Refusing {
		return &Refusing{Status: st}
	}
	if r.streamLimit(ctx) <= 0 && !haveStore {
		return nil // unbounded, and no store to measure: nothing to keep room in
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := time.Now(); now.Sub(r.read) >= Refresh {
		info, err := jscall.UntilAnswered(ctx, topology.LookupTimeout, func(ctx context.Context) (*jetstream.StreamInfo, error) { return r.s.Info(ctx) })
		if err != nil {
			return fmt.Errorf("read the stream's size: %w", err)
		}
		queued, err := r.queuedTasks(ctx)
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
	reserved := int64(r.queued+n) * ReservePerTask
	if r.bytes+size+reserved > r.limit {
		e := &Full{Limit: r.limit, Bytes: uint64(r.bytes), Queued: r.queued, Reserved: reserved}
		if r.byStore {
			st := r.status
			e.Store = &st
		}
		return e
	}
	// Until the next reading, count what this producer submits itself.
	r.bytes, r.queued = r.bytes+size, r.queued+n
	return nil
}

// Producer is a producer's last reading of the room in a bounded stream,
// with what it submitted since: a submission costs the five requests of a
// reading at most once per Refresh. What other producers submitted in
// that time is seen at the next reading; the server's own limit still
// refuses what does not fit. It is safe for concurrent use.
type Producer struct {
	s      jetstream.Stream
	nc     *nats.Conn
	mu     sync.Mutex
	limit  int64 // the stream's room: its MaxBytes, or less where the store has less
	bytes  int64
	queued int
	read   time.Time
	// byStore says the store, not MaxBytes, set limit, as status read.
	byStore bool
	status  wire.StoreStatus
	// store is the last reading of the server's store.
	store StoreWatch
	// maxBytes is the stream's MaxBytes as read at maxRead (streamLimit).
	maxMu    sync.Mutex
	maxBytes int64
	maxRead  time.Time
}

// NewProducer is the room of a producer on stream s, whose MaxBytes it
// read just now as maxBytes; nc asks the server for its store's status.
func NewProducer(s jetstream.Stream, nc *nats.Conn, maxBytes int64) *Producer {
	return &Producer{s: s, nc: nc, maxBytes: maxBytes, maxRead: time.Now()}
}

// Store is the store's status as the server last reported it (read again
// when older than Refresh); false when it reports none.
func (r *Producer) Store(ctx context.Context) (wire.StoreStatus, bool) {
	return r.store.Read(ctx, r.nc)
}

// limitRefresh is how long a producer trusts what it last read of the
// stream's size limit.
const limitRefresh = 30 * time.Second

// streamLimit is the stream's MaxBytes as last read (at most limitRefresh
// ago), so that an unbounded stream costs a submission no extra request. A
// failed read keeps the last value.
func (r *Producer) streamLimit(ctx context.Context) int64 {
	r.maxMu.Lock()
	defer r.maxMu.Unlock()
	if now := time.Now(); now.Sub(r.maxRead) >= limitRefresh {
		rctx, cancel := context.WithTimeout(ctx, topology.LookupTimeout)
		info, err := r.s.Info(rctx)
		cancel()
		if err == nil {
			r.maxBytes, r.maxRead = info.Config.MaxBytes, now
		}
	}
	return r.maxBytes
}

// queuedTasks counts the tasks that wait or run: what the workers'
// consumers have pending or handed out, or, before any consumer exists, the
// task messages in the stream.
func (r *Producer) queuedTasks(ctx context.Context) (int, error) {
	queued := 0
	for _, wc := range topology.WorkerConsumers() {
		ci, err := r.s.Consumer(ctx, topology.ConsumerName(wc.Lane, wc.Priority))
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			return r.taskMessages(ctx)
		}
		if err != nil {
			return 0, fmt.Errorf("count queued tasks: %w", err)
		}
		queued += int(ci.CachedInfo().NumPending) + ci.CachedInfo().NumAckPending
	}
	// And the tasks waiting for their time (none on a stream made by an
	// earlier version, which has no waiting room).
	ci, err := r.s.Consumer(ctx, wire.WaitingRoomConsumer)
	switch {
	case err == nil:
		queued += int(ci.CachedInfo().NumPending) + ci.CachedInfo().NumAckPending
	case !errors.Is(err, jetstream.ErrConsumerNotFound):
		return 0, fmt.Errorf("count queued tasks: %w", err)
	}
	return queued, nil
}

// taskMessages counts the task messages in the stream.
func (r *Producer) taskMessages(ctx context.Context) (int, error) {
	info, err := r.s.Info(ctx, jetstream.WithSubjectFilter(wire.SubjectAllTasks))
	if err != nil {
		return 0, fmt.Errorf("count queued tasks: %w", err)
	}
	n := 0
	for _, k := range info.State.Subjects {
		n += int(k)
	}
	return n, nil
}

// Full is a submission refused for want of room in the stream
// (stream.StreamFullError).
type Full struct {
	// Limit is the stream's room: its MaxBytes, or its size plus the
	// store's room where that is less.
	Limit int64
	// Bytes is what the stream holds; Queued how many tasks wait or run,
	// and Reserved the room kept for their records.
	Bytes    uint64
	Queued   int
	Reserved int64
	// Store, when set, is the store whose room set Limit.
	Store *wire.StoreStatus
}

func (e *Full) Error() string { return "the stream is full" }

// Refusing is a submission refused because the broker's store refuses
// writes (stream.StoreRefusingError).
type Refusing struct{ Status wire.StoreStatus }

func (e *Refusing) Error() string { return "the broker's store refuses writes" }
