// Reading the stream without a consumer: batched direct gets
// ($JS.API.DIRECT.GET.<stream> with next_by_subj and batch, nats-server
// 2.11+) from a sequence or a time, and, to follow, a core subscription on
// the subjects the stream republishes each stored message's headers to
// (captcha.stored.>, Topology's RePublish). A producer needs no consumer, so
// its role may create none and send no pull request: the server never
// delivers anything to a subject a producer names.

package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/captchaq/captchaq/stream/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// rePublish is the CAPTCHA stream's RePublish: the headers of everything it
// stores, to captcha.stored.>.
func rePublish() *jetstream.RePublish {
	return &jetstream.RePublish{Source: wire.SubjectRoot + ".>", Destination: wire.SubjectStored + ".>", HeadersOnly: true}
}

// Batched direct gets.
const (
	// readBatch is the most messages one direct get asks for.
	readBatch = 256
	// readBatchBytes caps a batch's bytes (the server always sends at
	// least one message).
	readBatchBytes = 1 << 20
	// readTimeout bounds the wait for each message of a batch.
	readTimeout = 5 * time.Second
	// followPoll is how often a follower reads the stream again although
	// no republished header told it to: a header lost with a reconnect, or
	// a stream created before it republished, delays a reader this long at
	// most.
	followPoll = 2 * time.Second
	// lagRetry is how soon a follower reads again when a header named a
	// message its read did not return yet (a replica behind its leader).
	lagRetry = 50 * time.Millisecond
)

// storedMsg is a message read by direct get. It implements jetstream.Msg
// for scan's callbacks; it cannot be acknowledged.
type storedMsg struct {
	subject string
	seq     uint64
	at      time.Time
	pending uint64
	header  nats.Header
	data    []byte
}

var errNotDelivered = errors.New("read directly from the stream: not a consumer's delivery")

func (m *storedMsg) Metadata() (*jetstream.MsgMetadata, error) {
	return &jetstream.MsgMetadata{Sequence: jetstream.SequencePair{Stream: m.seq}, NumPending: m.pending, Timestamp: m.at, NumDelivered: 1}, nil
}
func (m *storedMsg) Data() []byte                     { return m.data }
func (m *storedMsg) Headers() nats.Header             { return m.header }
func (m *storedMsg) Subject() string                  { return m.subject }
func (m *storedMsg) Reply() string                    { return "" }
func (m *storedMsg) Ack() error                       { return errNotDelivered }
func (m *storedMsg) DoubleAck(context.Context) error  { return errNotDelivered }
func (m *storedMsg) Nak() error                       { return errNotDelivered }
func (m *storedMsg) NakWithDelay(time.Duration) error { return errNotDelivered }
func (m *storedMsg) InProgress() error                { return errNotDelivered }
func (m *storedMsg) Term() error                      { return errNotDelivered }
func (m *storedMsg) TermWithReason(string) error      { return errNotDelivered }

var _ jetstream.Msg = (*storedMsg)(nil)

// The headers a direct get adds to a stored message.
var directHeaders = []string{"Nats-Stream", "Nats-Subject", "Nats-Sequence", "Nats-Time-Stamp", "Nats-Num-Pending", "Nats-Last-Sequence"}

// directGetRequest is the body of a batched direct get.
type directGetRequest struct {
	Seq       uint64     `json:"seq,omitempty"`
	NextFor   string     `json:"next_by_subj,omitempty"`
	Batch     int        `json:"batch,omitempty"`
	MaxBytes  int        `json:"max_bytes,omitempty"`
	StartTime *time.Time `json:"start_time,omitempty"`
}

// directReader sends batched direct gets to one stream and reads the
// answers on one inbox of its own.
type directReader struct {
	nc      *nats.Conn
	subject string // $JS.API.DIRECT.GET.<stream>, or $JS.<domain>.API.…
	inbox   string
	sub     *nats.Subscription
	// idle says no answer is on its way to inbox: the reader may serve
	// another scan.
	idle bool
}

func newDirectReader(nc *nats.Conn, top Topology) (*directReader, error) {
	stream := top.Stream
	r := &directReader{nc: nc, subject: apiPrefix(top.Domain) + "DIRECT.GET." + stream, inbox: nc.NewInbox(), idle: true}
	sub, err := nc.SubscribeSync(r.inbox)
	if err != nil {
		return nil, fmt.Errorf("read stream %s: %w", stream, err)
	}
	r.sub = sub
	return r, nil
}

func (r *directReader) close() { _ = r.sub.Unsubscribe() }

