package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// SubjectStoreStatus is the core NATS subject on which `captchaq server`
// (and `captchaq run`) answers requests for the state of its JetStream
// store (a StoreStatus in JSON). It is outside captcha.>, so no stream
// captures it, and answering writes nothing to the store: it works when the
// store can take no more. A server captchaq does not run answers nothing
// here (no responders).
const SubjectStoreStatus = "captchaq.store"

// StoreStatus is the state of the broker's JetStream store, as the server
// that runs it measures it. It is part of the wire contract of `captchaq
// stats --json` (field "store"): fields may be added; these keep their names
// and meaning.
type StoreStatus struct {
	// At is when it was measured.
	At time.Time `json:"at"`
	// Dir is the store's directory.
	Dir string `json:"dir"`
	// MaxStore is JetStream's storage limit of the server (the config's
	// max_file_store, by default 75 % of the disk space free at start).
	MaxStore int64 `json:"max_store"`
	// Used is what JetStream's streams hold, by its own accounting.
	Used int64 `json:"used"`
	// Free is the space free on the store's filesystem.
	Free int64 `json:"free"`
	// Room is how much more the streams may store: the least of what the
	// server's limit, the accounts' limits and the free disk space (less a
	// margin for JetStream's own files) leave. Producers keep room for the
	// records of every queued task within it.
	Room int64 `json:"room"`
	// Refusing says the store refuses writes now: a stream hit a write
	// error (a full disk latches it until JetStream reopens its files), or
	// the server's storage limit is exceeded. Error says which.
	Refusing bool   `json:"refusing"`
	Error    string `json:"error,omitempty"`
	// Action says what the operator must do, when anything; empty when the
	// server recovers by itself.
	Action string `json:"action,omitempty"`
	// Encrypted says the store is encrypted at rest: a deleted message
	// leaves nothing readable in its files, so workers need not erase
	// finished tasks' page URLs before the ack that removes them.
	Encrypted bool `json:"encrypted,omitempty"`
}

// ReadStoreStatus asks the server for the state of its store.
func ReadStoreStatus(ctx context.Context, nc *nats.Conn) (StoreStatus, error) {
	var st StoreStatus
	m, err := nc.RequestWithContext(ctx, SubjectStoreStatus, nil)
	if errors.Is(err, nats.ErrNoResponders) {
		return st, ErrNoStoreStatus
	}
	if err != nil {
		return st, fmt.Errorf("read the store's status (%s): %w", SubjectStoreStatus, err)
	}
	if err := json.Unmarshal(m.Data, &st); err != nil {
		return st, fmt.Errorf("read the store's status (%s): %w", SubjectStoreStatus, err)
	}
	return st, nil
}

// ServeStoreStatus answers requests on SubjectStoreStatus with status(),
// until the returned subscription is unsubscribed. `captchaq server` serves
// it; whoever runs a NATS server of their own (where clients get
// ErrNoStoreStatus) can serve the store's status from their own watch of
// it, so that workers and producers keep room as they do with captchaq's.
func ServeStoreStatus(nc *nats.Conn, status func() StoreStatus) (*nats.Subscription, error) {
	sub, err := nc.Subscribe(SubjectStoreStatus, func(m *nats.Msg) {
		b, err := json.Marshal(status())
		if err == nil {
			_ = m.Respond(b)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("serve %s: %w", SubjectStoreStatus, err)
	}
	return sub, nc.Flush()
}

// storeWatch is a process's last reading of the store's status, read at
// most every roomRefresh; where no server answers (ErrNoStoreStatus, or a
// role not allowed to ask), the next try waits limitRefresh.
type storeWatch struct {
	mu   sync.Mutex
	st   StoreStatus
	ok   bool // st holds a reading
	next time.Time
}

// storeStatusTimeout bounds one request for the store's status.
const storeStatusTimeout = time.Second

// read returns the last reading, refreshed when due; ok false when the
// server reports none.
func (w *storeWatch) read(ctx context.Context, nc *nats.Conn) (StoreStatus, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if now := time.Now(); !now.Before(w.next) {
		rctx, cancel := context.WithTimeout(ctx, storeStatusTimeout)
		st, err := ReadStoreStatus(rctx, nc)
		cancel()
		switch {
		case err == nil:
			w.st, w.ok, w.next = st, true, now.Add(roomRefresh)
		case ctx.Err() != nil:
			// The caller gave up: keep the last reading.
		default:
			w.ok, w.next = false, now.Add(limitRefresh)
		}
	}
	return w.st, w.ok
}
