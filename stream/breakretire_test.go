package stream

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream/broker"
	"github.com/captchaq/captchaq/stream/internal/dispatcher"
)

// knownHole skips a reproducer of a hole left open unless
// CAPTCHAQ_KNOWN_HOLES=1: why says what it gave on main.
func knownHole(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("CAPTCHAQ_KNOWN_HOLES") != "1" {
		t.Skip("known hole (CAPTCHAQ_KNOWN_HOLES=1 runs it): " + why)
	}
}

// slowAcks is a worker's link to the server whose plan-thread acks
// ("+ACK" on $JS.ACK.CAPTCHA_PLAN) wait at the client's side until let
// is closed, as on a slow or congested link; everything else passes.
type slowAcks struct {
	ns      *server.Server
	let     chan struct{}
	waiting chan struct{} // closed when the first ack waits
	once    sync.Once
}

func (s *slowAcks) InProcessConn() (net.Conn, error) {
	c, err := s.ns.InProcessConn()
	if err != nil {
		return nil, err
	}
	return &slowAckConn{Conn: c, s: s}, nil
}

type slowAckConn struct {
	net.Conn
	s *slowAcks
}

func (c *slowAckConn) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("$JS.ACK."+dispatcher.PlanStream)) && bytes.Contains(p, []byte("+ACK")) {
		c.s.once.Do(func() { close(c.s.waiting) })
		<-c.s.let
	}
	return c.Conn.Write(p)
}

// A quota of 4 shrinks to 2 while a worker holds its 4 threads (2 marked
// retiring); the holder of a retiring one ends its captcha and reads the
// list (still retiring: it acks); its ack is on the wire when an operator
// sets 4 again, which takes the 2 retiring threads back as live ones and
// publishes nothing. The ack lands and removes one: the stream keeps 3
// threads for a quota of 4 until the next SetPlan, which an operator's
// quota only gets from the operator. Nothing is paid (no service). With
// `captchaq server` running, its look for lost threads puts the fourth
// back within about 20 s (TestThePlansLostThreadsArePutBack); without
// one, the hole stays.
func TestBreakARetiringAckLandingAfterTheTakeBackLosesAThread(t *testing.T) {
	t.Parallel()
	knownHole(t, "main: plan stream 3 threads, consumer 3 (pending+held) for a quota of 4 after SetPlan(4) returned")
	b := setup(t, Topology{Memory: underRace})
	ctx := testContext(t)
	admin, err := NewAdmin(b.connect(t), AdminConfig{Topology: b.top})
	require.NoError(t, err)
	require.NoError(t, admin.SetPlan(ctx, 4))

	link := &slowAcks{ns: b.ns, let: make(chan struct{}), waiting: make(chan struct{})}
	defer func() {
		select {
		case <-link.let:
		default:
			close(link.let)
		}
	}()
	wnc, err := nats.Connect("", nats.InProcessServer(link))
	require.NoError(t, err)
	t.Cleanup(wnc.Close)
	wjs, err := jetStreamOf(wnc, b.top)
	require.NoError(t, err)
	gate := &dispatcher.PlanGate{JS: wjs}
	held, err := gate.Acquire(ctx, 4, time.Second, time.Now())
	require.NoError(t, err)
	require.Len(t, held, 4)

	require.NoError(t, admin.SetPlan(ctx, 2))
	js, err := jetStreamOf(b.nc, b.top)
	require.NoError(t, err)
	ps, err := js.Stream(ctx, dispatcher.PlanStream)
	require.NoError(t, err)
	// The shrink retires the last held threads: 3 and 4, the last two
	// the fetch handed out.
	require.Equal(t, map[uint64]bool{3: true, 4: true}, dispatcher.ParseRetiring(ps.CachedInfo().Config.Metadata))
	// The gate's view names them, as a busy worker's does after its
	// next Acquire (or planRefresh).
	gate.Refresh()
	_, err = gate.Acquire(ctx, 1, 10*time.Millisecond, time.Now())
	require.NoError(t, err)
	go held[3].Release() // the captcha ended: the thread retires
	select {
	case <-link.waiting:
	case <-time.After(10 * time.Second):
		t.Fatal("the retiring thread's ack never went out")
	}
	require.NoError(t, admin.SetPlan(ctx, 4))
	close(link.let)

	count := func() (msgs uint64, pool uint64) {
		s, err := js.Stream(ctx, dispatcher.PlanStream)
		require.NoError(t, err)
		c, err := js.Consumer(ctx, dispatcher.PlanStream, dispatcher.PlanConsumer)
		require.NoError(t, err)
		ci := c.CachedInfo()
		return s.CachedInfo().State.Msgs, ci.NumPending + uint64(ci.NumAckPending)
	}
	// The ack has landed once the consumer no longer counts the thread
	// held, or the stream kept it.
	require.Eventually(t, func() bool {
		c, err := js.Consumer(ctx, dispatcher.PlanStream, dispatcher.PlanConsumer)
		return err == nil && c.CachedInfo().NumAckPending < 4
	}, 10*time.Second, 5*time.Millisecond)
	msgs, pool := count()
	t.Logf("quota 4 -> 2 -> 4, one retiring ack landing after the take-back: plan stream %d threads, consumer %d", msgs, pool)
	require.Equal(t, uint64(4), msgs, "the quota of 4 has its 4 threads")
	require.Equal(t, uint64(4), pool)
}