// rotate reads on a new inbox from now on.
func (r *directReader) rotate() error {
	_ = r.sub.Unsubscribe()
	r.inbox = r.nc.NewInbox()
	sub, err := r.nc.SubscribeSync(r.inbox)
	if err != nil {
		return fmt.Errorf("read %s: %w", r.subject, err)
	}
	r.sub = sub
	return nil
}

// errReadStale means a batch's answer ran out mid-way: read it again.
var errReadStale = errors.New("a direct get's answer stopped mid-way")

// batch reads up to readBatch messages on filter from sequence from (or
// from time start, when set), in stream order, and the number of messages
// on filter after the last one (as of the read).
func (r *directReader) batch(ctx context.Context, filter string, from uint64, start time.Time) ([]*storedMsg, uint64, error) {
	return r.get(ctx, filter, from, start, readBatch)
}

// batchOf reads up to n messages on filter from sequence from.
func (r *directReader) batchOf(ctx context.Context, filter string, from uint64, n int) ([]*storedMsg, uint64, error) {
	return r.get(ctx, filter, from, time.Time{}, n)
}

func (r *directReader) get(ctx context.Context, filter string, from uint64, start time.Time, n int) ([]*storedMsg, uint64, error) {
	req := directGetRequest{NextFor: filter, Batch: n, MaxBytes: readBatchBytes}
	if !start.IsZero() {
		req.StartTime = &start
	} else {
		req.Seq = max(from, 1)
	}
	body, _ := json.Marshal(req)
	if err := r.nc.PublishRequest(r.subject, r.inbox, body); err != nil {
		return nil, 0, fmt.Errorf("read %s: %w", filter, err)
	}
	r.idle = false
	var out []*storedMsg
	for {
		wctx, cancel := context.WithTimeout(ctx, readTimeout)
		m, err := r.sub.NextMsgWithContext(wctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, 0, ctx.Err() // the rest may still come: not idle
			}
			// The rest of this batch may still come: a new inbox for the
			// next one, so that it cannot be taken for the next one's.
			if rerr := r.rotate(); rerr != nil {
				return nil, 0, rerr
			}
			return nil, 0, fmt.Errorf("read %s: %w: %w", filter, errReadStale, err)
		}
		if status := m.Header.Get("Status"); status != "" {
			r.idle = true // a status ends the answer
		}
		switch status := m.Header.Get("Status"); status {
		case "":
		case "204": // end of batch
			np, _ := strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64)
			return out, np, nil
		case "404":
			if len(out) > 0 {
				return nil, 0, fmt.Errorf("read %s: %w", filter, errReadStale)
			}
			return nil, 0, nil
		case "503":
			return nil, 0, fmt.Errorf("read %s: %w", filter, nats.ErrNoResponders)
		default:
			return nil, 0, fmt.Errorf("read %s: the server answered %s %s", filter, status, m.Header.Get("Description"))
		}
		sm := &storedMsg{subject: m.Header.Get("Nats-Subject"), header: m.Header, data: m.Data}
		sm.seq, _ = strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
		sm.pending, _ = strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64)
		sm.at, _ = time.Parse(time.RFC3339Nano, m.Header.Get("Nats-Time-Stamp"))
		for _, h := range directHeaders {
			delete(sm.header, h)
		}
		if len(sm.header) == 0 {
			sm.header = nil
		}
		if sm.seq == 0 || sm.subject == "" {
			return nil, 0, fmt.Errorf("read %s: an answer without its sequence or subject", filter)
		}
		out = append(out, sm)
	}
}

// cursor reads one filter of a scan, a batch at a time.
type cursor struct {
	filter string
	next   uint64    // the sequence to read from
	start  time.Time // before the first read: read from this time
	buf    []*storedMsg
	// after is how many messages on the filter follow buf, as of the last
	// read; read says there was one since the last rewind.
	after uint64
	read  bool
}

// fill reads the cursor's next batch if its buffer is empty.
func (c *cursor) fill(ctx context.Context, r *directReader) error {
	if len(c.buf) > 0 {
		return nil
	}
	msgs, after, err := r.batch(ctx, c.filter, c.next, c.start)
	if err != nil {
		return err
	}
	c.read, c.buf, c.after = true, msgs, after
	if n := len(msgs); n > 0 {
		c.next, c.start = msgs[n-1].seq+1, time.Time{}
	} else {
		c.after = 0
	}
	return nil
}

// reader is a scan of several filters merged in stream order.
type reader struct {
	r       *directReader
	cursors []*cursor
}

