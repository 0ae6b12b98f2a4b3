package broker

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The embedded server is configured to fsync before every acknowledgement
// (sync_interval: always) unless LazySync asks for nats-server's default.
// That nats-server then syncs before it acknowledges is nats-server's own
// promise: a power cut cannot be staged here, and the cost of the sync is
// measured by BenchmarkSubmit in package stream.
func TestEmbeddedServerConfiguredToSyncBeforeAck(t *testing.T) {
	t.Parallel()
	ns, err := Start(Config{StoreDir: t.TempDir()})
	require.NoError(t, err)
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	require.True(t, ns.JetStreamConfig().SyncAlways, "the default is sync_interval: always")

	lazy, err := Start(Config{StoreDir: t.TempDir(), LazySync: true})
	require.NoError(t, err)
	defer func() { lazy.Shutdown(); lazy.WaitForShutdown() }()
	require.False(t, lazy.JetStreamConfig().SyncAlways)

	tmp, err := Start(Config{})
	require.NoError(t, err)
	dir := tmp.JetStreamConfig().StoreDir
	tmp.Shutdown()
	tmp.WaitForShutdown()
	require.Eventually(t, func() bool { _, err := os.Stat(dir); return os.IsNotExist(err) }, 5*time.Second, 10*time.Millisecond,
		"a store Start made up goes away with the server")
}
