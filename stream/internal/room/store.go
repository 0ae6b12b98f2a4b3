// Package room keeps the CAPTCHA stream's room: producers refuse a
// submission that would leave no room to record every queued task to its
// end (Producer), a worker starts no attempt it could not record (Worker),
// and both read the broker's store status (wire.wire.StoreStatus) through a
// StoreWatch. Package stream turns its refusals into StreamFullError and
// StoreRefusingError.
package room

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/captchaq/captchaq/stream/wire"
)

// ErrNoStoreStatus is returned by ReadStoreStatus when nothing answers on
// wire.SubjectStoreStatus (stream.ErrNoStoreStatus).
var ErrNoStoreStatus = errors.New("the NATS server reports no store status (not run by captchaq server)")

// ReadStoreStatus asks the server for the state of its store.
func ReadStoreStatus(ctx context.Context, nc *nats.Conn) (wire.StoreStatus, error) {
	var st wire.StoreStatus
	m, err := nc.RequestWithContext(ctx, wire.SubjectStoreStatus, nil)
	if errors.Is(err, nats.ErrNoResponders) {
		return st, ErrNoStoreStatus
	}
	if err != nil {
		return st, fmt.Errorf("read the store's status (%s): %w", wire.SubjectStoreStatus, err)
	}
	if err := json.Unmarshal(m.Data, &st); err != nil {
		return st, fmt.Errorf("read the store's status (%s): %w", wire.SubjectStoreStatus, err)
	}
	return st, nil
}

// ServeStoreStatus answers requests on wire.SubjectStoreStatus with
// status(), until the returned subscription is unsubscribed
// (stream.ServeStoreStatus).
func ServeStoreStatus(nc *nats.Conn, status func() wire.StoreStatus) (*nats.Subscription, error) {
	sub, err := nc.Subscribe(wire.SubjectStoreStatus, func(m *nats.Msg) {
		b, err := json.Marshal(status())
		if err == nil {
			_ = m.Respond(b)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("serve %s: %w", wire.SubjectStoreStatus, err)
	}
	return sub, nc.Flush()
}

// StoreWatch is a process's last reading of the store's status, read at
// most every Refresh; where no server answers (ErrNoStoreStatus, or a
// role not allowed to ask), the next try waits limitRefresh.
type StoreWatch struct {
	mu   sync.Mutex
	st   wire.StoreStatus
	ok   bool // st holds a reading
	next time.Time
}

// StatusTimeout bounds one request for the store's status.
const StatusTimeout = time.Second

// Read returns the last reading, refreshed when due; ok false when the
// server reports none.
func (w *StoreWatch) Read(ctx context.Context, nc *nats.Conn) (wire.StoreStatus, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if now := time.Now(); !now.Before(w.next) {
		rctx, cancel := context.WithTimeout(ctx, StatusTimeout)
		st, err := ReadStoreStatus(rctx, nc)
		cancel()
		switch {
		case err == nil:
			w.st, w.ok, w.next = st, true, now.Add(Refresh)
		case ctx.Err() != nil:
			// The caller gave up: keep the last reading.
		default:
			w.ok, w.next = false, now.Add(limitRefresh)
		}
	}
	return w.st, w.ok
}
