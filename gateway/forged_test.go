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
	"github.com/captchaq/captchaq/stream/wire"
)

// roleBed is captchaq under the shipped nats.conf's roles: the gateway
// connects as the producer, workers as the worker, and an attacker holds
// producer credentials of its own.
type roleBed struct {
	*bundle
	ns        interface{ ClientURL() string }
	passwords map[string]string
	api       *fakeapi.Server
	top       stream.Topology
	sc        *solver.Client
	admin     *stream.Client
}

func newRoleBed(t *testing.T, api fakeapi.Config, top stream.Topology, edit func(*gateway.Config)) *roleBed {
	t.Helper()
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
	rb := &roleBed{ns: ns, passwords: passwords, top: top}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = stream.EnsureTopology(ctx, rb.conn(t, "admin"), top, true)
	require.NoError(t, err)
	require.NoError(t, stream.SetPlan(ctx, rb.conn(t, "admin"), top, 4))
	rb.admin, err = stream.NewClient(ctx, rb.conn(t, "admin"), stream.ClientConfig{Topology: top, Name: "operator"})
	require.NoError(t, err)

	rb.api = fakeapi.New(api)
	apiURL, stopAPI, err := fakeapi.ServeLocal(rb.api)
	require.NoError(t, err)
	t.Cleanup(stopAPI)
	rb.sc, err = solver.NewClient(solver.Config{BaseURL: apiURL, APIKey: fakeapi.TestKey, Timing: solver.Timing{Scale: 0.05}, // a turnstile may take 6 s: the tests solve in 1 s
		MinSubmitInterval: -1, SubmitBurst: -1})
	require.NoError(t, err)

	cfg := gateway.Config{Conn: rb.conn(t, "producer"), Topology: top, Keys: []gateway.Key{alice, bob}, Pingback: gateway.Pingback{Allow: testHooks}}
	if edit != nil {
		edit(&cfg)
	}
	gw, err := gateway.New(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(gw.Close)
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	rb.bundle = &bundle{gw: gw, url: srv.URL}
	return rb
}

func (rb *roleBed) conn(t *testing.T, user string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(rb.ns.ClientURL(), nats.UserInfo(user, rb.passwords[user]))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

// startWorker runs a worker (the worker role) until the test ends.
func (rb *roleBed) startWorker(t *testing.T, threads int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := stream.NewWorker(ctx, rb.conn(t, "worker"), stream.WorkerConfig{Topology: rb.top, Solver: rb.sc, Threads: threads,
		ShutdownGrace: 100 * time.Millisecond})
	require.NoError(t, err)
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	t.Cleanup(func() { stop(); <-done })
}

// outcomesOf are the outcomes the stream holds under id, without tokens.
func (rb *roleBed) outcomesOf(t *testing.T, id string) []stream.OutcomeRecord {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	all, err := rb.admin.OutcomeRecords(ctx, time.Time{})
	require.NoError(t, err)
	var out []stream.OutcomeRecord
	for _, o := range all {
		if o.ID == id {
			out = append(out, o)
		}
	}
	return out
}

var turnstileBody = `{"method":"turnstile","params":{"sitekey":"0x4AAAAAAABkMYinukE8nzY","pageurl":"https://shop.example/checkout"}}`

// A producer who publishes a message under a gateway caller's task id
// with another Nats-Msg-Id (the caller's ids are on captcha.stored.events)
// gets an INVALID_ENVELOPE outcome stored under that id. The caller's
// res.php still answers its own task: not ready while it is solved, then
// its token; its pingback is called once, with that token; its in-flight
// count (getbalance under a share) is held until then. One in.php is paid.
func TestForgedOutcomeDoesNotAnswerTheCaller(t *testing.T) {
	share := alice
	share.Share = 0.5 // 2 of the plan's 4 threads
	rb := newRoleBed(t, fakeapi.Config{SolveTime: map[string]fakeapi.Range{fakeapi.KindTurnstile: {Min: time.Second, Max: time.Second}}},
		stream.Topology{}, func(c *gateway.Config) { c.Keys = []gateway.Key{share, bob} })
	rb.startWorker(t, 2)
	cb, hook := newCallbacks(t, 0)
	out := rb.call(t, "in.php", append([]string{"key", share.Key, "pingback", hook}, turnstile...)...)
	require.True(t, strings.HasPrefix(out, "OK|"), out)
	num := strings.TrimPrefix(out, "OK|")
	id := "alice-" + num
	require.Equal(t, "1", rb.call(t, "res.php", "key", share.Key, "action", "getbalance"))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := nats.NewMsg(wire.TaskSubject(stream.LaneOf("turnstile", nil), stream.PriorityHigh, id))
	m.Data = []byte(turnstileBody)
	m.Header.Set("Nats-Msg-Id", id+"-forged")
	js, err := jetstream.New(rb.conn(t, "producer"))
	require.NoError(t, err)
	_, err = js.PublishMsg(ctx, m)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		for _, o := range rb.outcomesOf(t, id) {
			if o.Error == stream.CodeInvalidEnvelope {
				return true
			}
		}
		return false
	}, 20*time.Second, 20*time.Millisecond, "the forged message ended INVALID_ENVELOPE")

	require.Equal(t, "CAPCHA_NOT_READY", rb.call(t, "res.php", "key", share.Key, "action", "get", "id", num),
		"a forged outcome is not the caller's answer")
	require.Equal(t, "1", rb.call(t, "res.php", "key", share.Key, "action", "getbalance"),
		"the caller's task still holds its slot")
	select {
	case q := <-cb.got:
		t.Fatalf("pingback before the caller's task ended: %v", q)
	default:
	}

	got := rb.await(t, share, num)
	require.True(t, strings.HasPrefix(got, "OK|"), "%s; outcomes under the id: %+v", got, rb.outcomesOf(t, id))
	select {
	case q := <-cb.got:
		require.Equal(t, strings.TrimPrefix(got, "OK|"), q.Get("code"))
	case <-time.After(20 * time.Second):
		t.Fatal("no pingback in 20 s")
	}
	require.Equal(t, 1, rb.api.Stats().Submitted, "the caller's captcha only: the forged message is paid nothing")
	cb.mu.Lock()
	require.Len(t, cb.calls, 1, "one pingback, the real one")
	cb.mu.Unlock()
}

