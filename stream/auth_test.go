package stream

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream/broker"
	"github.com/captchaq/captchaq/stream/internal/topology"
)

// testStoreKey is the store key the tests give the shipped nats.conf.
const testStoreKey = "test-store-key-0123456789abcdef0123"

// The shipped nats.conf reads the roles' bcrypt hashes from the environment.
// Tests run in parallel (t.Setenv is not allowed there), so the variables
// are set once for the whole test binary; nothing else reads them.
var (
	roleEnvOnce   sync.Once
	rolePasswords = map[string]string{"producer": "producer-test-secret", "worker": "worker-test-secret", "admin": "admin-test-secret"}
)

func setRoleEnv(t *testing.T) {
	t.Helper()
	roleEnvOnce.Do(func() {
		for user, pw := range rolePasswords {
			h, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.MinCost)
			if err != nil {
				panic(err)
			}
			if err := os.Setenv("CAPTCHAQ_"+strings.ToUpper(user)+"_PASSWORD_HASH", string(h)); err != nil {
				panic(err)
			}
		}
		// The shipped nats.conf encrypts the store with this key.
		if err := os.Setenv("CAPTCHAQ_STORE_KEY", testStoreKey); err != nil {
			panic(err)
		}
	})
}

// shippedConfig is the repository's nats.conf.
var shippedConfig = filepath.Join("..", "nats.conf")

// authServer runs the shipped nats.conf on a random loopback port with a
// temporary store, and creates the topology as the admin, as `captchaq
// server` does.
func authServer(t *testing.T) *server.Server {
	t.Helper()
	setRoleEnv(t)
	ns, err := broker.Start(broker.Config{ConfigFile: shippedConfig, Port: -1, StoreDir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	admin, _ := roleConn(t, ns, "admin")
	js, err := jetstream.New(admin)
	require.NoError(t, err)
	_, err = EnsureTopology(testContext(t), js.Conn(), Topology{}, true)
	require.NoError(t, err)
	return ns
}

// roleConn connects to ns over TCP as user; the channel receives the
// connection's asynchronous errors (permission violations).
func roleConn(t *testing.T, ns *server.Server, user string) (*nats.Conn, <-chan error) {
	t.Helper()
	errs := make(chan error, 64)
	nc, err := nats.Connect(ns.ClientURL(), nats.UserInfo(user, rolePasswords[user]), nats.Name("test-"+user),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		}))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc, errs
}

// denied runs op and requires the server to refuse it with a permission
// violation naming subject. It does not wait out op's timeout: the
// violation arrives asynchronously, and op's context is cancelled then.
func denied(t *testing.T, errs <-chan error, subject string, op func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(testContext(t), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- op(ctx) }()
	select {
	case err := <-errs:
		require.ErrorIs(t, err, nats.ErrPermissionViolation)
		require.Contains(t, err.Error(), `"`+subject+`"`)
		cancel()
		require.Error(t, <-done, "the operation must fail, not only log")
	case err := <-done:
		t.Fatalf("operation on %s was not refused with a permission violation: returned %v", subject, err)
	}
}

func TestShippedConfigParses(t *testing.T) {
	t.Parallel()
	setRoleEnv(t)
	opts, err := server.ProcessConfigFile(shippedConfig)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1", opts.Host, "loopback by default")
	require.Equal(t, 4222, opts.Port)
	require.True(t, opts.SyncAlways, "sync_interval: always")
	require.True(t, opts.JetStream)
	require.GreaterOrEqual(t, opts.MaxPayload, int32(2<<20), "room for a 1024 KB image in base64")
	users := map[string]*server.User{}
	for _, u := range opts.Users {
		users[u.Username] = u
		require.True(t, strings.HasPrefix(u.Password, "$2a$"), "%s: a bcrypt hash from the environment", u.Username)
		require.NoError(t, bcrypt.CompareHashAndPassword([]byte(u.Password), []byte(rolePasswords[u.Username])))
		require.NotNil(t, u.Permissions, u.Username)
	}
	require.Len(t, users, 3)
	require.Contains(t, users, "producer")
	require.Contains(t, users, "worker")
	require.Contains(t, users, "admin")

	// The cluster nodes take the same roles from nats.conf.
	for i := 1; i <= 3; i++ {
		node, err := server.ProcessConfigFile(filepath.Join("..", "testdata", "cluster", "node"+string(rune('0'+i))+".conf"))
		require.NoError(t, err, "node %d", i)
		require.Equal(t, "captchaq", node.Cluster.Name)
		require.Len(t, node.Routes, 3)
		require.True(t, node.SyncAlways)
		require.Equal(t, "127.0.0.1", node.Host)
		require.Equal(t, 4221+i, node.Port)
		require.Len(t, node.Users, 3)
		for _, u := range node.Users {
			require.Equal(t, users[u.Username].Permissions, u.Permissions, "node %d, user %s", i, u.Username)
		}
	}
}

