// Captcha claims: which worker of the pool polls a provider's captcha id.
// A provider that answers a new submission with the id of a captcha
// another worker polls (a broken service) would otherwise hand the second
// task the first one's answer; the claim, created in the pool's bucket
// only if no one holds it, tells the second worker that the id is not
// its captcha (provider.Claims).

package pool

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/stream/internal/topology"
)

// ClaimTTL is how long a claim outlives a worker that died holding it
// (stream.ClaimTTL says why).
const ClaimTTL = time.Hour

// Claims keeps, in the pool's bucket (keys claims.<provider>.<hash of the
// captcha id>: no captcha id, token or URL), which worker polls each
// captcha a provider accepted. A bucket an admin created before claims
// existed keeps released claims' markers (no TTL); `captchaq init` (or
// the server) updates it. It is safe for concurrent use.
type Claims struct {
	kv  jetstream.KeyValue
	ttl bool // the bucket lets keys expire
}

// OpenClaims binds the claims of the pool's bucket, which an admin
// created; it creates nothing (OpenTimings).
func OpenClaims(ctx context.Context, js jetstream.JetStream, domain string) (*Claims, error) {
	tm, err := OpenTimings(ctx, js, domain)
	if err != nil {
		return nil, err
	}
	st, err := tm.kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("timings bucket %s: %w", topology.TimingsBucket, err)
	}
	return &Claims{kv: tm.kv, ttl: st.LimitMarkerTTL() > 0}, nil
}

// KeysExpire reports whether the bucket lets claims expire (ClaimTTL): an
// admin created it before claims existed and has not updated it since.
func (c *Claims) KeysExpire() bool { return c.ttl }

// claimKey is the key of provider's captcha id: the id hashed, since a
// provider's ids may hold what a key may not (dots, spaces).
func claimKey(provider, id string) string {
	h := sha256.Sum256([]byte(provider + "\x00" + id))
	return "claims." + hex.EncodeToString(h[:16])
}

// Claim claims provider's captcha id for the caller: false when another
// holds it. An error says the bucket could not be asked.
func (c *Claims) Claim(ctx context.Context, provider, id string) (bool, error) {
	var opts []jetstream.KVCreateOpt
	if c.ttl {
		opts = append(opts, jetstream.KeyTTL(ClaimTTL))
	}
	_, err := c.kv.Create(ctx, claimKey(provider, id), []byte(provider), opts...)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, jetstream.ErrKeyExists):
		return false, nil
	}
	return false, fmt.Errorf("claim of a captcha of %s: %w", provider, err)
}

// Release ends the claim on provider's captcha id (its task ended, or its
// worker gave it up), so that the provider may give the id again, and
// any contest of it (Contest).
func (c *Claims) Release(ctx context.Context, provider, id string) error {
	var opts []jetstream.KVDeleteOpt
	if c.ttl {
		opts = append(opts, jetstream.PurgeTTL(topology.ClaimMarkerTTL))
	}
	for _, key := range []string{claimKey(provider, id), contestKey(provider, id)} {
		if err := c.kv.Purge(ctx, key, opts...); err != nil {
			return fmt.Errorf("release of a captcha of %s: %w", provider, err)
		}
	}
	return nil
}

// contestKey is the key that says provider's captcha id is contested.
func contestKey(provider, id string) string { return claimKey(provider, id) + ".contested" }

// Contest is called by a worker whose claim of provider's captcha id
// failed (Claim false), having sent the submission the provider answered
// with that id at sent or later: unless the holder claimed the id before
// sent (it had the id before this submission was made: the captcha is
// surely the holder's), neither can tell whose captcha it is, and the id
// is marked contested for the holder to refuse its answer (Contested).
func (c *Claims) Contest(ctx context.Context, provider, id string, sent time.Time) error {
	e, err := c.kv.Get(ctx, claimKey(provider, id))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return nil // released meanwhile: the holder's task is done with it
	case err != nil:
		return fmt.Errorf("contest of a captcha of %s: %w", provider, err)
	case e.Created().Before(sent):
		return nil
	}
	var opts []jetstream.KVCreateOpt
	if c.ttl {
		opts = append(opts, jetstream.KeyTTL(ClaimTTL))
	}
	if _, err := c.kv.Create(ctx, contestKey(provider, id), []byte(provider), opts...); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("contest of a captcha of %s: %w", provider, err)
	}
	return nil
}

// Contested reports whether another worker contested the claim on
// provider's captcha id (Contest).
func (c *Claims) Contested(ctx context.Context, provider, id string) (bool, error) {
	_, err := c.kv.Get(ctx, contestKey(provider, id))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("claim of a captcha of %s: %w", provider, err)
	}
	return true, nil
}
