package stream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
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
	defer func() { c.release(rd.r) }()
	var b brokerBackoff
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
		rd.rewind()
		if !b.wait(ctx) {
			return ctx.Err()
		}
	}
}

// callerError carries the error of scan's callback through read.
type callerError struct{ err error }

func (e callerError) Error() string { return e.err.Error() }

// transient reports whether a read error may pass by itself: a broker fault
// (passing), or a batch whose answer stopped mid-way.
func transient(err error) bool {
	return passing(err) || errors.Is(err, errReadStale)
}
