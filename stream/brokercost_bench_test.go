package stream

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream/broker"
	"github.com/captchaq/captchaq/stream/wire"
)

// BenchmarkBrokerExchangesPerTask counts, per task of a burst solved by two
// worker processes of 4 threads on an encrypted store whose server says so
// (as `captchaq server` does), the JetStream API requests the server
// receives ($JS.API.>, direct gets and deletes included), and the messages
// and bytes the two workers' connections receive (deliveries, wake-ups,
// replies). The counts are exact; the time per op is for direction only.
// cpu-µs/task is the process's CPU (user and system, getrusage: the
// producer, the workers and the embedded server) from the first submit
// until every finished task has left the stream, per task: it moves with
// the machine's load less than time does, but it does move.
func BenchmarkBrokerExchangesPerTask(b *testing.B) {
	ns, err := broker.Start(broker.Config{StoreDir: b.TempDir(), LazySync: true, StoreKey: testStoreKey})
	require.NoError(b, err)
	b.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	connect := func() *nats.Conn {
		nc, err := nats.Connect("", nats.InProcessServer(ns))
		require.NoError(b, err)
		b.Cleanup(nc.Close)
		return nc
	}
	// The store's status as `captchaq server` answers it: room to spare,
	// encrypted at rest (a field an older StoreStatus does not have, so
	// written as JSON).
	snc := connect()
	_, err = snc.Subscribe(SubjectStoreStatus, func(m *nats.Msg) {
		st, _ := json.Marshal(map[string]any{"at": time.Now(), "room": int64(1) << 40, "encrypted": true})
		_ = m.Respond(st)
	})
	require.NoError(b, err)
	require.NoError(b, snc.Flush())

	ctx := context.Background()
	ensureAsAdmin(b, snc, Topology{})
	client, err := NewClient(ctx, connect(), ClientConfig{Name: "bench-producer"})
	require.NoError(b, err)
	var workers []*nats.Conn
	for i := range 2 {
		wnc := connect()
		workers = append(workers, wnc)
		w, err := NewWorker(ctx, wnc, WorkerConfig{Name: fmt.Sprintf("w%d", i), Solver: tokenSolver(), Threads: 4, IdleCheck: 50 * time.Millisecond})
		require.NoError(b, err)
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- w.Run(wctx) }()
		b.Cleanup(func() { cancel(); <-done })
	}
	var api atomic.Int64
	mnc := connect()
	_, err = mnc.Subscribe("$JS.API.>", func(*nats.Msg) { api.Add(1) })
	require.NoError(b, err)
	require.NoError(b, mnc.Flush())

	tasks := make([]Task, b.N)
	for i := range tasks {
		tasks[i] = turnstileTask(fmt.Sprintf("bx-%d", i))
	}
	var msgs0, bytes0 uint64
	for _, w := range workers {
		msgs0, bytes0 = msgs0+w.Stats().InMsgs, bytes0+w.Stats().InBytes
	}
	api0 := api.Load()
	cpu0 := cpuTime(b)
	b.ResetTimer()
	receipts, err := client.SubmitAll(ctx, tasks)
	require.NoError(b, err)
	require.NoError(b, client.WaitAll(ctx, receipts, func(o Outcome, err error) { require.NoError(b, err) }))
	b.StopTimer()
	// Count once every finished task's message has left the stream (the
	// ack, or a delete in the background); the polls' own stream-info
	// requests are not the tasks'.
	js, err := jetstream.New(mnc)
	require.NoError(b, err)
	s, err := js.Stream(ctx, DefaultStream)
	require.NoError(b, err)
	polls := int64(1) // the look-up above
	require.Eventually(b, func() bool {
		polls++
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(wire.SubjectAllTasks))
		return err == nil && len(info.State.Subjects) == 0
	}, 30*time.Second, 10*time.Millisecond, "finished tasks left in the stream")
	require.NoError(b, mnc.Flush())
	cpu := cpuTime(b) - cpu0
	api.Add(-polls)
	var msgs, bytes uint64
	for _, w := range workers {
		msgs, bytes = msgs+w.Stats().InMsgs, bytes+w.Stats().InBytes
	}
	b.ReportMetric(float64(api.Load()-api0)/float64(b.N), "api-requests/task")
	b.ReportMetric(float64(msgs-msgs0)/float64(b.N), "worker-in-msgs/task")
	b.ReportMetric(float64(bytes-bytes0)/float64(b.N), "worker-in-bytes/task")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/task")
}

// cpuTime is the CPU the process has used, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
