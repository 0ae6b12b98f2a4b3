package jscall

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Every JetStream call that is retried here (a publish, a read of a task's
// state, a scan) is retried on the same errors, passing, and paced by the
// same backoff, Backoff. A request that gets no answer at all is the
// one other case: UntilAnswered sends it again with a longer timeout each
// time, because a cluster electing a leader answers nothing until it has one.

// Passing reports whether err is a fault of the broker that passes by
// itself: no answer in time, no responders (a stream or its leader not there
// yet), a connection being re-established (its reconnect buffer full), or a server error (5xx) other
// than a refusal for the stream's limits, which waiting does not lift.
func Passing(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrDisconnected) ||
		errors.Is(err, nats.ErrReconnectBufExceeded) ||
		(errors.As(err, &apiErr) && apiErr.Code >= 500 && !StreamRefusedFull(err))
}

// Backoff paces the retries of a JetStream call: 50 ms after the first
// failure, twice as long after each next one, at most a second.
type Backoff struct{ next time.Duration }

// Wait sleeps the next pause or until ctx ends, and reports whether the
// pause was slept.
func (b *Backoff) Wait(ctx context.Context) bool {
	d := b.Pause()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Pause returns the next pause and grows the one after it.
func (b *Backoff) Pause() time.Duration {
	if b.next == 0 {
		b.next = 50 * time.Millisecond
	}
	d := b.next
	b.next = min(2*b.next, time.Second)
	return d
}

// UntilAnswered sends a JetStream API request again every try until it is
// answered or ctx ends. On a cluster, a request about a stream that another
// process is creating gets no answer until the stream's replicas have
// elected a leader, and a request the meta leader takes just before it
// loses the leadership (elections come often on a starved machine) gets
// none at all; a single request would wait out the whole of ctx. Only
// idempotent requests may go through here. Each try waits twice as long as
// the one before, up to 16 s, so a cluster slow to answer at all is still
// waited for, up to ctx's deadline or AnswerPatience.
//
// A ctx without a deadline gets AnswerPatience in all: a request refused
// for want of a permission is not answered either (NATS reports that only
// asynchronously, to the connection's error handler), and would otherwise
// be sent again forever.
func UntilAnswered[T any](ctx context.Context, try time.Duration, req func(context.Context) (T, error)) (T, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, AnswerPatience)
		defer cancel()
	}
	for {
		rctx, cancel := context.WithTimeout(ctx, try)
		v, err := req(rctx)
		cancel()
		unanswered := errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)
		switch {
		case unanswered && ctx.Err() == nil:
			try = min(2*try, 16*time.Second)
			continue
		case unanswered && errors.Is(ctx.Err(), context.DeadlineExceeded):
			err = fmt.Errorf("no answer from JetStream (a permission the user lacks? a cluster without a leader?): %w", err)
		}
		return v, err
	}
}

// AnswerPatience bounds UntilAnswered for a caller that set no deadline.
const AnswerPatience = time.Minute

// Patiently runs read, retrying it on any error for up to within, calling
// keep (which renews a lease) between tries. Any error: a read that fails
// for good fails again within the time this allows.
func Patiently(ctx context.Context, within time.Duration, keep func(), read func() error) error {
	deadline := time.Now().Add(within)
	var b Backoff
	for {
		err := read()
		if err == nil || ctx.Err() != nil || time.Now().Add(b.next).After(deadline) {
			return err
		}
		keep()
		if !b.Wait(ctx) {
			return err
		}
	}
}

// UntilStored runs write until the broker takes it, ctx ends, or it fails
// for a reason waiting does not lift (Passing), calling keep (which renews
// a lease) between tries: a broker briefly out of reach does not lose what
// write records.
func UntilStored(ctx context.Context, keep func(), write func() error) error {
	var b Backoff
	for {
		err := write()
		if err == nil || !Passing(err) || ctx.Err() != nil {
			return err
		}
		keep()
		if !b.Wait(ctx) {
			return err
		}
	}
}
