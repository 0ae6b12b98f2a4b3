package stream

import (
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream/broker"
)

// An unbounded stream (no MaxBytes) on a server whose JetStream storage
// limit is small: producers are refused, naming the store, while there is
// room to record every accepted task to its end, and a worker ends them all,
// each paid for once. Without the server's store status the producers
// would fill the store until JetStream refuses every write, the workers'
// records included.
func TestStoreLimitKeepsRoomForAcceptedTasks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	conf := filepath.Join(dir, "nats.conf")
	require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf("host: 127.0.0.1\nport: -1\njetstream { store_dir: %q, max_file_store: 256KB }\n", filepath.Join(dir, "js"))), 0o600))
	ns, err := broker.Start(broker.Config{ConfigFile: conf, StoreKey: testStoreKey})
	require.NoError(t, err)
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	g := broker.WatchStore(ns, broker.GuardConfig{})
	t.Cleanup(g.Stop)
	b := &bundle{ns: ns}
	srv := b.connect(t)
	_, err = ServeStoreStatus(srv, func() StoreStatus {
		st := g.Status()
		return StoreStatus{At: st.At, Dir: st.Dir, MaxStore: st.MaxStore, Used: st.Used, Free: st.Free, Room: st.Room, Refusing: st.Refusing, Error: st.Error}
	})
	require.NoError(t, err)
	b.nc = b.connect(t)
	ctx := testContext(t)
	ensureAsAdmin(t, b.nc, Topology{})
	b.client, err = NewClient(ctx, b.nc, ClientConfig{Name: "test-producer"})
	require.NoError(t, err)

	var receipts []Receipt
	var full error
	for i := range 1000 {
		r, err := b.client.Submit(ctx, turnstileTask(fmt.Sprintf("s%03d", i)))
		if err != nil {
			full = err
			break
		}
		receipts = append(receipts, r)
	}
	require.ErrorIs(t, full, ErrStreamFull)
	var sf *StreamFullError
	require.ErrorAs(t, full, &sf)
	require.NotNil(t, sf.Store, "the store, not MaxBytes, bounds the stream: %v", full)
	require.Contains(t, full.Error(), "the broker's store")
	require.Greater(t, len(receipts), 10)
	require.False(t, g.Status().Refusing, "refused before the store refuses anything")

	var solves atomic.Int32
	b.startWorker(t, WorkerConfig{Solver: countingSolver(&solves), Threads: 8})
	n := 0
	require.NoError(t, b.client.WaitAll(ctx, receipts, func(o Outcome, err error) {
		require.NoError(t, err, o.ID)
		require.Equal(t, StatusSolved, o.Status, o.ID)
		n++
	}))
	require.Equal(t, len(receipts), n, "every accepted task ended")
	require.Equal(t, int32(len(receipts)), solves.Load(), "each paid for once")
}