// Two operators' changes, 2 then 4, one after the other, while two
// workers' captchas end and start all the time (30 ms each at the
// emulator), the workers on a link whose every write takes 3 ms (a
// worker a few hundred kilometres from its server): a holder's ack of a
// retiring thread lands 3 ms after its read of the list, and a change
// in between loses the thread (the next SetPlan(4) publishes it again):
// counted, and a failure under CAPTCHAQ_KNOWN_HOLES=1. After the last SetPlan(4) and once every task ended, the pool must
// have its 4 threads, the service must never have held more than 4, and
// each task is paid once.
func TestBreakQuotaChurnOverSlowLinksKeepsTheQuotasThreads(t *testing.T) {
	t.Parallel()
	quotaChurn(t, 3*time.Millisecond)
}

// slowLink is a client's link to ns on which each write waits lag.
type slowLink struct {
	ns  *server.Server
	lag time.Duration
}

func (s slowLink) InProcessConn() (net.Conn, error) {
	c, err := s.ns.InProcessConn()
	if err != nil {
		return nil, err
	}
	return &laggingConn{Conn: c, lag: s.lag}, nil
}

type laggingConn struct {
	net.Conn
	lag time.Duration
}

func (c *laggingConn) Write(p []byte) (int, error) {
	time.Sleep(c.lag)
	return c.Conn.Write(p)
}

// quotaChurn runs TestBreakQuotaChurnOverSlowLinksKeepsTheQuotasThreads with the workers' writes each taking
// lag.
func quotaChurn(t *testing.T, lag time.Duration) {
	b := setup(t, Topology{Memory: underRace})
	ctx := testContext(t)
	api, sc := emulator(t, fakeapi.Config{SolveTime: map[string]fakeapi.Range{solver.KindTurnstile: fixed(30 * time.Millisecond)}}, 0.01)
	admin, err := NewAdmin(b.connect(t), AdminConfig{Topology: b.top})
	require.NoError(t, err)
	require.NoError(t, admin.SetPlan(ctx, 4))
	startSlowWorkers(t, b, sc, 2, lag)
	const tasks = 200
	rs, err := b.client.SubmitAll(ctx, pagesBurst("churn", tasks))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- b.client.WaitAll(ctx, rs, func(o Outcome, err error) {}) }()
	js, err := jetStreamOf(b.nc, b.top)
	require.NoError(t, err)
	rounds, lost := 0, 0
