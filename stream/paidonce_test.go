package stream

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream/broker"
)

// The broker goes down between the service's answer and the writes of the
// token and the outcome, and stays down for longer than the ack wait. The
// worker keeps the answer (the task stays held, so its heartbeats name it)
// and stores it once the broker is back: the task ends solved on its first
// attempt, and the service is paid once.
func TestBrokerDownAfterTheAnswerPaysOnce(t *testing.T) {
	t.Parallel()
	const ackWait = 2 * time.Second
	top := Topology{AckWait: ackWait}
	dir := t.TempDir()
	start := func(port int) *server.Server {
		ns, err := broker.Start(broker.Config{StoreDir: dir, StoreKey: testStoreKey, Listen: true, Port: port})
		require.NoError(t, err)
		t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
		return ns
	}
	ns := start(-1)
	port := ns.Addr().(*net.TCPAddr).Port
	url := ns.ClientURL()
	// Without a reconnect buffer: a write made during the outage fails
	// instead of reaching the broker late, depending on whether the token
	// stream is back by then.
	connect := func() *nats.Conn {
		nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.ReconnectBufSize(-1))
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		return nc
	}
	ctx, cancelCtx := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancelCtx)
	ensureAsAdmin(t, connect(), top)
	client, err := NewClient(ctx, connect(), ClientConfig{Topology: top, Name: "test-producer"})
	require.NoError(t, err)

	api := fakeapi.New(fakeapi.Config{SolveTime: fastSolve(10 * time.Millisecond), BurstLimit: 1 << 20})
	apiURL, stopAPI, err := fakeapi.ServeLocal(api)
	require.NoError(t, err)
	t.Cleanup(stopAPI)
	sc, err := solver.NewClient(solver.Config{BaseURL: apiURL, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1,
		Timing: solver.Timing{Scale: 0.001}})
	require.NoError(t, err)
	// The first answer is handed to the worker only once the broker is down.
	answered, resume := make(chan struct{}), make(chan struct{})
	first := true
	hooked := solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
		ans, err := sc.Solve(ctx, req)
		if first {
			first = false
			close(answered)
			<-resume
		}
		return ans, err
	})
	log := debugLog(t)
	w, err := NewWorker(ctx, connect(), WorkerConfig{Topology: top, Solver: hooked, Threads: 1, IdleCheck: 50 * time.Millisecond, Logger: log})
	require.NoError(t, err)
	wctx, stopWorker := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	t.Cleanup(func() { stopWorker(); <-done })

	rc, err := client.Submit(ctx, turnstileTask("once1"))
	require.NoError(t, err)
	select {
	case <-answered:
	case <-ctx.Done():
		t.Fatal("the task never reached the service")
	}
	ns.Shutdown()
	ns.WaitForShutdown()
	close(resume)
	// The outage is the scenario: longer than the ack wait, so that every
	// write the worker tries meanwhile fails.
	select {
	case <-time.After(3 * ackWait):
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	start(port)
	// As `captchaq server` does on every start: the token stream is in
	// memory, and a restart loses it.
	js, err := jetstream.New(connect())
	require.NoError(t, err)
	_, err = EnsureTopology(ctx, js.Conn(), top, true)
	require.NoError(t, err)

	var out Outcome
	require.NoError(t, client.WaitAll(ctx, []Receipt{rc}, func(o Outcome, err error) {
		require.NoError(t, err, "%+v", o)
		out = o
	}))
	require.Equal(t, StatusSolved, out.Status, "%+v", out)
	require.Equal(t, 1, out.Attempts, "the answer given during the outage is the outcome: %+v", out)
	require.Equal(t, 1, api.Stats().Submitted, "the service is paid once")
}
