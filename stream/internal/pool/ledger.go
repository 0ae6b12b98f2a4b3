// The pool's spend of the day, for the providers' budgets: what each
// provider and each producer was paid today, kept in the pool's bucket by the
// workers as their solves are paid, so that a cap holds across workers and
// restarts (provider.Ledger).

package pool

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Ledger keeps the pool's spend per day and scope (a provider, a
// producer) in the pool's bucket, in millionths of the prices' currency (keys
// spend.<day>.<hash of the scope>: no producer's name in a key; a day's
// keys stay, a few dozen bytes a scope, since an update carries no TTL).
// It is safe for concurrent use.
type Ledger struct {
	kv jetstream.KeyValue
}

// OpenLedger binds the spend ledger of the pool's bucket, which an admin
// created; it creates nothing (OpenTimings).
func OpenLedger(ctx context.Context, js jetstream.JetStream, domain string) (*Ledger, error) {
	c, err := OpenClaims(ctx, js, domain)
	if err != nil {
		return nil, err
	}
	return &Ledger{kv: c.kv}, nil
}

func ledgerKey(scope string, day time.Time) string {
	h := sha256.Sum256([]byte(scope))
	return "spend." + day.UTC().Format("20060102") + "." + hex.EncodeToString(h[:16])
}

// micros is cost in millionths, the ledger's unit (stats' spend is rounded
// to a millionth too), held within ±maxMicros: a figure past it (a cost a
// broken provider reported, a cap meant as none) would wrap a 64-bit sum
// below 0 and void every cap of the day.
func micros(cost float64) int64 {
	m := math.Round(cost * 1e6)
	switch {
	case m >= maxMicros:
		return maxMicros
	case m <= -maxMicros:
		return -maxMicros
	}
	return int64(m)
}

// maxMicros is the largest amount the ledger holds, 10^12 in the prices'
// currency: past any budget, and two of them sum within 64 bits.
const maxMicros = 1e18

// sumMicros is a+b held within ±maxMicros.
func sumMicros(a, b int64) int64 {
	a = max(-maxMicros, min(maxMicros, a)) // a sum written before it was held
	return max(-maxMicros, min(maxMicros, a+b))
}

// Spent is what scope was paid on day (UTC).
func (l *Ledger) Spent(ctx context.Context, scope string, day time.Time) (float64, error) {
	n, _, err := l.get(ctx, ledgerKey(scope, day))
	return float64(n) / 1e6, err
}

func (l *Ledger) get(ctx context.Context, key string) (n int64, rev uint64, err error) {
	e, err := l.kv.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return 0, 0, nil
	case err != nil:
		return 0, 0, fmt.Errorf("spend ledger: %w", err)
	}
	n, err = strconv.ParseInt(string(e.Value()), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("spend ledger: key %s holds %q, not a count", key, e.Value())
	}
	return n, e.Revision(), nil
}

// Add adds cost (less than 0: gives it back) to what scope was paid on
// day, with compare-and-set (a worker that added meanwhile makes this one
// read again).
func (l *Ledger) Add(ctx context.Context, scope string, day time.Time, cost float64) error {
	_, _, err := l.AddWithin(ctx, scope, day, cost, 0)
	return err
}

// AddWithin adds cost to what scope was paid on day only if that leaves
// it within budget (0: no budget), with compare-and-set, so that workers
// adding at once never pass it together: ok false, nothing added, when it
// would. spent is the day's spend it found.
func (l *Ledger) AddWithin(ctx context.Context, scope string, day time.Time, cost, budget float64) (ok bool, spent float64, err error) {
	key := ledgerKey(scope, day)
	for range 32 {
		n, rev, err := l.get(ctx, key)
		if err != nil {
			return false, 0, err
		}
		if budget > 0 && cost > 0 && sumMicros(n, micros(cost)) > micros(budget) {
			return false, float64(n) / 1e6, nil
		}
		v := []byte(strconv.FormatInt(sumMicros(n, micros(cost)), 10))
		if rev == 0 {
			_, err = l.kv.Create(ctx, key, v)
		} else {
			_, err = l.kv.Update(ctx, key, v, rev)
		}
		switch {
		case err == nil:
			return true, float64(n) / 1e6, nil
		case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyRevisionMismatch):
			continue
		default:
			return false, 0, fmt.Errorf("spend ledger: %w", err)
		}
	}
	return false, 0, errors.New("spend ledger: still updated by others after 32 tries")
}