churn:
	for {
		select {
		case err := <-done:
			require.NoError(t, err)
			break churn
		default:
		}
		// After SetPlan(4) no thread is retiring: one gone since was
		// acked on a list read before the take-back.
		if ps, err := js.Stream(ctx, dispatcher.PlanStream); err == nil && rounds > 0 {
			lost += 4 - int(ps.CachedInfo().State.Msgs)
		}
		require.NoError(t, admin.SetPlan(ctx, 2))
		require.NoError(t, admin.SetPlan(ctx, 4))
		rounds++
	}
	// Every captcha ended (the workers may still hold threads while
	// they look for a task: held threads are messages all the same).
	require.Eventually(t, func() bool { return api.Stats().Concurrent == 0 }, 10*time.Second, 5*time.Millisecond)
	s, err := js.Stream(ctx, dispatcher.PlanStream)
	require.NoError(t, err)
	c, err := js.Consumer(ctx, dispatcher.PlanStream, dispatcher.PlanConsumer)
	require.NoError(t, err)
	st := api.Stats()
	ci := c.CachedInfo()
	t.Logf("stream seqs %d..%d, %d deleted between", s.CachedInfo().State.FirstSeq, s.CachedInfo().State.LastSeq, s.CachedInfo().State.NumDeleted)
	t.Logf("workers' writes %v each, %d rounds of SetPlan(2), SetPlan(4) (%d threads lost between rounds, published again by the next) while %d tasks ran: most at once %d; plan stream %d threads, consumer %d (free and held), retiring %q; paid %d",
		lag, rounds, lost, tasks, st.MaxConcurrent, s.CachedInfo().State.Msgs, ci.NumPending+uint64(ci.NumAckPending),
		s.CachedInfo().Config.Metadata[dispatcher.PlanMetaRetiring], st.Submitted)
	paidOnceAcross(t, tasks, st)
	require.LessOrEqual(t, st.MaxConcurrent, 4, "no more than the largest quota")
	require.LessOrEqual(t, s.CachedInfo().State.Msgs, uint64(4), "no thread over the quota of 4")
	require.LessOrEqual(t, ci.NumPending+uint64(ci.NumAckPending), uint64(4))
	if os.Getenv("CAPTCHAQ_KNOWN_HOLES") == "1" {
		// main: 1, 5 and 6 lost in 148, 142 and 162 rounds
		// (TestBreakARetiringAckLandingAfterTheTakeBackLosesAThread).
		// The last round may lose one too, and no server runs here to
		// put it back: CI preview 3 (race phase) ended with 3.
		require.Zero(t, lost, "threads lost between rounds")
		require.Equal(t, uint64(4), s.CachedInfo().State.Msgs, "the quota of 4 has its 4 threads")
		require.Equal(t, uint64(4), ci.NumPending+uint64(ci.NumAckPending))
	}
	for seq := range dispatcher.ParseRetiring(s.CachedInfo().Config.Metadata) {
		_, err := s.GetMsg(ctx, seq)
		require.ErrorIs(t, err, jetstream.ErrMsgNotFound, "thread %d named retiring under the quota of 4 is gone", seq)
	}
}