// A valid task that another producer submits under a gateway caller's id
// once the duplicate window has passed, and that is solved before the
// caller's, never hands its token to the caller: res.php answers the
// caller's own task's token.
func TestLaterTaskUnderTheCallersIDIsNotItsAnswer(t *testing.T) {
	rb := newRoleBed(t, fakeapi.Config{SolveTime: map[string]fakeapi.Range{fakeapi.KindTurnstile: {Min: time.Second, Max: time.Second},
		fakeapi.KindRecaptcha: {Min: time.Millisecond, Max: time.Millisecond}}}, stream.Topology{DuplicateWindow: time.Second}, nil)
	num := rb.submit(t, alice)
	id := "alice-" + num

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	attacker, err := stream.NewClient(ctx, rb.conn(t, "producer"), stream.ClientConfig{Topology: rb.top, Name: "mallory"})
	require.NoError(t, err)
	evil := stream.Task{ID: id, Method: "userrecaptcha", Priority: stream.PriorityHigh,
		Params: stream.Params{"googlekey": "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-", "pageurl": "https://evil.example/"}}
	var r stream.Receipt
	require.Eventually(t, func() bool {
		r, err = attacker.Submit(ctx, evil)
		require.NoError(t, err)
		return !r.Duplicate
	}, 20*time.Second, 50*time.Millisecond, "the id leaves the duplicate window")
	rb.startWorker(t, 1)
	mine, err := attacker.Wait(ctx, id)
	require.NoError(t, err, "the attacker's task is solved")

	got := rb.await(t, alice, num)
	require.True(t, strings.HasPrefix(got, "OK|"), "%s; outcomes under the id: %+v", got, rb.outcomesOf(t, id))
	require.NotEqual(t, "OK|"+mine.Text(), got, "the caller is handed the attacker's token")
	require.Eventually(t, func() bool { return len(rb.outcomesOf(t, id)) == 2 }, 20*time.Second, 20*time.Millisecond)
	require.Equal(t, 2, rb.api.Stats().Submitted, "each task paid once")
}
