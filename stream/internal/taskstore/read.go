// Reading the stream without a consumer: batched direct gets
// ($JS.API.DIRECT.GET.<stream> with next_by_subj and batch, nats-server
// 2.11+) from a sequence or a time, and, to follow, a core subscription on
// the subjects the stream republishes each stored message's headers to
// (captcha.stored.>, Topology's RePublish). A producer needs no consumer, so
// its role may create none and send no pull request: the server never
// delivers anything to a subject a producer names.

package taskstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/stream/internal/jscall"
	"github.com/captchaq/captchaq/stream/wire"
)

// Reader reads a task's records without a consumer, for every role (a
// producer's role may create none): the CAPTCHA stream's records by scan
// (Scan) or one by one (tasks.go), and the tokens in the token stream.
type Reader struct {
	nc      *nats.Conn
	domain  string
	readers *jscall.ReaderPool
	// s is the CAPTCHA stream, tokens the token stream.
	s, tokens jetstream.Stream
}

// NewReader reads the CAPTCHA stream s and the token stream tokens, in
// domain, over nc.
func NewReader(nc *nats.Conn, domain string, s, tokens jetstream.Stream) *Reader {
	name := s.CachedInfo().Config.Name
	return &Reader{nc: nc, domain: domain, readers: jscall.NewReaderPool(nc, domain, name), s: s, tokens: tokens}
}

// Record is one message the stream stores: its subject, headers and body,
// its sequence and when the stream stored it.
type Record struct {
	Subject string
	Header  nats.Header
	Data    []byte
	Seq     uint64
	Stored  time.Time
	// Pending is how many messages of the scan's subjects the stream held
	// after this one when it was read: 0 when the scan has caught up.
	Pending uint64
}

// ScanOpts say what a scan reads: which subjects, from where, and whether
// to wait for more.
type ScanOpts struct {
	Subjects []string
	// Wake, when set, are the subjects whose republished headers wake a
	// follower (Subjects if not set): narrower than a subject read, when
	// the role may not subscribe to all that the read's filter covers.
	Wake      []string
	StartSeq  uint64
	StartTime time.Time
	Follow    bool
}

// ScanFrom reads the records of the given subjects in stream order,
// starting at startSeq (0: the beginning), and calls fn for each until fn
// says stop. Without follow it returns once it has read every record that
// was there when it started; with follow it waits for new ones until ctx
// ends. It reads with batched direct gets, and follows on the subjects the
// stream republishes: no consumer.
func (r *Reader) ScanFrom(ctx context.Context, subjects []string, startSeq uint64, follow bool, fn func(Record) (stop bool, err error)) error {
	return r.Scan(ctx, ScanOpts{Subjects: subjects, StartSeq: startSeq, Follow: follow}, fn)
}

// Scan reads what o names, as ScanFrom does, and calls fn with each record.
func (r *Reader) Scan(ctx context.Context, o ScanOpts, fn func(Record) (stop bool, err error)) error {
	return r.Msgs(ctx, o, func(m jetstream.Msg) (bool, error) {
		md, err := m.Metadata()
		if err != nil {
			return false, err
		}
		return fn(Record{Subject: m.Subject(), Header: m.Headers(), Data: m.Data(), Seq: md.Sequence.Stream, Stored: md.Timestamp, Pending: md.NumPending})
	})
}

// Msgs is Scan with the messages as the broker's client gives them.
func (r *Reader) Msgs(ctx context.Context, o ScanOpts, fn func(jetstream.Msg) (stop bool, err error)) error {
	rd, err := r.newScan(o)
	if err != nil {
		return err
	}
	defer func() { r.readers.Put(rd.Reader) }()
	var b jscall.Backoff
	for {
		err := r.read(ctx, rd, o, fn)
		var ce callerError
		if errors.As(err, &ce) {
			return ce.err // fn's own error: never read the same messages again
		}
		if err == nil || ctx.Err() != nil || !transient(err) {
			if err != nil {
				err = fmt.Errorf("read %v: %w", o.Subjects, err)
			}
			return err
		}
		// A broker fault (a leader change, a restart): read on from where
		// each subject stands.
		rd.Rewind()
		if !b.Wait(ctx) {
			return ctx.Err()
		}
	}
}

// callerError carries the error of scan's callback through read.
type callerError struct{ err error }

func (e callerError) Error() string { return e.err.Error() }

// transient reports whether a read error may pass by itself: a broker fault
// (passing), a store being reopened, or a batch whose answer stopped
// mid-way.
func transient(err error) bool {
	return jscall.Passing(err) || StoreReopening(err) || errors.Is(err, jscall.ErrReadStale)
}

// StoreReopening reports whether err is what a read meets while the
// broker's store is being reopened (broker.Guard, after a full disk):
// "no responders" while JetStream is shut down, then "stream not found"
// until the memory token stream is created again.
func StoreReopening(err error) bool {
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrStreamNotFound)
}

// UntilRead calls read until it does not fail as reads do while the store
// is being reopened (StoreReopening), pausing between tries (jscall.Backoff),
// or until ctx ends: a reopening is a pause for a reader, not an error.
func UntilRead(ctx context.Context, read func() error) error {
	var b jscall.Backoff
	for {
		err := read()
		if err == nil || !StoreReopening(err) {
			return err
		}
		if !b.Wait(ctx) {
			return fmt.Errorf("%w (the store did not answer: %w)", ctx.Err(), err)
		}
	}
}

// Following.
const (
	// followPoll is how often a follower reads the stream again although
	// no republished header told it to: a header lost with a reconnect, or
	// a stream created before it republished, delays a reader this long at
	// most.
	followPoll = 2 * time.Second
	// lagRetry is how soon a follower reads again when a header named a
	// message its read did not return yet (a replica behind its leader).
	lagRetry = 50 * time.Millisecond
)

// wakeups is a follower's subscription to the republished headers of its
// subjects: each one wakes it, and the highest sequence seen tells it what
// its next read must reach.
type wakeups struct {
	ch   chan struct{}
	seen atomic.Uint64
	subs []*nats.Subscription
}

func (r *Reader) subscribeStored(subjects []string) (*wakeups, error) {
	w := &wakeups{ch: make(chan struct{}, 1)}
	for _, s := range subjects {
		sub, err := r.nc.Subscribe(wire.StoredSubject(s), func(m *nats.Msg) {
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

// read is Msgs without the retries: it returns after fn stops it, after
// the end without follow, or on the first error.
func (r *Reader) read(ctx context.Context, rd *jscall.Scan, o ScanOpts, fn func(jetstream.Msg) (bool, error)) error {
	var wake *wakeups
	if o.Follow {
		var err error
		subjects := o.Wake
		if len(subjects) == 0 {
			subjects = o.Subjects
		}
		if wake, err = r.subscribeStored(subjects); err != nil {
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
		m, err := rd.Next(ctx)
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
		if !o.Follow {
			return nil
		}
		// Caught up: wait for a republished header, or poll.
		wait := followPoll
		if wake.seen.Load() >= rd.Position() {
			wait = lagRetry // announced, not read yet: a replica behind
		}
		poll.Reset(wait)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wake.ch:
		case <-poll.C:
		}
		rd.Rewind()
	}
}

// newScan starts a scan of o's subjects; give its direct reader back
// (r.readers.Put(rd.Reader)) when done.
func (r *Reader) newScan(o ScanOpts) (*jscall.Scan, error) {
	dr, err := r.readers.Get()
	if err != nil {
		return nil, err
	}
	return jscall.NewScan(dr, o.Subjects, o.StartSeq, o.StartTime), nil
}