// The broker restarts on its file store while a worker holds the 4
// threads of a quota just shrunk to 2 (2 of them retiring): under the
// interest retention no thread may be lost or gained at the restart, the
// retiring ones stay named, and their holders' acks remove them, leaving
// the 2 of the quota. Nothing is paid (no service).
func TestBreakTheBrokerRestartingKeepsHeldAndRetiringThreads(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ns, err := broker.Start(broker.Config{StoreDir: dir, Listen: true, Port: -1, LazySync: true})
	require.NoError(t, err)
	port := ns.Addr().(*net.TCPAddr).Port
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	conn := func() *nats.Conn {
		nc, err := nats.Connect(ns.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		return nc
	}
	anc, wnc := conn(), conn()
	ensureAsAdmin(t, anc, Topology{})
	ctx := testContext(t)
	adm, err := NewAdmin(anc, AdminConfig{})
	require.NoError(t, err)
	require.NoError(t, adm.SetPlan(ctx, 4))
	wjs, err := jetStreamOf(wnc, Topology{})
	require.NoError(t, err)
	gate := &dispatcher.PlanGate{JS: wjs}
	held, err := gate.Acquire(ctx, 4, time.Second, time.Now())
	require.NoError(t, err)
	require.Len(t, held, 4)
	require.NoError(t, adm.SetPlan(ctx, 2))

	ns.Shutdown()
	ns.WaitForShutdown()
	ns, err = broker.Start(broker.Config{StoreDir: dir, Listen: true, Port: port, LazySync: true})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return anc.IsConnected() && wnc.IsConnected() }, 10*time.Second, 10*time.Millisecond, "reconnected")
	ajs, err := jetStreamOf(anc, Topology{})
	require.NoError(t, err)
	state := func() (msgs, free, heldN uint64, retiring int) {
		var s jetstream.Stream
		var c jetstream.Consumer
		require.Eventually(t, func() bool {
			s, err = ajs.Stream(ctx, dispatcher.PlanStream)
			if err != nil {
				return false
			}
			c, err = ajs.Consumer(ctx, dispatcher.PlanStream, dispatcher.PlanConsumer)
			return err == nil
		}, 10*time.Second, 20*time.Millisecond)
		ci := c.CachedInfo()
		return s.CachedInfo().State.Msgs, ci.NumPending, uint64(ci.NumAckPending), len(dispatcher.ParseRetiring(s.CachedInfo().Config.Metadata))
	}
	msgs, free, h, r := state()
	t.Logf("after the restart: plan stream %d threads, %d free, %d held, %d retiring", msgs, free, h, r)
	require.Equal(t, uint64(4), msgs, "no thread lost or gained at the restart")
	require.Equal(t, 2, r)
	gate.Refresh()
	for _, th := range held {
		th.Release()
	}
	require.Eventually(t, func() bool {
		again, err := gate.Acquire(ctx, 4, 10*time.Millisecond, time.Now())
		require.NoError(t, err)
		require.LessOrEqual(t, len(again), 2, "no more than the quota handed out")
		for _, th := range again {
			th.Release()
		}
		msgs, _, _, _ = state()
		return msgs == 2
	}, 10*time.Second, 20*time.Millisecond)
	msgs, free, h, r = state()
	t.Logf("after the releases: plan stream %d threads, %d free, %d held, %d retiring", msgs, free, h, r)
}

// While one thread lives on (held by a long captcha, or never the one a
// shrink takes), each change that removes threads leaves their sequences
// as interior deletes of the plan stream: the stream's first sequence
// stays, its last grows with each thread published, and the admin reads
// the whole list of deleted sequences at each step of each change
// (topology.EnsurePlan's info with deleted details). Bounded, it would
// be no longer than the quota's threads.
func TestBreakQuotaChangesKeepThePlanStreamsDeletesBounded(t *testing.T) {
	t.Parallel()
	knownHole(t, "main: after 100 changes 1 -> 4 with the oldest thread held, 300 deleted sequences (1.1 KB in the admin's info at each step), 3 more per change")
	b := setup(t, Topology{Memory: underRace})
	ctx := testContext(t)
	admin, err := NewAdmin(b.connect(t), AdminConfig{Topology: b.top})
	require.NoError(t, err)
	require.NoError(t, admin.SetPlan(ctx, 4))
	js, err := jetStreamOf(b.connect(t), b.top)
	require.NoError(t, err)
	gate := &dispatcher.PlanGate{JS: js}
	held, err := gate.Acquire(ctx, 1, time.Second, time.Now())
	require.NoError(t, err)
	require.Len(t, held, 1)
	defer held[0].Release()
	const changes = 100
	for range changes {
		require.NoError(t, admin.SetPlan(ctx, 1))
		require.NoError(t, admin.SetPlan(ctx, 4))
	}
	s, err := js.Stream(ctx, dispatcher.PlanStream)
	require.NoError(t, err)
	info, err := s.Info(ctx, jetstream.WithDeletedDetails(true))
	require.NoError(t, err)
	body, err := json.Marshal(info.State.Deleted)
	require.NoError(t, err)
	t.Logf("after %d changes 1 -> 4, the oldest thread held: plan stream %d threads, seqs %d..%d, %d deleted (%d bytes in the admin's info)",
		changes, info.State.Msgs, info.State.FirstSeq, info.State.LastSeq, info.State.NumDeleted, len(body))
	require.Equal(t, uint64(4), info.State.Msgs)
	require.LessOrEqual(t, info.State.NumDeleted, 4, "the deleted sequences the admin reads stay within the quota")
}