func TestShippedConfigFailsWithoutSecrets(t *testing.T) {
	t.Parallel()
	setRoleEnv(t)
	// A copy where one secret's variable names nothing in the environment:
	// the server must refuse to start rather than run without passwords, or
	// with a store in the clear.
	b, err := os.ReadFile(shippedConfig)
	require.NoError(t, err)
	for _, name := range []string{"PRODUCER_PASSWORD_HASH", "WORKER_PASSWORD_HASH", "ADMIN_PASSWORD_HASH", "STORE_KEY"} {
		require.Contains(t, string(b), "$CAPTCHAQ_"+name)
		conf := strings.ReplaceAll(string(b), "$CAPTCHAQ_"+name, "$CAPTCHAQ_UNSET_FOR_TEST_"+name)
		path := filepath.Join(t.TempDir(), "nats.conf")
		require.NoError(t, os.WriteFile(path, []byte(conf), 0o600))
		_, err = server.ProcessConfigFile(path)
		require.ErrorContains(t, err, "CAPTCHAQ_UNSET_FOR_TEST_"+name)
	}
}

func TestAuthRefusesMissingOrWrongCredentials(t *testing.T) {
	t.Parallel()
	ns := authServer(t)
	_, err := nats.Connect(ns.ClientURL())
	require.ErrorIs(t, err, nats.ErrAuthorization, "no credentials")
	_, err = nats.Connect(ns.ClientURL(), nats.UserInfo("producer", "wrong"))
	require.ErrorIs(t, err, nats.ErrAuthorization, "wrong password")
	_, err = nats.Connect(ns.ClientURL(), nats.UserInfo("nobody", "x"))
	require.ErrorIs(t, err, nats.ErrAuthorization, "unknown user")
}

