package jscall

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Batched direct gets.
const (
	// readBatch is the most messages one direct get asks for.
	readBatch = 256
	// readBatchBytes caps a batch's bytes (the server always sends at
	// least one message).
	readBatchBytes = 1 << 20
	// readTimeout bounds the wait for each message of a batch.
	readTimeout = 5 * time.Second
)

// StoredMsg is a message read by direct get. It implements jetstream.Msg
// for scan's callbacks; it cannot be acknowledged.
type StoredMsg struct {
	subject string
	seq     uint64
	at      time.Time
	pending uint64
	header  nats.Header
	data    []byte
}

var ErrNotDelivered = errors.New("read directly from the stream: not a consumer's delivery")

func (m *StoredMsg) Metadata() (*jetstream.MsgMetadata, error) {
	return &jetstream.MsgMetadata{Sequence: jetstream.SequencePair{Stream: m.seq}, NumPending: m.pending, Timestamp: m.at, NumDelivered: 1}, nil
}
func (m *StoredMsg) Data() []byte                     { return m.data }
func (m *StoredMsg) Headers() nats.Header             { return m.header }
func (m *StoredMsg) Subject() string                  { return m.subject }
func (m *StoredMsg) Reply() string                    { return "" }
func (m *StoredMsg) Ack() error                       { return ErrNotDelivered }
func (m *StoredMsg) DoubleAck(context.Context) error  { return ErrNotDelivered }
func (m *StoredMsg) Nak() error                       { return ErrNotDelivered }
func (m *StoredMsg) NakWithDelay(time.Duration) error { return ErrNotDelivered }
func (m *StoredMsg) InProgress() error                { return ErrNotDelivered }
func (m *StoredMsg) Term() error                      { return ErrNotDelivered }
func (m *StoredMsg) TermWithReason(string) error      { return ErrNotDelivered }

var _ jetstream.Msg = (*StoredMsg)(nil)

// The headers a direct get adds to a stored message.
var directHeaders = []string{"Nats-Stream", "Nats-Subject", "Nats-Sequence", "Nats-Time-Stamp", "Nats-Num-Pending", "Nats-Last-Sequence"}

// directGetRequest is the body of a batched direct get.
type directGetRequest struct {
	Seq       uint64     `json:"seq,omitempty"`
	NextFor   string     `json:"next_by_subj,omitempty"`
	Batch     int        `json:"batch,omitempty"`
	MaxBytes  int        `json:"max_bytes,omitempty"`
	StartTime *time.Time `json:"start_time,omitempty"`
	// MultiLast and UpToSeq read the last message on each subject at or
	// before UpToSeq (and at or after Seq).
	MultiLast []string `json:"multi_last,omitempty"`
	UpToSeq   uint64   `json:"up_to_seq,omitempty"`
}

// DirectReader sends batched direct gets to one stream and reads the
// answers on one inbox of its own.
type DirectReader struct {
	nc      *nats.Conn
	subject string // $JS.API.DIRECT.GET.<stream>, or $JS.<domain>.API.…
	inbox   string
	sub     *nats.Subscription
	// idle says no answer is on its way to inbox: the reader may serve
	// another scan.
	idle bool
}

func NewDirectReader(nc *nats.Conn, domain, stream string) (*DirectReader, error) {
	r := &DirectReader{nc: nc, subject: APIPrefix(domain) + "DIRECT.GET." + stream, inbox: nc.NewInbox(), idle: true}
	sub, err := nc.SubscribeSync(r.inbox)
	if err != nil {
		return nil, fmt.Errorf("read stream %s: %w", stream, err)
	}
	r.sub = sub
	return r, nil
}

func (r *DirectReader) Close() { _ = r.sub.Unsubscribe() }

// rotate reads on a new inbox from now on.
func (r *DirectReader) rotate() error {
	_ = r.sub.Unsubscribe()
	r.inbox = r.nc.NewInbox()
	sub, err := r.nc.SubscribeSync(r.inbox)
	if err != nil {
		return fmt.Errorf("read %s: %w", r.subject, err)
	}
	r.sub = sub
	return nil
}

// ErrReadStale means a batch's answer ran out mid-way: read it again.
var ErrReadStale = errors.New("a direct get's answer stopped mid-way")

// batch reads up to readBatch messages on filter from sequence from (or
// from time start, when set), in stream order, and the number of messages
// on filter after the last one (as of the read).
func (r *DirectReader) Batch(ctx context.Context, filter string, from uint64, start time.Time) ([]*StoredMsg, uint64, error) {
	return r.get(ctx, filter, from, start, readBatch)
}

// BatchOf reads up to n messages on filter from sequence from.
func (r *DirectReader) BatchOf(ctx context.Context, filter string, from uint64, n int) ([]*StoredMsg, uint64, error) {
	return r.get(ctx, filter, from, time.Time{}, n)
}