// A worker holding the 4 threads of a quota just shrunk to 2 dies (its
// connection closed, no Release): after the ack wait the server hands
// its threads to another worker, whose Acquire removes the 2 retiring
// ones instead of handing them out. It never holds more than 2, and the
// stream ends with the quota's 2. Nothing is paid (no service).
func TestBreakAWorkerDyingWithRetiringThreadsHandsOutNoMoreThanTheQuota(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{Memory: underRace, AckWait: 300 * time.Millisecond})
	ctx := testContext(t)
	admin, err := NewAdmin(b.connect(t), AdminConfig{Topology: b.top})
	require.NoError(t, err)
	require.NoError(t, admin.SetPlan(ctx, 4))
	dying, err := nats.Connect("", nats.InProcessServer(b.ns))
	require.NoError(t, err)
	djs, err := jetStreamOf(dying, b.top)
	require.NoError(t, err)
	held, err := (&dispatcher.PlanGate{JS: djs}).Acquire(ctx, 4, time.Second, time.Now())
	require.NoError(t, err)
	require.Len(t, held, 4)
	require.NoError(t, admin.SetPlan(ctx, 2))
	dying.Close()

	js, err := jetStreamOf(b.connect(t), b.top)
	require.NoError(t, err)
	gate := &dispatcher.PlanGate{JS: js}
	most := 0
	var mine []*dispatcher.PlanThread
	require.Eventually(t, func() bool {
		got, err := gate.Acquire(ctx, 4, 50*time.Millisecond, time.Now())
		require.NoError(t, err)
		mine = append(mine, got...)
		for _, th := range mine {
			th.KeepAlive()
		}
		most = max(most, len(mine))
		s, err := js.Stream(ctx, dispatcher.PlanStream)
		require.NoError(t, err)
		return s.CachedInfo().State.Msgs == 2 && len(mine) == 2
	}, 10*time.Second, 10*time.Millisecond)
	t.Logf("a dead worker's 4 threads, 2 retiring, taken over: %d held at most by the other worker", most)
	require.LessOrEqual(t, most, 2)
	for _, th := range mine {
		th.Release()
	}
}

// Workers on 3-ms links, captchas ending all the time, and a quota
// of 4 shrunk to 2 while the service holds 4: once the retiring threads
// left the stream (their captchas ended), the service never holds more
// than 2, though the workers' views of the retiring threads lag; each
// task is paid once.
func TestBreakASmallerQuotaHoldsOverSlowLinksOnceTheLargersCaptchasEnded(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{Memory: underRace})
	ctx := testContext(t)
	api, sc := emulator(t, fakeapi.Config{SolveTime: map[string]fakeapi.Range{solver.KindTurnstile: fixed(30 * time.Millisecond)}}, 0.01)
	admin, err := NewAdmin(b.connect(t), AdminConfig{Topology: b.top})
	require.NoError(t, err)
	require.NoError(t, admin.SetPlan(ctx, 4))
	startSlowWorkers(t, b, sc, 2, 3*time.Millisecond)
	const tasks = 200
	rs, err := b.client.SubmitAll(ctx, pagesBurst("smaller", tasks))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return api.Stats().Concurrent >= 4 }, 30*time.Second, time.Millisecond)
	require.NoError(t, admin.SetPlan(ctx, 2))
	js, err := jetStreamOf(b.nc, b.top)
	require.NoError(t, err)
	sctx, stop := context.WithCancel(ctx)
	after := make(chan int, 1)
	go func() {
		most, drained := 0, false
		for sctx.Err() == nil {
			if drained {
				most = max(most, api.Stats().Concurrent)
			} else if s, err := js.Stream(sctx, dispatcher.PlanStream); err == nil && s.CachedInfo().State.Msgs == 2 {
				drained = true
			}
			time.Sleep(time.Millisecond)
		}
		after <- most
	}()
	require.NoError(t, b.client.WaitAll(ctx, rs, func(o Outcome, err error) {}))
	stop()
	most := <-after
	st := api.Stats()
	t.Logf("quota 4 -> 2 over 3-ms links with captchas ending: most at once %d, after the retiring threads left %d; paid %d", st.MaxConcurrent, most, st.Submitted)
	paidOnceAcross(t, tasks, st)
	require.LessOrEqual(t, st.MaxConcurrent, 4)
	require.LessOrEqual(t, most, 2, "the smaller quota holds once the larger's captchas ended")
}