// TestAuthRolesRunTheQueue runs the whole path under the three roles: a
// producer submits and waits, a worker solves or dead-letters, an admin
// lists, replays and purges dead letters.
func TestAuthRolesRunTheQueue(t *testing.T) {
	t.Parallel()
	ns := authServer(t)
	ctx := testContext(t)

	anc, aerrs := roleConn(t, ns, "admin")
	ajs, err := jetstream.New(anc)
	require.NoError(t, err)
	require.NoError(t, SetPlan(ctx, ajs.Conn(), Topology{}, 2), "the admin sets the plan quota")

	pnc, perrs := roleConn(t, ns, "producer")
	producer, err := NewClient(ctx, pnc, ClientConfig{Name: "producer"})
	require.NoError(t, err)

	var failedOnce atomic.Bool
	solve := solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
		if req.Params["sitekey"] == "bad" && failedOnce.CompareAndSwap(false, true) {
			return solver.Answer{}, &solver.Error{Code: "ERROR_PAGEURL", Class: retry.Permanent, Op: "in.php"}
		}
		b, _ := json.Marshal("tok-" + req.Params["sitekey"])
		return solver.Answer{Solution: b}, nil
	})
	wnc, werrs := roleConn(t, ns, "worker")
	w, err := NewWorker(ctx, wnc, WorkerConfig{Solver: solve, Threads: 2, IdleCheck: 50 * time.Millisecond})
	require.NoError(t, err, "a worker binds the consumers the admin created")
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	t.Cleanup(func() { stop(); <-done })

	out, err := producer.Solve(ctx, turnstileTask("ok-1"))
	require.NoError(t, err)
	require.Equal(t, `"tok-0x4AAAAAAAB"`, string(out.Solution))

	bad := turnstileTask("bad-1")
	bad.Params["sitekey"] = "bad"
	_, err = producer.Solve(ctx, bad)
	require.ErrorIs(t, err, ErrNotSolved)
	_, err = producer.Trace(ctx, "bad-1")
	require.NoError(t, err, "producers may read the audit trail")

	admin, err := NewClient(ctx, anc, ClientConfig{Name: "admin"})
	require.NoError(t, err)
	dead, err := admin.DeadLetters(ctx, DeadFilter{})
	require.NoError(t, err)
	require.Len(t, dead, 1)
	_, err = admin.Replay(ctx, "bad-1")
	require.NoError(t, err)
	out, err = producer.Wait(ctx, "bad-1")
	require.NoError(t, err, "the replay is solved")
	require.Equal(t, `"tok-bad"`, string(out.Solution))
	n, err := admin.PurgeDead(ctx, DeadFilter{})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	st, err := producer.Stats(ctx, time.Hour)
	require.NoError(t, err, "producers may read stats")
	require.Equal(t, 2, st.Solved)

	for role, errs := range map[string]<-chan error{"producer": perrs, "worker": werrs, "admin": aerrs} {
		select {
		case err := <-errs:
			t.Fatalf("%s: unexpected asynchronous error: %v", role, err)
		default:
		}
	}
}

func TestAuthProducerCannotConsumeDeleteOrPurge(t *testing.T) {
	t.Parallel()
	ns := authServer(t)
	ctx := testContext(t)
	nc, errs := roleConn(t, ns, "producer")
	c, err := NewClient(ctx, nc, ClientConfig{})
	require.NoError(t, err)
	_, err = c.Submit(ctx, turnstileTask("p-1"))
	require.NoError(t, err)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	s, err := js.Stream(ctx, DefaultStream)
	require.NoError(t, err)

	t.Run("consume", func(t *testing.T) {
		cons, err := s.Consumer(ctx, "workers-fast-normal")
		require.NoError(t, err, "reading a consumer's state is allowed (stats)")
		denied(t, errs, "$JS.API.CONSUMER.MSG.NEXT.CAPTCHA.workers-fast-normal", func(ctx context.Context) error {
			batch, err := cons.Fetch(1, jetstream.FetchContext(ctx))
			if err != nil {
				return err
			}
			for range batch.Messages() {
				return errors.New("fetched a task")
			}
			return batch.Error()
		})
	})
	t.Run("take over a worker consumer", func(t *testing.T) {
		denied(t, errs, "$JS.API.CONSUMER.CREATE.CAPTCHA.workers-slow-high.captcha.tasks.>", func(ctx context.Context) error {
			_, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "workers-slow-high", FilterSubject: "captcha.tasks.>"})
			return err
		})
	})
	t.Run("delete a worker consumer", func(t *testing.T) {
		denied(t, errs, "$JS.API.CONSUMER.DELETE.CAPTCHA.workers-fast-high", func(ctx context.Context) error {
			return s.DeleteConsumer(ctx, "workers-fast-high")
		})
	})
	t.Run("delete the stream", func(t *testing.T) {
		denied(t, errs, "$JS.API.STREAM.DELETE.CAPTCHA", func(ctx context.Context) error {
			return js.DeleteStream(ctx, DefaultStream)
		})
	})
	t.Run("purge", func(t *testing.T) {
		denied(t, errs, "$JS.API.STREAM.PURGE.CAPTCHA", func(ctx context.Context) error { return s.Purge(ctx) })
	})
	t.Run("purge dead letters", func(t *testing.T) {
		denied(t, errs, "$JS.API.STREAM.MSG.DELETE.CAPTCHA", func(ctx context.Context) error { return s.DeleteMsg(ctx, 1) })
	})
	t.Run("forge an outcome", func(t *testing.T) {
		denied(t, errs, "captcha.results.p-1", func(ctx context.Context) error {
			_, err := js.Publish(ctx, "captcha.results.p-1", []byte(`{"id":"p-1","status":"solved"}`))
			return err
		})
	})
	t.Run("forge a token", func(t *testing.T) {
		denied(t, errs, "captcha.tokens.p-1.1", func(ctx context.Context) error {
			_, err := js.Publish(ctx, "captcha.tokens.p-1.1", []byte(`{"id":"p-1","status":"solved","solution":"forged"}`))
			return err
		})
	})
	t.Run("delete a token", func(t *testing.T) {
		denied(t, errs, "$JS.API.STREAM.MSG.DELETE.CAPTCHA_TOKENS", func(ctx context.Context) error {
			ts, err := js.Stream(ctx, Topology{}.TokenStream())
			if err != nil {
				return err
			}
			return ts.DeleteMsg(ctx, 1)
		})
	})
	t.Run("ack a task", func(t *testing.T) {
		denied(t, errs, "$JS.ACK.CAPTCHA.workers-fast-normal.1.1.1.1.0", func(ctx context.Context) error {
			_, err := nc.RequestWithContext(ctx, "$JS.ACK.CAPTCHA.workers-fast-normal.1.1.1.1.0", []byte("+ACK"))
			return err
		})
	})
}