// next returns the next message of any filter in stream order, nil when
// every filter is read to its end, with the count of messages pending on
// all filters after it.
func (rd *reader) next(ctx context.Context) (*storedMsg, error) {
	var best *cursor
	for _, c := range rd.cursors {
		if len(c.buf) == 0 && (!c.read || c.after > 0) {
			if err := c.fill(ctx, rd.r); err != nil {
				return nil, err
			}
		}
		if len(c.buf) > 0 && (best == nil || c.buf[0].seq < best.buf[0].seq) {
			best = c
		}
	}
	if best == nil {
		return nil, nil
	}
	m := best.buf[0]
	best.buf = best.buf[1:]
	var pending uint64
	for _, c := range rd.cursors {
		pending += uint64(len(c.buf)) + c.after
	}
	m.pending = pending
	return m, nil
}

// rewind makes every cursor read again from where it stands.
func (rd *reader) rewind() {
	for _, c := range rd.cursors {
		if len(c.buf) == 0 {
			c.read = false
		}
	}
}

// position is the sequence to go on from: past every message returned.
func (rd *reader) position() uint64 {
	var p uint64
	for _, c := range rd.cursors {
		if len(c.buf) > 0 {
			p = max(p, c.buf[0].seq)
		} else {
			p = max(p, c.next)
		}
	}
	return p
}

// wakeups is a follower's subscription to the republished headers of its
// subjects: each one wakes it, and the highest sequence seen tells it what
// its next read must reach.
type wakeups struct {
	ch   chan struct{}
	seen atomic.Uint64
	subs []*nats.Subscription
}

func (c *Client) subscribeStored(subjects []string) (*wakeups, error) {
	w := &wakeups{ch: make(chan struct{}, 1)}
	for _, s := range subjects {
		sub, err := c.nc.Subscribe(wire.StoredSubject(s), func(m *nats.Msg) {
			if seq, err := strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64); err == nil {
				for {
					old := w.seen.Load()
					if seq <= old || w.seen.CompareAndSwap(old, seq) {
						break
					}
				}
			}
			select {
			case w.ch <- struct{}{}:
			default:
			}
		})
		if err != nil {
			w.close()
			return nil, fmt.Errorf("follow %s: %w", s, err)
		}
		w.subs = append(w.subs, sub)
	}
	return w, nil
}

func (w *wakeups) close() {
	for _, s := range w.subs {
		_ = s.Unsubscribe()
	}
}

// read is scan without the retries: it returns after fn stops it, after
// the end without follow, or on the first error.
func (c *Client) read(ctx context.Context, rd *reader, o scanOpts, fn func(jetstream.Msg) (bool, error)) error {
	var wake *wakeups
	if o.follow {
		var err error
		subjects := o.wake
		if len(subjects) == 0 {
			subjects = o.subjects
		}
		if wake, err = c.subscribeStored(subjects); err != nil {
			return err
		}
		defer wake.close()
		// The subscription is in place before the first read: the server
		// takes a connection's protocol in order, so it subscribes before
		// it answers the read, and nothing stored after the read goes
		// unannounced.
	}
	poll := time.NewTimer(followPoll)
	defer poll.Stop()
	for {
		m, err := rd.next(ctx)
		if err != nil {
			return err
		}
		if m != nil {
			stop, err := fn(m)
			if err != nil {
				return callerError{err}
			}
			if stop {
				return nil
			}
			continue
		}
		if !o.follow {
			return nil
		}
		// Caught up: wait for a republished header, or poll.
		wait := followPoll
		if wake.seen.Load() >= rd.position() {
			wait = lagRetry // announced, not read yet: a replica behind
		}
		poll.Reset(wait)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wake.ch:
		case <-poll.C:
		}
		rd.rewind()
	}
}

// readerPool keeps a Client's idle direct readers, so that a scan does not
// subscribe to an inbox of its own each time.
type readerPool struct {
	once sync.Once
	ch   chan *directReader
}

// readerPoolSize bounds the idle direct readers a Client keeps.
const readerPoolSize = 16

func (c *Client) directReader() (*directReader, error) {
	c.readers.once.Do(func() { c.readers.ch = make(chan *directReader, readerPoolSize) })
	select {
	case r := <-c.readers.ch:
		return r, nil
	default:
		return newDirectReader(c.nc, c.top)
	}
}

// release gives r back to the pool, or closes it if an answer may still be
// on its way to it or the pool is full.
func (c *Client) release(r *directReader) {
	if !r.idle || !r.sub.IsValid() {
		r.close()
		return
	}
	select {
	case c.readers.ch <- r:
	default:
		r.close()
	}
}

// newReader starts a scan of o's subjects; release its direct reader
// (c.release(rd.r)) when done.
func (c *Client) newReader(o scanOpts) (*reader, error) {
	r, err := c.directReader()
	if err != nil {
		return nil, err
	}
	rd := &reader{r: r}
	for _, s := range o.subjects {
		rd.cursors = append(rd.cursors, &cursor{filter: s, next: max(o.startSeq, 1), start: o.startTime})
	}
	return rd, nil
}
