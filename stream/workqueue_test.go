package stream

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream/broker"
	"github.com/captchaq/captchaq/stream/internal/topology"
	"github.com/captchaq/captchaq/stream/wire"
)

// serveStoreStatus answers store-status requests for b's server as
// `captchaq server` does, encryption at rest included.
func (b *bundle) serveStoreStatus(t *testing.T) {
	t.Helper()
	g := broker.WatchStore(b.ns, broker.GuardConfig{})
	t.Cleanup(g.Stop)
	sub, err := ServeStoreStatus(b.connect(t), func() StoreStatus {
		st := g.Status()
		return StoreStatus{At: st.At, Dir: st.Dir, MaxStore: st.MaxStore, Used: st.Used, Free: st.Free, Room: st.Room,
			Refusing: st.Refusing, Error: st.Error, Encrypted: broker.StoreEncrypted(b.ns)}
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
}

// deleteRequests counts the message-delete requests sent to the stream's
// API, and notes whether any asked to delete without erasing.
type deleteRequests struct {
	mu      sync.Mutex
	n       int
	noErase int
}

func (b *bundle) watchDeletes(t *testing.T) *deleteRequests {
	t.Helper()
	d := &deleteRequests{}
	nc := b.connect(t)
	_, err := nc.Subscribe("$JS.API.STREAM.MSG.DELETE.>", func(m *nats.Msg) {
		var req struct {
			NoErase bool `json:"no_erase"`
		}
		_ = json.Unmarshal(m.Data, &req)
		d.mu.Lock()
		d.n++
		if req.NoErase {
			d.noErase++
		}
		d.mu.Unlock()
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	return d
}

func (d *deleteRequests) counts() (n, noErase int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n, d.noErase
}

// solveAll submits n tasks and waits for every outcome.
func solveAll(t *testing.T, b *bundle, n int) {
	t.Helper()
	ctx := testContext(t)
	for i := range n {
		_, err := b.client.Submit(ctx, turnstileTask(fmt.Sprintf("wq-%d", i)))
		require.NoError(t, err)
	}
	for i := range n {
		out, err := b.client.Wait(ctx, fmt.Sprintf("wq-%d", i))
		require.NoError(t, err)
		require.Equal(t, StatusSolved, out.Status)
	}
}

// taskMessages counts the task messages the stream holds, once the
// worker has nothing left to erase or ack.
func taskMessages(t *testing.T, b *bundle, rw *runningWorker) uint64 {
	t.Helper()
	ctx := testContext(t)
	s, err := jetstream.New(b.nc)
	require.NoError(t, err)
	st, err := s.Stream(ctx, DefaultStream)
	require.NoError(t, err)
	var n uint64
	require.Eventually(t, func() bool {
		if _, queued := rw.w.completer.Drained(); queued > 0 {
			return false
		}
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(wire.SubjectAllTasks))
		if err != nil {
			return false
		}
		n = 0
		for _, c := range info.State.Subjects {
			n += c
		}
		return n == 0
	}, 10*time.Second, 5*time.Millisecond, "task messages left in the stream")
	return n
}

// On a store the server reports encrypted at rest, the worker's ack alone
// removes the finished task's message: no delete request per task. The
// task's events and outcome stay (no consumer's filter matches them).
func TestAckRemovesTheFinishedTaskWithoutADelete(t *testing.T) {
	b := setup(t, Topology{})
	b.serveStoreStatus(t)
	deletes := b.watchDeletes(t)
	rw := b.startWorker(t, WorkerConfig{Name: "w", Threads: 2, Solver: tokenSolver()})
	solveAll(t, b, 5)
	require.Zero(t, taskMessages(t, b, rw))
	n, _ := deletes.counts()
	require.Zero(t, n, "delete requests sent for finished tasks")

	info, err := rw.w.s.Info(testContext(t), jetstream.WithSubjectFilter(wire.SubjectRoot+".>"))
	require.NoError(t, err)
	require.Equal(t, jetstream.WorkQueuePolicy, info.Config.Retention)
	for i := range 5 {
		require.Equal(t, uint64(1), info.State.Subjects[wire.ResultSubject(fmt.Sprintf("wq-%d", i))], "outcome of wq-%d", i)
		require.NotZero(t, info.State.Subjects[wire.EventSubject(fmt.Sprintf("wq-%d", i))], "events of wq-%d", i)
	}
}

// On a store not reported encrypted (here plaintext), every finished
// task's message is erased (a delete that overwrites it) before the ack
// that would remove it unerased.
func TestPlaintextStoreErasesBeforeTheAck(t *testing.T) {
	b := setupPlaintext(t, Topology{})
	b.serveStoreStatus(t)
	deletes := b.watchDeletes(t)
	rw := b.startWorker(t, WorkerConfig{Name: "w", Threads: 2, Solver: tokenSolver()})
	solveAll(t, b, 5)
	require.Zero(t, taskMessages(t, b, rw))
	n, noErase := deletes.counts()
	require.Equal(t, 5, n)
	require.Zero(t, noErase)
}

// A stream with Limits retention, as an earlier version created it, keeps
// it through an update (nats-server cannot change it in place), is named
// in the advice, and its workers still remove finished tasks themselves.
func TestLimitsStreamOfAnEarlierVersionKeepsWorking(t *testing.T) {
	ns, err := broker.Start(broker.Config{StoreDir: t.TempDir(), LazySync: true, StoreKey: testStoreKey})
	require.NoError(t, err)
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	b := &bundle{ns: ns}
	b.nc = b.connect(t)
	ctx := testContext(t)
	js, err := jetstream.New(b.nc)
	require.NoError(t, err)
	old := topology.StreamConfig(withPayload(Topology{}, b.nc.MaxPayload()))
	old.Retention = jetstream.LimitsPolicy
	_, err = js.CreateStream(ctx, old)
	require.NoError(t, err)

	s, err := EnsureTopology(ctx, js.Conn(), Topology{MaxBytes: 1 << 30}, true)
	require.NoError(t, err, "an update must not try to change the retention")
	require.Equal(t, jetstream.LimitsPolicy, s.CachedInfo().Config.Retention)
	require.Equal(t, int64(1<<30), s.CachedInfo().Config.MaxBytes, "the rest of the update applies")
	require.Contains(t, topology.LimitsRetentionAdvice(s), "nats stream rm CAPTCHA")

	b.client, err = NewClient(ctx, b.nc, ClientConfig{Name: "test-producer"})
	require.NoError(t, err)
	b.serveStoreStatus(t)
	rw := b.startWorker(t, WorkerConfig{Name: "w", Threads: 2, Solver: tokenSolver()})
	require.False(t, rw.w.completer.WorkQueue())
	solveAll(t, b, 3)
	require.Zero(t, taskMessages(t, b, rw))
}

// A fresh stream has WorkQueue retention and gives no advice.
func TestNewStreamIsAWorkQueue(t *testing.T) {
	b := setup(t, Topology{})
	rw := b.startWorker(t, WorkerConfig{Name: "w", Threads: 1, Solver: tokenSolver()})
	require.Equal(t, jetstream.WorkQueuePolicy, rw.w.s.CachedInfo().Config.Retention)
	require.Empty(t, topology.LimitsRetentionAdvice(rw.w.s))
}