func TestAuthWorkerCannotDeleteStreamOrCreateConsumers(t *testing.T) {
	t.Parallel()
	ns := authServer(t)
	ctx := testContext(t)
	nc, errs := roleConn(t, ns, "worker")
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	s, err := js.Stream(ctx, DefaultStream)
	require.NoError(t, err)

	t.Run("delete the stream", func(t *testing.T) {
		denied(t, errs, "$JS.API.STREAM.DELETE.CAPTCHA", func(ctx context.Context) error {
			return js.DeleteStream(ctx, DefaultStream)
		})
	})
	t.Run("create a consumer", func(t *testing.T) {
		denied(t, errs, "$JS.API.CONSUMER.CREATE.CAPTCHA.sneaky.captcha.>", func(ctx context.Context) error {
			_, err := s.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "sneaky", FilterSubject: "captcha.>"})
			return err
		})
	})
	t.Run("delete a consumer", func(t *testing.T) {
		denied(t, errs, "$JS.API.CONSUMER.DELETE.CAPTCHA.workers-fast-high", func(ctx context.Context) error {
			return s.DeleteConsumer(ctx, "workers-fast-high")
		})
	})
	// Workers may publish on the task subjects and the waiting room: a task
	// that is not due moves there and back (a producer's right, which a
	// worker, trusted with outcomes and tokens, may have too).
	t.Run("purge the stream", func(t *testing.T) {
		denied(t, errs, "$JS.API.STREAM.PURGE.CAPTCHA", func(ctx context.Context) error {
			return s.Purge(ctx)
		})
	})
}

// TestAuthWorkerNeedsConsumersFromAdmin: a worker does not create the
// consumers itself, so on a server where nobody has, NewWorker fails at
// once and says which one is missing and who creates it, instead of
// hanging.
func TestAuthWorkerNeedsConsumersFromAdmin(t *testing.T) {
	t.Parallel()
	setRoleEnv(t)
	ns, err := broker.Start(broker.Config{ConfigFile: shippedConfig, Port: -1, StoreDir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	admin, _ := roleConn(t, ns, "admin")
	ajs, err := jetstream.New(admin)
	require.NoError(t, err)
	_, _, err = topology.EnsureStreams(testContext(t), ajs, Topology{}.spec(), true) // the stream, but no consumers
	require.NoError(t, err)

	nc, _ := roleConn(t, ns, "worker")
	_, err = NewWorker(testContext(t), nc, WorkerConfig{Solver: tokenSolver()})
	require.ErrorIs(t, err, ErrNoTopology)
	require.ErrorContains(t, err, "consumer workers-fast-high not found")
	require.ErrorContains(t, err, "captchaq init")
}
