package stream

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream/wire"
)

// While the store says it refuses writes (a stream hit a write error, say)
// a producer refuses a submission at once, though the store reports room,
// and publishes nothing; once the store takes writes again, it submits.
func TestProducerRefusesWhileTheStoreRefuses(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	var refusing atomic.Bool
	refusing.Store(true)
	_, err := ServeStoreStatus(b.connect(t), func() StoreStatus {
		return StoreStatus{At: time.Now(), Room: 1 << 30, Refusing: refusing.Load()}
	})
	require.NoError(t, err)
	c, err := NewClient(ctx, b.connect(t), ClientConfig{Name: "refused"})
	require.NoError(t, err)
	_, err = c.Submit(ctx, turnstileTask("while-refusing"))
	require.ErrorIs(t, err, ErrStoreRefusing)
	info, err := b.client.s.Info(ctx, jetstream.WithSubjectFilter(wire.SubjectAllTasks))
	require.NoError(t, err)
	require.Empty(t, info.State.Subjects, "nothing published")

	refusing.Store(false)
	require.Eventually(t, func() bool {
		_, err := c.Submit(ctx, turnstileTask("after"))
		return err == nil
	}, 10*time.Second, 20*time.Millisecond, "the store takes writes again")
}
