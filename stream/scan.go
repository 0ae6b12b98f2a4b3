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
	subjects, startSeq, follow := o.subjects, o.startSeq, o.follow
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
		return fmt.Errorf("read %v: %w", subjects, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = s.DeleteConsumer(dctx, cons.CachedInfo().Name) // best effort: InactiveThreshold cleans up too
	}()
	if !follow && cons.CachedInfo().NumPending == 0 {
		return nil
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(256))
	if err != nil {
		return fmt.Errorf("read %v: %w", subjects, err)
	}
	defer it.Stop()
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			return fmt.Errorf("read %v: %w", subjects, err)
		}
		stop, err := fn(m)
		if err != nil || stop {
			return err
		}
		if !follow {
			if md, err := m.Metadata(); err == nil && md.NumPending == 0 {
				return nil
			}
		}
	}
}
