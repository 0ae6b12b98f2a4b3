package gateway_test

import (
	"context"
	"crypto/rand"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/captchaq/captchaq/gateway"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/broker"
)

// The gateway needs nothing but the producer's permissions of the shipped
// nats.conf: submit, poll, the outcome follower and the plan's thread count
// all pass, and so does a report, which the producer asks for and a worker
// (ServeReports, as the worker user) makes; the server reports no
// permission violation.
func TestGatewayRunsAsTheProducer(t *testing.T) {
	passwords := map[string]string{"producer": rand.Text(), "worker": rand.Text(), "admin": rand.Text()}
	for user, pw := range passwords {
		h, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.MinCost)
		require.NoError(t, err)
		t.Setenv("CAPTCHAQ_"+strings.ToUpper(user)+"_PASSWORD_HASH", string(h))
	}
	t.Setenv("CAPTCHAQ_STORE_KEY", rand.Text()+rand.Text())
	ns, err := broker.Start(broker.Config{ConfigFile: filepath.Join("..", "nats.conf"), Port: -1, StoreDir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	violations := make(chan error, 16)
	conn := func(user string) *nats.Conn {
		nc, err := nats.Connect(ns.ClientURL(), nats.UserInfo(user, passwords[user]),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err }))
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		return nc
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ajs, err := jetstream.New(conn("admin"))
	require.NoError(t, err)
	_, err = stream.EnsureTopology(ctx, ajs.Conn(), stream.Topology{}, true)
	require.NoError(t, err)
	require.NoError(t, stream.SetPlan(ctx, ajs.Conn(), stream.Topology{}, 4))

	api := fakeapi.New(fakeapi.Config{TimeScale: 0.001})
	apiURL, stopAPI, err := fakeapi.ServeLocal(api)
	require.NoError(t, err)
	t.Cleanup(stopAPI)
	sc, err := solver.NewClient(solver.Config{BaseURL: apiURL, APIKey: fakeapi.TestKey, Timing: solver.Timing{Scale: 0.001},
		MinSubmitInterval: -1, SubmitBurst: -1})
	require.NoError(t, err)
	w, err := stream.NewWorker(ctx, conn("worker"), stream.WorkerConfig{Solver: sc, Threads: 2, ShutdownGrace: 100 * time.Millisecond})
	require.NoError(t, err)
	wctx, stopWorker := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	t.Cleanup(func() { stopWorker(); <-done })

	stopReports, err := gateway.ServeReports(ctx, conn("worker"), stream.Topology{}, sc, nil)
	require.NoError(t, err)
	t.Cleanup(stopReports)

	share := alice
	share.Share = 0.5
	gw, err := gateway.New(ctx, gateway.Config{Conn: conn("producer"), Keys: []gateway.Key{share}})
	require.NoError(t, err)
	t.Cleanup(gw.Close)
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	b := &bundle{gw: gw, url: srv.URL}
	require.Equal(t, "2", b.call(t, "res.php", "key", share.Key, "action", "getbalance"), "half the plan's 4 threads, read as the producer")
	id := b.submit(t, share)
	require.True(t, strings.HasPrefix(b.await(t, share, id), "OK|"))
	require.Equal(t, "OK_REPORT_RECORDED", b.call(t, "res.php", "key", share.Key, "action", "reportgood", "id", id),
		"the producer asks, the worker reports")
	select {
	case err := <-violations:
		t.Fatalf("the server refused the gateway something: %v", err)
	default:
	}
}
