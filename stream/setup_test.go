package stream

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream/broker"
	"github.com/captchaq/captchaq/stream/wire"
)

// bundle is what a test needs: an embedded JetStream server, a connection,
// and a producer client on it.
type bundle struct {
	ns     *server.Server
	nc     *nats.Conn
	client *Client
	top    Topology
}

// setup starts a bundle on an encrypted store, as `captchaq server` runs
// with the shipped nats.conf.
func setup(t *testing.T, top Topology) *bundle {
	t.Helper()
	return setupStore(t, top, testStoreKey)
}

// setupPlaintext starts a bundle on a store without encryption at rest,
// where workers erase what a plain delete would leave in the files.
func setupPlaintext(t *testing.T, top Topology) *bundle {
	t.Helper()
	return setupStore(t, top, "")
}

func setupStore(t *testing.T, top Topology, key string) *bundle {
	t.Helper()
	ns, err := broker.Start(broker.Config{StoreDir: t.TempDir(), LazySync: true, StoreKey: key})
	require.NoError(t, err)
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	b := &bundle{ns: ns, top: top}
	b.nc = b.connect(t)
	ctx := testContext(t)
	ensureAsAdmin(t, b.nc, top)
	b.client, err = NewClient(ctx, b.nc, ClientConfig{Topology: top, Name: "test-producer"})
	require.NoError(t, err)
	return b
}

// ensureAsAdmin creates the topology and the timings bucket on nc, as
// `captchaq init` does: producers and workers only find them.
func ensureAsAdmin(t testing.TB, nc *nats.Conn, top Topology) {
	t.Helper()
	adm, err := NewAdmin(nc, AdminConfig{Topology: top})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = adm.EnsureTopology(ctx, true)
	require.NoError(t, err)
	_, err = adm.EnsureTimings(ctx)
	require.NoError(t, err)
}

func (b *bundle) connect(t *testing.T) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect("", nats.InProcessServer(b.ns))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// runningWorker is a worker pool running in the background of a test.
type runningWorker struct {
	w    *Worker
	stop context.CancelFunc
	done chan error
}

// startWorker starts a worker pool on its own connection; it stops at the
// end of the test.
func (b *bundle) startWorker(t *testing.T, cfg WorkerConfig) *runningWorker {
	t.Helper()
	return b.startWorkerOn(t, b.connect(t), cfg)
}

// startWorkerOn is startWorker on the connection nc.
func (b *bundle) startWorkerOn(t *testing.T, nc *nats.Conn, cfg WorkerConfig) *runningWorker {
	t.Helper()
	if cfg.Topology.Stream == "" {
		cfg.Topology = b.top
	}
	if cfg.IdleCheck == 0 {
		cfg.IdleCheck = 50 * time.Millisecond
	}
	if cfg.Policy == (retry.Policy{}) {
		cfg.Policy = retry.Policy{InitialInterval: 50 * time.Millisecond, MaxInterval: 200 * time.Millisecond, NoJitter: true,
			CapacityDelay: 50 * time.Millisecond, CapacityMaxDelay: 200 * time.Millisecond}
	}
	w, err := NewWorker(testContext(t), nc, cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	rw := &runningWorker{w: w, stop: cancel, done: make(chan error, 1)}
	go func() { rw.done <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-rw.done })
	return rw
}

func turnstileTask(id string) Task {
	return Task{ID: id, Method: "turnstile", Params: Params{"sitekey": "0x4AAAAAAAB", "pageurl": "https://shop.example/checkout/123"}}
}

// recaptchaTask is a reCAPTCHA v2 task: the slow lane.
func recaptchaTask(id string) Task {
	return Task{ID: id, Method: "userrecaptcha", Params: Params{"googlekey": "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-", "pageurl": "https://shop.example/login"}}
}

// tokenSolver answers every captcha with a token derived from its site key.
func tokenSolver() solver.Solver {
	return solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
		b, _ := json.Marshal("tok-" + req.Params["sitekey"])
		return solver.Answer{Solution: b, CaptchaID: "42"}, nil
	})
}

// waitCounted waits until a consumer counts n messages pending. The server
// acknowledges a publish once the stream stored it and its consumers count
// the message a moment later; a no-wait fetch finds only what they counted.
func waitCounted(ctx context.Context, t *testing.T, s jetstream.Stream, consumer string, n uint64) {
	t.Helper()
	cons, err := s.Consumer(ctx, consumer)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumPending == n
	}, 5*time.Second, time.Millisecond, "consumer %s never counted %d messages", consumer, n)
}

// heartbeatSubject is the subject of a worker's heartbeats
// (wire.HeartbeatSubject).
func heartbeatSubject(name string) string { return wire.HeartbeatSubject(name) }
