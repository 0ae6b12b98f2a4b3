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

// scanFrom reads the messages of the given subjects in stream order,
// starting at startSeq (0: the beginning), and calls fn for each until fn
// says stop. Without follow it returns once it has read every message that
// was there when it started; with follow it waits for new ones until ctx
// ends. It reads with batched direct gets, and follows on the subjects the
// stream republishes (read.go): no consumer.
func scanFrom(ctx context.Context, c *Client, subjects []string, startSeq uint64, follow bool, fn func(jetstream.Msg) (stop bool, err error)) error {
	return scan(ctx, c, scanOpts{subjects: subjects, startSeq: startSeq, follow: follow}, fn)
}

// scanOpts say what scan reads: which subjects, from where, and whether to
// wait for more.
type scanOpts struct {
	subjects []string
	// wake, when set, are the subjects whose republished headers wake a
	// follower (subjects if not set): narrower than a subject read, when
	// the role may not subscribe to all that the read's filter covers.
	wake      []string
	startSeq  uint64
	startTime time.Time
	follow    bool
}

func scan(ctx context.Context, c *Client, o scanOpts, fn func(jetstream.Msg) (stop bool, err error)) error {
	rd, err := c.newReader(o)
	if err != nil {
		return err
	}
	defer func() { c.readers.Put(rd.Reader) }()
	var b jscall.Backoff
	for {
		err := c.read(ctx, rd, o, fn)
		var ce callerError
		if errors.As(err, &ce) {
			return ce.err // fn's own error: never read the same messages again
		}
		if err == nil || ctx.Err() != nil || !transient(err) {
			if err != nil {
				err = fmt.Errorf("read %v: %w", o.subjects, err)
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
	return jscall.Passing(err) || storeReopening(err) || errors.Is(err, jscall.ErrReadStale)
}

// storeReopening reports whether err is what a read meets while the
// broker's store is being reopened (broker.Guard, after a full disk):
// "no responders" while JetStream is shut down, then "stream not found"
// until the memory token stream is created again.
func storeReopening(err error) bool {
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrStreamNotFound)
}

// untilRead calls read until it does not fail as reads do while the store
// is being reopened (storeReopening), pausing between tries (jscall.Backoff),
// or until ctx ends: a reopening is a pause for a reader, not an error.
func untilRead(ctx context.Context, read func() error) error {
	var b jscall.Backoff
	for {
		err := read()
		if err == nil || !storeReopening(err) {
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
func (c *Client) read(ctx context.Context, rd *jscall.Scan, o scanOpts, fn func(jetstream.Msg) (bool, error)) error {
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
		if !o.follow {
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

// newReader starts a scan of o's subjects; give its direct reader back
// (c.readers.Put(rd.Reader)) when done.
func (c *Client) newReader(o scanOpts) (*jscall.Scan, error) {
	r, err := c.readers.Get()
	if err != nil {
		return nil, err
	}
	return jscall.NewScan(r, o.subjects, o.startSeq, o.startTime), nil
}
