// The broker's store as users see it: its status, and the room a
// bounded stream keeps for the records of every queued task (package room
// keeps it).

package stream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/captchaq/captchaq/stream/internal/jscall"
	"github.com/captchaq/captchaq/stream/internal/room"
	"github.com/captchaq/captchaq/stream/internal/topology"
	"github.com/captchaq/captchaq/stream/wire"
)

// SubjectStoreStatus is the core NATS subject on which `captchaq server`
// (and `captchaq run`) answers requests for the state of its JetStream
// store (a StoreStatus in JSON). It is outside captcha.>, so no stream
// captures it, and answering writes nothing to the store: it works when the
// store can take no more. A server captchaq does not run answers nothing
// here (no responders).
const SubjectStoreStatus = wire.SubjectStoreStatus

// StoreStatus is the state of the broker's JetStream store, as the server
// that runs it measures it (wire.StoreStatus). It is part of the wire
// contract of `captchaq stats --json` (field "store").
type StoreStatus = wire.StoreStatus

// ReadStoreStatus asks the server for the state of its store.
func ReadStoreStatus(ctx context.Context, nc *nats.Conn) (StoreStatus, error) {
	return room.ReadStoreStatus(ctx, nc)
}

// ServeStoreStatus answers requests on SubjectStoreStatus with status(),
// until the returned subscription is unsubscribed. `captchaq server` serves
// it; whoever runs a NATS server of their own (where clients get
// ErrNoStoreStatus) can serve the store's status from their own watch of
// it, so that workers and producers keep room as they do with captchaq's.
func ServeStoreStatus(nc *nats.Conn, status func() StoreStatus) (*nats.Subscription, error) {
	return room.ServeStoreStatus(nc, status)
}

// checkRoom refuses a submission of n tasks of size bytes in all when the
// stream would not keep room for the records of every queued task after it
// (a *StreamFullError), or when the store refuses writes (a
// *StoreRefusingError).
func (c *Client) checkRoom(ctx context.Context, n int, size int64) error {
	err := c.room.Check(ctx, n, size)
	var full *room.Full
	var refusing *room.Refusing
	switch {
	case errors.As(err, &refusing):
		return &StoreRefusingError{Status: refusing.Status}
	case errors.As(err, &full):
		return &StreamFullError{Stream: c.top.Stream, MaxBytes: full.Limit, Bytes: full.Bytes, Queued: full.Queued,
			Reserved: full.Reserved, Store: full.Store}
	}
	return err
}

// fullError turns JetStream's refusal of a task for the stream's limits into
// a *StreamFullError.
func (c *Client) fullError(ctx context.Context, err error) error {
	if !jscall.StreamRefusedFull(err) {
		return err
	}
	limit := int64(-1)
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), topology.LookupTimeout)
	defer cancel()
	if info, ierr := c.s.Info(ictx); ierr == nil {
		limit = info.Config.MaxBytes
	}
	return fmt.Errorf("%w (%v)", &StreamFullError{Stream: c.top.Stream, MaxBytes: limit}, err)
}

// whileStoreTakes runs publish, and stops it with a *StoreRefusingError
// when the server reports its store refusing writes meanwhile: a store
// latched by a write error answers no publish, so a producer would
// otherwise wait out its whole deadline without a word. Such a store has
// stored nothing since.
func (c *Client) whileStoreTakes(ctx context.Context, publish func(ctx context.Context) error) error {
	pctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(room.StatusTimeout)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-pctx.Done():
				return
			case <-t.C:
				if st, ok := c.room.Store(pctx); ok && st.Refusing {
					cancel(&StoreRefusingError{Status: st})
					return
				}
			}
		}
	}()
	err := publish(pctx)
	close(done)
	if cause := context.Cause(pctx); err != nil && ctx.Err() == nil && cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return err
}

// StoreRefusing reports the broker's store refusing writes, as the server
// that runs it last said (at most 100 ms ago): nil when it takes
// writes or reports nothing.
func (w *Worker) StoreRefusing(ctx context.Context) error {
	st, ok := w.room.Store(ctx)
	if !ok || !st.Refusing {
		return nil
	}
	msg := fmt.Sprintf("the broker's store (%s) refuses writes (measured at %s): %s", st.Dir, st.At.UTC().Format(time.RFC3339), st.Error)
	if st.Action != "" {
		msg += "; " + st.Action
	}
	return errors.New(msg)
}
