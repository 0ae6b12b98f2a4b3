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
// ends. It uses an ephemeral, unacknowledged consumer that the server drops
// when it goes quiet.
func scanFrom(ctx context.Context, s jetstream.Stream, subjects []string, startSeq uint64, follow bool, fn func(jetstream.Msg) (stop bool, err error)) error {
	return scan(ctx, s, scanOpts{subjects: subjects, startSeq: startSeq, follow: follow}, fn)
}

// scanOpts say what scan reads: which subjects, from where, and whether to
// wait for more.
type scanOpts struct {
	subjects  []string
	startSeq  uint64
	startTime time.Time
	follow    bool
}

func scan(ctx context.Context, s jetstream.Stream, o scanOpts, fn func(jetstream.Msg) (stop bool, err error)) error {
	var b brokerBackoff
	for {
		next, err := scanOnce(ctx, s, o, fn)
		var ce callerError
		if errors.As(err, &ce) {
			return ce.err // fn's own error: never read the same messages again
		}
		if err == nil || ctx.Err() != nil || !transient(err) {
			return err
		}
		// The consumer's server went away (a leader change, a restart):
		// read on from the next message with a new consumer.
		if next > 0 {
			o.startSeq, o.startTime = next, time.Time{}
		}
		if !b.wait(ctx) {
			return ctx.Err()
		}
	}
}

// errScanGap means messages were lost between the server and this reader.
var errScanGap = errors.New("messages lost in transit")

// callerError carries the error of scan's callback through scanOnce.
type callerError struct{ err error }

func (e callerError) Error() string { return e.err.Error() }

// transient reports whether a read error may pass by itself: a broker fault
// (passing), or the scan's consumer lost (deleted, gone quiet, a gap).
func transient(err error) bool {
	return passing(err) || errors.Is(err, errScanGap) || errors.Is(err, jetstream.ErrNoHeartbeat) ||
		errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound)
}

// scanOnce is one consumer's worth of scan. It returns the sequence to go on
// from after a transient error (0 when nothing was read yet).
func scanOnce(ctx context.Context, s jetstream.Stream, o scanOpts, fn func(jetstream.Msg) (stop bool, err error)) (uint64, error) {
	subjects, startSeq, follow := o.subjects, o.startSeq, o.follow
	var next uint64
	cfg := jetstream.ConsumerConfig{
		FilterSubjects:    subjects,
		AckPolicy:         jetstream.AckNonePolicy,
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		InactiveThreshold: 30 * time.Second,
		MemoryStorage:     true,
		Replicas:          1,
	}
	if len(subjects) == 1 {
		cfg.FilterSubject, cfg.FilterSubjects = subjects[0], nil
	}
	switch {
	case startSeq > 0:
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = startSeq
	case !o.startTime.IsZero():
		cfg.DeliverPolicy = jetstream.DeliverByStartTimePolicy
		cfg.OptStartTime = &o.startTime
	}
	cons, err := s.CreateConsumer(ctx, cfg)
	if err != nil {
		return 0, fmt.Errorf("read %v: %w", subjects, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = s.DeleteConsumer(dctx, cons.CachedInfo().Name) // best effort: InactiveThreshold cleans up too
	}()
	if !follow && cons.CachedInfo().NumPending == 0 {
		return 0, nil
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(256))
	if err != nil {
		return 0, fmt.Errorf("read %v: %w", subjects, err)
	}
	defer it.Stop()
	var consumerSeq uint64
	for {
		nctx, cancel := ctx, context.CancelFunc(func() {})
		if !follow {
			// The last message counted at the start may be deleted before it
			// is delivered (a TTL, a purge): then no message says "caught
			// up", and a quiet second asks the consumer instead.
			nctx, cancel = context.WithTimeout(ctx, time.Second)
		}
		m, err := it.Next(jetstream.NextContext(nctx))
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return next, ctx.Err()
			}
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return next, nil
			}
			if !follow && nctx.Err() != nil {
				if info, ierr := cons.Info(ctx); ierr == nil && info.NumPending == 0 {
					return next, nil
				}
				continue
			}
			return next, fmt.Errorf("read %v: %w", subjects, err)
		}
		md, mdErr := m.Metadata()
		if mdErr == nil {
			// An unacknowledged consumer does not redeliver what a broken
			// connection lost: a gap in its sequence means read again from
			// the last message seen.
			if consumerSeq > 0 && md.Sequence.Consumer != consumerSeq+1 {
				return next, errScanGap
			}
			consumerSeq = md.Sequence.Consumer
			next = md.Sequence.Stream + 1
		}
		stop, err := fn(m)
		if err != nil {
			return 0, callerError{err}
		}
		if stop {
			return 0, nil
		}
		if !follow && mdErr == nil && md.NumPending == 0 {
			return next, nil
		}
	}
}
