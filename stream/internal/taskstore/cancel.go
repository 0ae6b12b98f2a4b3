package taskstore

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/captchaq/captchaq/stream/internal/jscall"
	"github.com/captchaq/captchaq/stream/wire"
)

// OwnerCancelScan is how many records of an owner's cancel subject a
// reader looks at, oldest first: one batched read, whatever is published.
const OwnerCancelScan = 16

// CancelOf returns the valid cancel record of the generation of task id
// whose state is st, nil when there is none: an admin's (or an owner's
// that a worker relayed), which st holds, at no cost; else, for a task
// message that names a cancel hash (header h), an owner's whose secret
// matches it, among the first OwnerCancelScan records on the owner's
// subject (they all come after the task message): one batched direct get.
// A task without a cancel hash costs nothing.
//
// Any producer may publish on an owner's subject. A forged record after
// the owner's does not hide it; forged records before it, more than
// OwnerCancelScan of them, do here, and workers that run when the owner's
// record is stored relay it to the task's records anyway.
func CancelOf(ctx context.Context, nc *nats.Conn, domain, stream string, id string, st GenState, h nats.Header) (*wire.CancelRecord, error) {
	if st.Cancel != nil {
		return st.Cancel, nil
	}
	if h.Get(wire.HeaderCancelHash) == "" {
		return nil, nil // only an owner's task can have an owner's cancel
	}
	r, err := jscall.NewDirectReader(nc, domain, stream)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	msgs, _, err := r.BatchOf(ctx, wire.CancelSubject(id, st.Gen), st.Gen, OwnerCancelScan)
	if err != nil {
		return nil, fmt.Errorf("read cancel records of task %s: %w", id, err)
	}
	for _, m := range msgs {
		if rec := wire.ParseCancel(m.Data(), st.Gen); rec != nil && wire.OwnsCancel(h, rec.Secret) {
			spent, err := secretSpent(ctx, r, id, st.Gen, rec.Secret)
			if err != nil {
				return nil, err
			}
			if spent {
				continue
			}
			return rec, nil
		}
	}
	return nil, nil
}

// SecretSpent reports whether secret is on an owner's cancel record of a
// generation of task id other than gen. Such a secret is public: any
// producer reads cancel records with direct gets. A replay carries its
// dead letter's cancel hash, so the secret that canceled (or tried to
// cancel) an earlier generation would otherwise cancel the replay in the
// hands of whoever read it; the owner's cancel of a replay needs a secret
// that never went out, and a spent one leaves the replay to the admin.
func SecretSpent(ctx context.Context, nc *nats.Conn, domain, stream string, id string, gen uint64, secret string) (bool, error) {
	r, err := jscall.NewDirectReader(nc, domain, stream)
	if err != nil {
		return false, err
	}
	defer r.Close()
	return secretSpent(ctx, r, id, gen, secret)
}

func secretSpent(ctx context.Context, r *jscall.DirectReader, id string, gen uint64, secret string) (bool, error) {
	own := wire.CancelSubject(id, gen)
	sc := jscall.NewScan(r, []string{wire.CancelRecordSubject(id) + ".*"}, 0, time.Time{})
	for {
		m, err := sc.Next(ctx)
		if err != nil {
			return false, fmt.Errorf("read cancel records of task %s: %w", id, err)
		}
		if m == nil {
			return false, nil
		}
		var rec wire.CancelRecord
		if m.Subject() != own && json.Unmarshal(m.Data(), &rec) == nil &&
			subtle.ConstantTimeCompare([]byte(rec.Secret), []byte(secret)) == 1 {
			return true, nil
		}
	}
}