// An operator adds a consumer of their own on the plan stream (to look
// at it) that acks nothing. Under the interest retention a retiring
// thread's ack no longer removes it: the stream keeps it while the plan's
// consumer has it acked, and the next larger quota takes it back as a
// live thread no worker can take. The quota of 4 then has 2 threads to
// hand out, at each SetPlan(4), for as long as that consumer stays.
func TestBreakASecondConsumerOnThePlanStreamKeepsTheQuotasThreads(t *testing.T) {
	t.Parallel()
	knownHole(t, "main: with an operator's consumer on the plan stream, 4 -> 2 -> 4 leaves the plan's consumer 2 threads (stream 4) after two SetPlan(4)")
	b := setup(t, Topology{Memory: underRace})
	ctx := testContext(t)
	admin, err := NewAdmin(b.connect(t), AdminConfig{Topology: b.top})
	require.NoError(t, err)
	require.NoError(t, admin.SetPlan(ctx, 4))
	js, err := jetStreamOf(b.connect(t), b.top)
	require.NoError(t, err)
	_, err = js.CreateOrUpdateConsumer(ctx, dispatcher.PlanStream, jetstream.ConsumerConfig{Durable: "operator-look", AckPolicy: jetstream.AckExplicitPolicy})
	require.NoError(t, err)
	gate := &dispatcher.PlanGate{JS: js}
	held, err := gate.Acquire(ctx, 4, time.Second, time.Now())
	require.NoError(t, err)
	require.Len(t, held, 4)
	require.NoError(t, admin.SetPlan(ctx, 2))
	gate.Refresh()
	_, err = gate.Acquire(ctx, 1, 10*time.Millisecond, time.Now())
	require.NoError(t, err)
	for _, th := range held {
		th.Release()
	}
	c, err := js.Consumer(ctx, dispatcher.PlanStream, dispatcher.PlanConsumer)
	require.NoError(t, err)
	// The retiring two acked, the other two given back (a Nak leaves
	// them pending until the consumer hands them out again).
	require.Eventually(t, func() bool {
		ci, err := c.Info(ctx)
		return err == nil && ci.NumAckPending == 2
	}, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, admin.SetPlan(ctx, 4))
	require.NoError(t, admin.SetPlan(ctx, 4))
	ci, err := c.Info(ctx)
	require.NoError(t, err)
	s, err := js.Stream(ctx, dispatcher.PlanStream)
	require.NoError(t, err)
	t.Logf("4 -> 2 -> 4 with an operator's consumer on the plan stream: plan stream %d threads, the plan's consumer %d to hand out",
		s.CachedInfo().State.Msgs, ci.NumPending+uint64(ci.NumAckPending))
	require.Equal(t, uint64(4), ci.NumPending+uint64(ci.NumAckPending), "the quota of 4 has 4 threads to hand out")
}

// startSlowWorkers starts n workers of 30 threads solving with sc, each
// on its own connection whose writes take lag (slowLink).
func startSlowWorkers(t *testing.T, b *bundle, sc solver.Solver, n int, lag time.Duration) {
	t.Helper()
	for range n {
		nc, err := nats.Connect("", nats.InProcessServer(slowLink{ns: b.ns, lag: lag}))
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		b.startWorkerOn(t, nc, WorkerConfig{Solver: sc, Threads: 30})
	}
}
