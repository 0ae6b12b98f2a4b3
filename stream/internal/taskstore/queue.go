package taskstore

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Queue is what the workers' consumer of one queue holds, as its info
// says, with the two task messages that date it.
type Queue struct {
	// Pending counts the task messages no worker holds: never delivered,
	// or due again and not taken yet.
	Pending uint64
	// AckPending counts those delivered and not acknowledged;
	// MaxAckPending is the most the consumer hands out at once.
	AckPending, MaxAckPending int
	// Paused says the consumer hands out nothing for PauseRemaining.
	Paused         bool
	PauseRemaining time.Duration
	// AckFloor is the sequence below which every message of the queue is
	// acknowledged: its messages past it wait or run.
	AckFloor uint64
	// Waiting is the first message past those delivered (the oldest that
	// waits), Held the first past the ack floor (the oldest held); nil
	// when there is none or it could not be read.
	Waiting, Held *Record
}

// Queue reads the state of the workers' consumer named consumer. A
// consumer that is not there is an error NoConsumer recognizes.
func (r *Reader) Queue(ctx context.Context, consumer string) (Queue, error) {
	cons, err := r.s.Consumer(ctx, consumer)
	if err != nil {
		return Queue{}, err
	}
	info := cons.CachedInfo()
	q := Queue{Pending: info.NumPending, AckPending: info.NumAckPending, MaxAckPending: info.Config.MaxAckPending,
		Paused: info.Paused, PauseRemaining: info.PauseRemaining, AckFloor: info.AckFloor.Stream}
	first := func(after uint64) *Record {
		m, err := r.s.GetMsg(ctx, after+1, jetstream.WithGetMsgSubject(info.Config.FilterSubject))
		if err != nil {
			return nil
		}
		rec := recordOf(m)
		return &rec
	}
	if info.NumPending > 0 {
		q.Waiting = first(info.Delivered.Stream)
	}
	if info.NumAckPending > 0 {
		q.Held = first(info.AckFloor.Stream)
	}
	return q, nil
}

// NoConsumer reports whether err says a consumer is not there.
func NoConsumer(err error) bool {
	return errors.Is(err, jetstream.ErrConsumerNotFound)
}
