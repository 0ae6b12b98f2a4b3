package stream

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream/broker"
	"github.com/captchaq/captchaq/stream/internal/topology"
)

// TestClaimsOnABucketOfBefore: a timings bucket an admin created before
// claims existed (no key TTLs) is updated by the next EnsureTimings
// (`captchaq init`, the server) without losing what it holds; claims on
// it, before and after, are held once, by provider and id, and released.
func TestClaimsOnABucketOfBefore(t *testing.T) {
	t.Parallel()
	ns, err := broker.Start(broker.Config{StoreDir: t.TempDir(), LazySync: true})
	require.NoError(t, err)
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	b := &bundle{ns: ns}
	nc := b.connect(t)
	ctx := testContext(t)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	old, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: TimingsBucket, History: 1, MaxValueSize: topology.TimingsMaxValue})
	require.NoError(t, err)
	_, err = old.Put(ctx, "image", []byte(`{"n":1}`))
	require.NoError(t, err)

	check := func(wantTTL bool) {
		c, err := OpenClaims(ctx, nc, Topology{})
		require.NoError(t, err)
		require.Equal(t, wantTTL, c.KeysExpire())
		for _, p := range []string{"a", "b"} {
			ok, err := c.Claim(ctx, p, "7.1 x") // ids may hold what a key may not
			require.NoError(t, err)
			require.True(t, ok, "first claim on %s", p)
		}
		ok, err := c.Claim(ctx, "a", "7.1 x")
		require.NoError(t, err)
		require.False(t, ok, "held")
		for _, p := range []string{"a", "b"} {
			require.NoError(t, c.Release(ctx, p, "7.1 x"))
		}
		ok, err = c.Claim(ctx, "a", "7.1 x")
		require.NoError(t, err)
		require.True(t, ok, "released")
		require.NoError(t, c.Release(ctx, "a", "7.1 x"))
	}
	check(false)
	adm, err := NewAdmin(nc, AdminConfig{})
	require.NoError(t, err)
	_, err = adm.EnsureTimings(ctx)
	require.NoError(t, err, "the bucket of before is updated")
	check(true)
	e, err := old.Get(ctx, "image")
	require.NoError(t, err)
	require.JSONEq(t, `{"n":1}`, string(e.Value()), "what it held stays")
}