// At reads the message at sequence seq if it is on subject; nil if it is
// not, or is gone. The broker sends nothing of a message on another
// subject, however large.
func (r *DirectReader) At(ctx context.Context, subject string, seq uint64) (*StoredMsg, error) {
	if seq == 0 {
		return nil, nil
	}
	msgs, _, err := r.send(ctx, subject, directGetRequest{Seq: seq, UpToSeq: seq, MultiLast: []string{subject}, Batch: 1})
	if err != nil || len(msgs) == 0 || msgs[0].seq != seq {
		return nil, err
	}
	return msgs[0], nil
}

func (r *DirectReader) get(ctx context.Context, filter string, from uint64, start time.Time, n int) ([]*StoredMsg, uint64, error) {
	req := directGetRequest{NextFor: filter, Batch: n, MaxBytes: readBatchBytes}
	if !start.IsZero() {
		req.StartTime = &start
	} else {
		req.Seq = max(from, 1)
	}
	return r.send(ctx, filter, req)
}

// send sends req, a read of filter, and reads its answer.
func (r *DirectReader) send(ctx context.Context, filter string, req directGetRequest) ([]*StoredMsg, uint64, error) {
	body, _ := json.Marshal(req)
	if err := r.nc.PublishRequest(r.subject, r.inbox, body); err != nil {
		return nil, 0, fmt.Errorf("read %s: %w", filter, err)
	}
	r.idle = false
	var out []*StoredMsg
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
			return nil, 0, fmt.Errorf("read %s: %w: %w", filter, ErrReadStale, err)
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
				return nil, 0, fmt.Errorf("read %s: %w", filter, ErrReadStale)
			}
			return nil, 0, nil
		case "503":
			return nil, 0, fmt.Errorf("read %s: %w", filter, nats.ErrNoResponders)
		default:
			return nil, 0, fmt.Errorf("read %s: the server answered %s %s", filter, status, m.Header.Get("Description"))
		}
		sm := &StoredMsg{subject: m.Header.Get("Nats-Subject"), header: m.Header, data: m.Data}
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
	buf    []*StoredMsg
	// after is how many messages on the filter follow buf, as of the last
	// read; read says there was one since the last rewind.
	after uint64
	read  bool
}

// fill reads the cursor's next batch if its buffer is empty.
func (c *cursor) fill(ctx context.Context, r *DirectReader) error {
	if len(c.buf) > 0 {
		return nil
	}
	msgs, after, err := r.Batch(ctx, c.filter, c.next, c.start)
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

// Scan is a read of several filters merged in stream order, with batched
// direct gets.
type Scan struct {
	// Reader sends the scan's direct gets; give it back to its pool when
	// the scan is done.
	Reader  *DirectReader
	cursors []*cursor
}

// NewScan starts a scan of filters with r, from sequence startSeq (0: the
// first) or, when set, from time startTime.
func NewScan(r *DirectReader, filters []string, startSeq uint64, startTime time.Time) *Scan {
	sc := &Scan{Reader: r}
	for _, f := range filters {
		sc.cursors = append(sc.cursors, &cursor{filter: f, next: max(startSeq, 1), start: startTime})
	}
	return sc
}

// Next returns the next message of any filter in stream order, nil when
// every filter is read to its end, with the count of messages pending on
// all filters after it.
func (rd *Scan) Next(ctx context.Context) (*StoredMsg, error) {
	var best *cursor
	for _, c := range rd.cursors {
		if len(c.buf) == 0 && (!c.read || c.after > 0) {
			if err := c.fill(ctx, rd.Reader); err != nil {
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

// Rewind makes every cursor read again from where it stands.
func (rd *Scan) Rewind() {
	for _, c := range rd.cursors {
		if len(c.buf) == 0 {
			c.read = false
		}
	}
}

// Position is the sequence to go on from: past every message returned.
func (rd *Scan) Position() uint64 {
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

// ReaderPool keeps idle direct readers of one stream, so that a scan does
// not subscribe to an inbox of its own each time. Its zero value is not
// usable: make one with NewReaderPool.
type ReaderPool struct {
	nc             *nats.Conn
	domain, stream string
	ch             chan *DirectReader
}

// readerPoolSize bounds the idle direct readers a pool keeps.
const readerPoolSize = 16

// NewReaderPool keeps readers of stream in domain on nc.
func NewReaderPool(nc *nats.Conn, domain, stream string) *ReaderPool {
	return &ReaderPool{nc: nc, domain: domain, stream: stream, ch: make(chan *DirectReader, readerPoolSize)}
}

// Get returns an idle reader, or a new one.
func (p *ReaderPool) Get() (*DirectReader, error) {
	select {
	case r := <-p.ch:
		return r, nil
	default:
		return NewDirectReader(p.nc, p.domain, p.stream)
	}
}

// Put gives r back to the pool, or closes it if an answer may still be on
// its way to it or the pool is full.
func (p *ReaderPool) Put(r *DirectReader) {
	if !r.idle || !r.sub.IsValid() {
		r.Close()
		return
	}
	select {
	case p.ch <- r:
	default:
		r.Close()
	}
}

// APIPrefix is the prefix of JetStream API subjects in domain: what
// JetStream prepends to requests it sends itself, for the ones sent
// without it (DirectReader).
func APIPrefix(domain string) string {
	if domain == "" {
		return "$JS.API."
	}
	return "$JS." + domain + ".API."
}
