package stream

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream/internal/jscall"
	"github.com/captchaq/captchaq/stream/wire"
)

// cluster is three nodes of testdata/cluster, in this process, on free ports.
type cluster struct {
	nodes []*server.Server
	urls  []string
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	setRoleEnv(t)
	ports := make([]int, 3)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		ports[i] = l.Addr().(*net.TCPAddr).Port
		require.NoError(t, l.Close())
	}
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
	}
	c := &cluster{}
	for i := range 3 {
		opts, err := server.ProcessConfigFile(filepath.Join("..", "testdata", "cluster", fmt.Sprintf("node%d.conf", i+1)))
		require.NoError(t, err)
		opts.Port = -1
		opts.Cluster.Port = ports[i]
		opts.Routes = server.RoutesFromStr(strings.Join(routes, ","))
		opts.StoreDir = t.TempDir()
		opts.NoSigs = true
		ns, err := server.NewServer(opts)
		require.NoError(t, err)
		go ns.Start()
		t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
		require.True(t, ns.ReadyForConnections(10*time.Second))
		c.nodes = append(c.nodes, ns)
		c.urls = append(c.urls, ns.ClientURL())
	}
	return c
}

// connect dials every node as user, failing over fast.
func (c *cluster) connect(t *testing.T, user string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(strings.Join(c.urls, ","), nats.UserInfo(user, rolePasswords[user]),
		nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

// TestClusterSurvivesStreamLeaderLoss runs producers and workers on a
// three-node cluster with an R3 stream, kills the stream's leader mid-run,
// and checks that every submitted task ends with exactly one outcome.
func TestClusterSurvivesStreamLeaderLoss(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	top := Topology{Replicas: 3, AckWait: 2 * time.Second}

	admin := c.connect(t, "admin")
	ajs, err := jetstream.New(admin)
	require.NoError(t, err)
	require.Eventually(t, func() bool { // until the cluster has elected its meta leader
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := EnsureTopology(actx, ajs.Conn(), top, true)
		if err != nil {
			t.Logf("topology not ready yet: %v", err)
		}
		return err == nil
	}, 20*time.Second, 100*time.Millisecond)

	solve := solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
		select { // a short solve, so tasks are in flight when the leader goes
		case <-ctx.Done():
			return solver.Answer{}, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		b, _ := json.Marshal("tok-" + req.Params["sitekey"])
		return solver.Answer{Solution: b}, nil
	})
	for i := range 2 {
		w, err := NewWorker(ctx, c.connect(t, "worker"), WorkerConfig{Solver: solve, Threads: 4, Topology: top,
			IdleCheck: 100 * time.Millisecond, Name: "cluster-worker-" + strconv.Itoa(i), ShutdownGrace: time.Second})
		require.NoError(t, err)
		wctx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(wctx) }()
		t.Cleanup(func() { stop(); <-done })
	}

	producer, err := NewClient(ctx, c.connect(t, "producer"), ClientConfig{Topology: top, Name: "cluster-producer"})
	require.NoError(t, err)
	batch := func(from, n int) []Task {
		var out []Task
		for i := from; i < from+n; i++ {
			out = append(out, turnstileTask(fmt.Sprintf("c-%03d", i)))
		}
		return out
	}
	receipts, err := producer.SubmitAll(ctx, batch(0, 40))
	require.NoError(t, err)
	_, err = producer.Wait(ctx, "c-000") // the run is under way
	require.NoError(t, err)

	info, err := ajs.Stream(ctx, DefaultStream)
	require.NoError(t, err)
	leader := info.CachedInfo().Cluster.Leader
	require.NotEmpty(t, leader)
	for _, ns := range c.nodes {
		if ns.Name() == leader {
			ns.Shutdown()
			ns.WaitForShutdown()
		}
	}
	t.Logf("killed stream leader %s", leader)

	more, err := producer.SubmitAll(ctx, batch(40, 40)) // rides out the election
	require.NoError(t, err)
	receipts = append(receipts, more...)

	outcomes := map[string]int{}
	require.NoError(t, producer.WaitAll(ctx, receipts, func(o Outcome, err error) {
		require.NoError(t, err, o.ID)
		outcomes[o.ID]++
	}))
	require.Len(t, outcomes, len(receipts), "no task lost")

	// Exactly one outcome and one solve recorded per task, in the stream.
	// The stream allows direct gets (read.go), which any replica answers:
	// one that is still catching up after the election may end the scan
	// short of the newest messages, so the scan is read again until every
	// task's outcome is in it (a lost one fails here, after the wait).
	var results, solves map[string]int
	allRead := func() bool {
		results, solves = map[string]int{}, map[string]int{}
		require.NoError(t, scanFrom(ctx, producer, []string{wire.SubjectResults + ".>", wire.SubjectEvents + ".>"}, 0, false, func(m jetstream.Msg) (bool, error) {
			id := wire.IDFromSubject(m.Subject())
			if strings.HasPrefix(m.Subject(), wire.SubjectResults) {
				results[id]++
				return false, nil
			}
			// Every attempt that reached the service: an attempt event followed
			// by no retry (the only failures here are none) is a solve.
			var ev Event
			if json.Unmarshal(m.Data(), &ev) == nil && ev.Kind == EventAttempt {
				solves[id]++
			}
			return false, nil
		}))
		for _, r := range receipts {
			if results[r.ID] == 0 {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(15 * time.Second); !allRead() && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond) // a replica catching up sends no event to wait on
	}
	twice := 0
	for _, r := range receipts {
		require.Equal(t, 1, results[r.ID], "outcomes of %s", r.ID)
		require.GreaterOrEqual(t, solves[r.ID], 1, "solves of %s", r.ID)
		if solves[r.ID] > 1 {
			twice++
		}
	}
	// A worker whose records cannot be written while the stream has no
	// leader hands the task back, and its next delivery may solve it again;
	// the compare-and-set keeps the outcome single.
	if twice > 0 {
		t.Logf("%d of %d tasks were solved more than once across the leader change", twice, len(receipts))
	}
}

// TestClusterRacingCreatorsAllSucceed: three processes, one per node, create
// the topology of a fresh R3 stream at once. All succeed: one creates it, the
// others find it once its replicas have a leader (a look-up of a stream
// still electing one is asked again, not waited out to the deadline).
func TestClusterRacingCreatorsAllSucceed(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ajs, err := jetstream.New(c.connect(t, "admin"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { // JetStream is up once the meta group has a leader
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := ajs.AccountInfo(actx)
		return err == nil
	}, 20*time.Second, 50*time.Millisecond)
	errs := make(chan error, len(c.urls))
	for _, url := range c.urls {
		nc, err := nats.Connect(url, nats.UserInfo("admin", rolePasswords["admin"]))
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		require.NoError(t, err)
		go func() {
			cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			_, err := EnsureTopology(cctx, js.Conn(), Topology{Replicas: 3}, false)
			errs <- err
		}()
	}
	for range c.urls {
		require.NoError(t, <-errs)
	}
}

// TestUntilAnsweredAsksAgainLonger: a request that times out is sent again
// with twice the time, up to 16 s; an answer, an error that is not a
// timeout, or the end of the caller's context ends it.
func TestUntilAnsweredAsksAgainLonger(t *testing.T) {
	t.Parallel()
	var tries []time.Duration
	v, err := jscall.UntilAnswered(context.Background(), 4*time.Second, func(ctx context.Context) (int, error) {
		dl, _ := ctx.Deadline()
		tries = append(tries, time.Until(dl).Round(time.Second))
		if len(tries) < 4 {
			return 0, nats.ErrTimeout
		}
		return 7, nil
	})
	require.NoError(t, err)
	require.Equal(t, 7, v)
	require.Equal(t, []time.Duration{4 * time.Second, 8 * time.Second, 16 * time.Second, 16 * time.Second}, tries)

	// A caller without a deadline gets jscall.AnswerPatience in all; the error
	// then says what an unanswered request may mean.
	var deadlines []time.Time
	start := time.Now()
	_, err = jscall.UntilAnswered(context.Background(), time.Hour, func(ctx context.Context) (int, error) {
		dl, _ := ctx.Deadline()
		deadlines = append(deadlines, dl)
		return 0, nil
	})
	require.NoError(t, err)
	require.WithinDuration(t, start.Add(jscall.AnswerPatience), deadlines[0], time.Second)
	short, cancelShort := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancelShort()
	_, err = jscall.UntilAnswered(short, time.Second, func(ctx context.Context) (int, error) {
		<-ctx.Done() // nobody answers
		return 0, ctx.Err()
	})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "no answer from JetStream")

	calls := 0
	_, err = jscall.UntilAnswered(context.Background(), time.Second, func(context.Context) (int, error) {
		calls++
		return 0, jetstream.ErrStreamNotFound
	})
	require.ErrorIs(t, err, jetstream.ErrStreamNotFound)
	require.Equal(t, 1, calls, "an answer, even an error, is not asked again")

	ctx, cancel := context.WithCancel(context.Background())
	calls = 0
	_, err = jscall.UntilAnswered(ctx, time.Second, func(context.Context) (int, error) {
		calls++
		cancel()
		return 0, context.DeadlineExceeded
	})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, 1, calls, "the caller's context ended")
}
