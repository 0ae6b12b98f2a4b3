package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream/internal/dispatcher"
	"github.com/captchaq/captchaq/stream/internal/jscall"
	"github.com/captchaq/captchaq/stream/internal/taskstore"
	"github.com/captchaq/captchaq/stream/internal/topology"
	"github.com/captchaq/captchaq/stream/wire"
)

// These tests attack the guarantee that every accepted task ends with
// exactly one outcome of its own, as a producer with the shipped nats.conf
// roles could, and as an unlucky operator would meet it: a full stream, a
// worker frozen before its ack, a late redelivery.

// attack is the shipped nats.conf with the topology made by the admin, a
// victim producer (a Client), an attacker holding the same producer role
// with a plain JetStream client, the admin, and a solver that counts solves.
type attack struct {
	ns       *server.Server
	victim   *Client
	attacker jetstream.JetStream
	astream  jetstream.Stream
	admin    jetstream.JetStream
	solves   atomic.Int32
}

func attackSetup(t *testing.T) *attack {
	t.Helper()
	a := &attack{ns: authServer(t)}
	ctx := testContext(t)
	vnc, _ := roleConn(t, a.ns, "producer")
	var err error
	a.victim, err = NewClient(ctx, vnc, ClientConfig{Name: "victim"})
	require.NoError(t, err)
	anc, _ := roleConn(t, a.ns, "producer")
	a.attacker, err = jetstream.New(anc)
	require.NoError(t, err)
	a.astream, err = a.attacker.Stream(ctx, DefaultStream)
	require.NoError(t, err)
	adm, _ := roleConn(t, a.ns, "admin")
	a.admin, err = jetstream.New(adm)
	require.NoError(t, err)
	return a
}

// solver answers each captcha with a token naming its site key and counts
// the solves (what the service bills).
func (a *attack) solver() solver.Solver {
	return countingSolver(&a.solves)
}

func countingSolver(n *atomic.Int32) solver.Solver {
	return solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
		k := n.Add(1)
		b, _ := json.Marshal(fmt.Sprintf("tok-%s-%d", req.Params["sitekey"], k))
		return solver.Answer{Solution: b, CaptchaID: strconv.Itoa(int(k))}, nil
	})
}

// startWorker runs a worker pool as the worker role until the test ends.
func (a *attack) startWorker(t *testing.T) {
	t.Helper()
	nc, _ := roleConn(t, a.ns, "worker")
	w, err := NewWorker(testContext(t), nc, WorkerConfig{Solver: a.solver(), Threads: 4, IdleCheck: 50 * time.Millisecond})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// publishRaw publishes a task message as a plain client would.
func publishRaw(ctx context.Context, t *testing.T, js jetstream.JetStream, subject string, body string, hdr map[string]string) *jetstream.PubAck {
	t.Helper()
	m := nats.NewMsg(subject)
	m.Data = []byte(body)
	for k, v := range hdr {
		m.Header.Set(k, v)
	}
	ack, err := js.PublishMsg(ctx, m)
	require.NoError(t, err, subject)
	return ack
}

// raw is a plain JetStream client of the bundle's server and its CAPTCHA
// stream, for what a test publishes or reads as a raw client would.
func (b *bundle) raw(t *testing.T) (jetstream.JetStream, jetstream.Stream) {
	t.Helper()
	js, err := jetstream.New(b.nc)
	require.NoError(t, err)
	s, err := js.Stream(testContext(t), b.top.withDefaults().Stream)
	require.NoError(t, err)
	return js, s
}

// outcomesOf returns every outcome stored for generation gen of id.
func outcomesOf(ctx context.Context, t testing.TB, s jetstream.Stream, id string, gen uint64) []Outcome {
	t.Helper()
	var out []Outcome
	require.NoError(t, jscall.Walk(ctx, s, wire.ResultSubject(id), 0, 0, func(m *jetstream.RawStreamMsg) {
		if taskstore.GenOf(m.Header) == gen {
			var o Outcome
			require.NoError(t, json.Unmarshal(m.Data, &o))
			out = append(out, o)
		}
	}))
	return out
}

// waitOutcome waits, up to 20 s, for generation gen of id to have an
// outcome stored, and returns it.
func waitOutcome(ctx context.Context, t testing.TB, s jetstream.Stream, id string, gen uint64) Outcome {
	t.Helper()
	var got []Outcome
	require.Eventually(t, func() bool {
		got = outcomesOf(ctx, t, s, id, gen)
		return len(got) > 0
	}, 20*time.Second, 20*time.Millisecond, "no outcome for %s generation %d", id, gen)
	require.Len(t, got, 1, "exactly one outcome for %s generation %d", id, gen)
	return got[0]
}

const turnstileBody = `{"method":"turnstile","params":{"sitekey":"0x4AAAAAAAB","pageurl":"https://shop.example/checkout"}}`

// A producer that occupies the message ids workers once used for the
// victim's outcome and dead letter changes nothing: the victim gets its
// outcome, and the junk tasks end as invalid, unsolved.
func TestProducerCannotSuppressAnOutcome(t *testing.T) {
	t.Parallel()
	a := attackSetup(t)
	ctx := testContext(t)
	r, err := a.victim.Submit(ctx, turnstileTask("victim-1"))
	require.NoError(t, err)
	m, err := a.astream.GetLastMsgForSubject(ctx, wire.TaskSubjectsFor("victim-1"))
	require.NoError(t, err, "producers may read the stream")
	gen := strconv.FormatUint(m.Sequence, 10)
	j1 := publishRaw(ctx, t, a.attacker, "captcha.tasks.fast.normal.junk-1", turnstileBody, map[string]string{"Nats-Msg-Id": "result.victim-1." + gen})
	j2 := publishRaw(ctx, t, a.attacker, "captcha.tasks.fast.normal.junk-2", turnstileBody, map[string]string{"Nats-Msg-Id": "dead.victim-1." + gen})

	a.startWorker(t)
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	out, err := a.victim.waitGen(wctx, "victim-1", r.Seq)
	require.NoError(t, err)
	require.Equal(t, StatusSolved, out.Status)
	for id, ack := range map[string]*jetstream.PubAck{"junk-1": j1, "junk-2": j2} {
		o := waitOutcome(ctx, t, a.astream, id, ack.Sequence)
		require.Equal(t, StatusDead, o.Status, id)
		require.Equal(t, string(retry.ReasonInvalidTask), o.Reason, id)
		require.Equal(t, CodeInvalidEnvelope, o.Error, id)
		require.Contains(t, o.Detail, "Nats-Msg-Id", id)
	}
	require.Equal(t, int32(1), a.solves.Load(), "only the victim's task was paid for")
}

// Two more messages on the victim's id, one with another message id, one
// naming the victim in its id header, neither strand the victim's task nor
// hand it the attacker's token; both end unsolved.
func TestSecondSubmissionNeverStrandsOrHijacks(t *testing.T) {
	t.Parallel()
	a := attackSetup(t)
	ctx := testContext(t)
	r, err := a.victim.Submit(ctx, turnstileTask("order-7"))
	require.NoError(t, err)
	evil := `{"method":"turnstile","params":{"sitekey":"0xATTACKER","pageurl":"https://evil.example/"}}`
	x1 := publishRaw(ctx, t, a.attacker, "captcha.tasks.fast.normal.order-7", evil, map[string]string{"Nats-Msg-Id": "order-7-again"})
	x2 := publishRaw(ctx, t, a.attacker, "captcha.tasks.fast.normal.other-1", evil, map[string]string{"Nats-Msg-Id": "other-1", wire.HeaderTaskID: "order-7"})
	x3 := publishRaw(ctx, t, a.attacker, "captcha.tasks.fast.normal.order-7", evil,
		map[string]string{"Nats-Msg-Id": wire.ReplayMsgID("order-7", "1"), wire.HeaderReplayedBy: "1"})

	a.startWorker(t)
	out, err := a.victim.Wait(ctx, "order-7")
	require.NoError(t, err)
	require.Contains(t, out.Text(), "0x4AAAAAAAB", "the victim's own token")
	out, err = a.victim.waitGen(ctx, "order-7", r.Seq)
	require.NoError(t, err)
	require.Contains(t, out.Text(), "0x4AAAAAAAB")
	for _, c := range []struct {
		id  string
		ack *jetstream.PubAck
	}{{"order-7", x1}, {"other-1", x2}, {"order-7", x3}} {
		o := waitOutcome(ctx, t, a.astream, c.id, c.ack.Sequence)
		require.Equal(t, CodeInvalidEnvelope, o.Error, "%s %d: %s", c.id, c.ack.Sequence, o.Detail)
	}
	require.Equal(t, int32(1), a.solves.Load(), "nothing of the attacker's was solved")
	// Wait on the id still names the victim's submission, not the later forged ones.
	out, err = a.victim.Wait(ctx, "order-7")
	require.NoError(t, err)
	require.Contains(t, out.Text(), "0x4AAAAAAAB")
}

// Two real submissions of one id running at once (a replay while an older
// one still waits, or an id reused after the duplicate window) each end
// with an outcome of their own.
func TestTwoGenerationsOfOneIDEachGetAnOutcome(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{DuplicateWindow: time.Second})
	ctx := testContext(t)
	js, s := b.raw(t)
	first := publishRaw(ctx, t, js, "captcha.tasks.fast.normal.twice", turnstileBody, map[string]string{"Nats-Msg-Id": "twice"})
	// The duplicate window has to pass for the id to be taken again.
	var second *jetstream.PubAck
	require.Eventually(t, func() bool {
		second = publishRaw(ctx, t, js, "captcha.tasks.fast.normal.twice", turnstileBody, map[string]string{"Nats-Msg-Id": "twice"})
		return !second.Duplicate
	}, 10*time.Second, 50*time.Millisecond)
	var solves atomic.Int32
	b.startWorker(t, WorkerConfig{Solver: countingSolver(&solves), Threads: 2})
	for _, ack := range []*jetstream.PubAck{first, second} {
		o := waitOutcome(ctx, t, s, "twice", ack.Sequence)
		require.Equal(t, StatusSolved, o.Status)
	}
	require.Equal(t, int32(2), solves.Load())
}

// A full stream refuses new tasks at once with an error that says so, and
// the workers still record the end of every task it accepted, each solved
// once.
func TestFullStreamRefusesNewTasksAndRecordsAccepted(t *testing.T) {
	t.Parallel()
	top := Topology{MaxBytes: 96 << 10}
	b := setup(t, top)
	ctx := testContext(t)
	var receipts []Receipt
	var full error
	for i := range 1000 {
		r, err := b.client.Submit(ctx, turnstileTask(fmt.Sprintf("f%03d", i)))
		if err != nil {
			full = err
			break
		}
		receipts = append(receipts, r)
	}
	require.ErrorIs(t, full, ErrStreamFull)
	var sf *StreamFullError
	require.ErrorAs(t, full, &sf)
	require.Contains(t, full.Error(), "--max-bytes")
	require.NotEmpty(t, receipts)
	_, err := b.client.SubmitAll(ctx, []Task{turnstileTask("batch-1"), turnstileTask("batch-2")})
	require.ErrorIs(t, err, ErrStreamFull, "a batch too")

	var solves atomic.Int32
	b.startWorker(t, WorkerConfig{Solver: countingSolver(&solves), Threads: 8})
	n := 0
	require.NoError(t, b.client.WaitAll(ctx, receipts, func(o Outcome, err error) {
		require.NoError(t, err, o.ID)
		n++
	}))
	require.Equal(t, len(receipts), n)
	require.Equal(t, int32(len(receipts)), solves.Load(), "each accepted task paid for once")
	info, err := b.client.s.Info(ctx)
	require.NoError(t, err)
	t.Logf("%d tasks filled %d-byte stream to %d bytes; after their records: %d bytes (%d per task)",
		len(receipts), top.MaxBytes, int64(info.State.Bytes), info.State.Bytes, int(info.State.Bytes)/len(receipts))
}

// A stream filled to the last byte by raw publishers, who keep no room,
// costs waiting, never a solve: a worker that cannot record an attempt
// does not start it. Room made, the tasks are solved.
func TestStreamFullToTheLastByteNeverPays(t *testing.T) {
	t.Parallel()
	top := Topology{MaxBytes: 32 << 10, AckWait: 3 * time.Second} // tasks refused for room come back every second
	b := setup(t, top)
	ctx := testContext(t)
	js, err := jetstream.New(b.nc)
	require.NoError(t, err)
	var seqs []uint64
	for i := 0; ; i++ {
		id := fmt.Sprintf("raw%03d", i)
		m := nats.NewMsg(wire.TaskSubject(LaneFast, wire.PriorityNormal, id))
		m.Data = []byte(turnstileBody)
		m.Header.Set(wire.HeaderMsgID, id)
		ack, err := js.PublishMsg(ctx, m)
		if err != nil {
			require.True(t, jscall.StreamRefusedFull(err), "refused for its size: %v", err)
			break
		}
		seqs = append(seqs, ack.Sequence)
	}
	logs := &lineCounter{want: "the stream is full"}
	var solves atomic.Int32
	b.startWorker(t, WorkerConfig{Solver: countingSolver(&solves), Threads: 4, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	require.Eventually(t, func() bool { return logs.count() >= 8 }, 20*time.Second, 10*time.Millisecond, "workers try and fail to record")
	require.Zero(t, solves.Load(), "nothing is solved that cannot be recorded")

	// Make room: the admin takes the newest half out.
	s, err := js.Stream(ctx, DefaultStream)
	require.NoError(t, err)
	gone := 0
	for _, seq := range seqs[len(seqs)/2:] {
		// A task may have left on its own meanwhile (ended by a worker and
		// acked, which removes it): its room is made all the same.
		if err := s.DeleteMsg(ctx, seq); err != nil {
			require.ErrorContains(t, err, "not found", "sequence %d", seq)
			gone++
		}
	}
	t.Logf("%d of the %d tasks taken out had already left", gone, len(seqs)-len(seqs)/2)
	outcomes := func() int {
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(wire.SubjectResults+".*"))
		require.NoError(t, err)
		n := 0
		for _, k := range info.State.Subjects {
			n += int(k)
		}
		return n
	}
	require.Eventually(t, func() bool { return outcomes() >= 3 }, 20*time.Second, 10*time.Millisecond, "tasks are solved once there is room")
	// Every paid solve ends with its outcome stored.
	require.Eventually(t, func() bool { return int(solves.Load()) == outcomes() }, 20*time.Second, 10*time.Millisecond,
		"paid solves without an outcome: %d solves, %d outcomes", solves.Load(), outcomes())
}

// lineCounter counts the log lines that contain want.
type lineCounter struct {
	want string
	mu   sync.Mutex
	n    int
}

func (c *lineCounter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n += strings.Count(string(p), c.want)
	return len(p), nil
}

func (c *lineCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// JetStream does not check where a push consumer delivers against its
// creator's permissions: one delivering onto the plan's subject would add
// plan threads. A producer may create no consumer, so it cannot.
func TestProducerCannotInflateThePlan(t *testing.T) {
	t.Parallel()
	a := attackSetup(t)
	ctx := testContext(t)
	require.NoError(t, SetPlan(ctx, a.admin.Conn(), Topology{}, 2))
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err := a.astream.CreateOrUpdatePushConsumer(cctx, jetstream.ConsumerConfig{
		Name: "inflate", DeliverSubject: dispatcher.PlanSubject, AckPolicy: jetstream.AckNonePolicy, DeliverPolicy: jetstream.DeliverAllPolicy})
	cancel()
	require.Error(t, err, "producers may not create consumers")
	for i := range 6 {
		_, err := a.victim.Submit(ctx, turnstileTask(fmt.Sprintf("pl%d", i)))
		require.NoError(t, err)
	}
	ps, err := a.admin.Stream(ctx, dispatcher.PlanStream)
	require.NoError(t, err)
	info, err := ps.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(2), info.State.Msgs, "the plan holds exactly the threads the admin set")
	n, err := PlanThreads(ctx, a.admin.Conn(), Topology{})
	require.NoError(t, err)
	require.Equal(t, 2, n)
}

// A producer's JetStream headers never reach the workers' own writes: a
// task that pins the stream's last sequence still gets its dead letter and
// outcome, and headers captchaq's workers set are the workers' values.
func TestReservedHeadersNeverReachTheDeadLetter(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	js, s := b.raw(t)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	ack := publishRaw(ctx, t, js, "captcha.tasks.fast.normal.pin-1", `{"method":"turnstile","prority":"high","params":{}}`, map[string]string{
		"Nats-Msg-Id": "pin-1", "Nats-Expected-Last-Sequence": strconv.FormatUint(info.State.LastSeq, 10),
		wire.HeaderReason: "forged", wire.HeaderGen: "1", wire.HeaderAttempts: "99", wire.HeaderClient: "raw-producer", "X-Trace": "abc"})
	b.startWorker(t, WorkerConfig{Solver: tokenSolver()})
	o := waitOutcome(ctx, t, s, "pin-1", ack.Sequence)
	require.Equal(t, string(retry.ReasonInvalidTask), o.Reason)
	require.Contains(t, o.Detail, wire.HeaderGen, "the outcome says what is wrong: a generation only a worker's moved copy names")
	d, err := b.client.DeadLetterOf(ctx, "pin-1")
	require.NoError(t, err)
	require.Equal(t, retry.ReasonInvalidTask, d.Reason)
	dm, err := s.GetMsg(ctx, d.Seq)
	require.NoError(t, err)
	require.Empty(t, dm.Header.Get("Nats-Expected-Last-Sequence"))
	require.Equal(t, string(retry.ReasonInvalidTask), dm.Header.Get(wire.HeaderReason))
	require.Equal(t, strconv.FormatUint(ack.Sequence, 10), dm.Header.Get(wire.HeaderGen))
	require.Equal(t, "0", dm.Header.Get(wire.HeaderAttempts))
	require.Equal(t, "raw-producer", dm.Header.Get(wire.HeaderClient), "the producer's name stays")
	require.Equal(t, "abc", dm.Header.Get("X-Trace"), "headers of the producer's own stay")
}

// frozenTask submits task id to a stream with a one-second ack wait and
// takes its first delivery off the workers' fast consumer without ever
// acking it, as a worker that froze would.
func frozenTask(t *testing.T, id string) (*bundle, jetstream.JetStream, jetstream.Stream, Receipt) {
	t.Helper()
	b := setup(t, Topology{AckWait: time.Second})
	ctx := testContext(t)
	js, err := jetstream.New(b.nc)
	require.NoError(t, err)
	s, err := EnsureTopology(ctx, js.Conn(), b.top, false)
	require.NoError(t, err)
	r, err := b.client.Submit(ctx, turnstileTask(id))
	require.NoError(t, err)
	c, err := js.Consumer(ctx, DefaultStream, topology.ConsumerName(LaneFast, wire.PriorityNormal))
	require.NoError(t, err)
	batch, err := c.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	require.NoError(t, err)
	n := 0
	for range batch.Messages() {
		n++
	}
	require.Equal(t, 1, n)
	return b, js, s, r
}

func publishRecord(ctx context.Context, t *testing.T, js jetstream.JetStream, subject string, gen uint64, v any) uint64 {
	t.Helper()
	return publishRecordWith(ctx, t, js, subject, gen, v, nil)
}

// publishRecordWith is publishRecord with headers h besides the
// generation's, and returns the record's sequence.
func publishRecordWith(ctx context.Context, t *testing.T, js jetstream.JetStream, subject string, gen uint64, v any, h nats.Header) uint64 {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	m := nats.NewMsg(subject)
	m.Data = b
	for k, vs := range h {
		m.Header[k] = vs
	}
	m.Header.Set(wire.HeaderGen, strconv.FormatUint(gen, 10))
	ack, err := js.PublishMsg(ctx, m)
	require.NoError(t, err)
	return ack.Sequence
}

// A worker that stored a generation's outcome (and, dead, its dead letter)
// and froze before its ack: the next delivery, whenever it comes, stores
// nothing again and solves nothing.
func TestOneOutcomePerGenerationAfterALostAck(t *testing.T) {
	t.Parallel()
	for _, kind := range []EventKind{EventDead, EventSolved} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			b, js, s, r := frozenTask(t, "frozen")
			ctx := testContext(t)
			now := time.Now()
			at := Event{Kind: EventAttempt, Gen: r.Seq, Attempts: 1, Delivery: 1, Worker: "frozen-worker", At: now}
			publishRecord(ctx, t, js, wire.EventSubject("frozen"), r.Seq, at)
			if kind == EventDead {
				publishRecord(ctx, t, js, wire.EventSubject("frozen"), r.Seq, Event{Kind: EventDead, Gen: r.Seq, Attempts: 1, Delivery: 1,
					Worker: "frozen-worker", At: now, Reason: string(retry.ReasonPermanent), LastCode: "ERROR_PAGEURL", Code: "ERROR_PAGEURL"})
				publishRecord(ctx, t, js, wire.DeadSubject("frozen"), r.Seq, json.RawMessage(turnstileBody))
				publishRecord(ctx, t, js, wire.ResultSubject("frozen"), r.Seq, Outcome{ID: "frozen", Status: StatusDead, Error: "ERROR_PAGEURL", Reason: "permanent", Attempts: 1})
			} else {
				publishRecord(ctx, t, js, wire.EventSubject("frozen"), r.Seq, Event{Kind: EventSolved, Gen: r.Seq, Attempts: 1, Delivery: 1,
					Worker: "frozen-worker", At: now, ExpiresAt: now.Add(5 * time.Minute)})
				publishRecord(ctx, t, js, wire.ResultSubject("frozen"), r.Seq, Outcome{ID: "frozen", Status: StatusSolved, Solution: json.RawMessage(`"tok"`),
					Attempts: 1, ExpiresAt: now.Add(5 * time.Minute)})
			}
			var solves atomic.Int32
			b.startWorker(t, WorkerConfig{Solver: countingSolver(&solves)})
			c, err := js.Consumer(ctx, DefaultStream, topology.ConsumerName(LaneFast, wire.PriorityNormal))
			require.NoError(t, err)
			require.Eventually(t, func() bool {
				info, err := c.Info(ctx)
				return err == nil && info.NumAckPending == 0 && info.NumPending == 0 && info.AckFloor.Stream >= r.Seq
			}, 20*time.Second, 10*time.Millisecond, "the redelivery is acked")
			require.Len(t, outcomesOf(ctx, t, s, "frozen", r.Seq), 1, "one outcome")
			dls := 0
			require.NoError(t, jscall.Walk(ctx, s, wire.DeadSubject("frozen"), 0, 0, func(*jetstream.RawStreamMsg) { dls++ }))
			if kind == EventDead {
				require.Equal(t, 1, dls, "one dead letter")
			} else {
				require.Zero(t, dls)
			}
			require.Zero(t, solves.Load())
		})
	}
}

// A worker that froze after recording a solve, redelivered after the
// token's lifetime, stores the generation's outcome (solved, expired)
// instead of acking with none: a wire client waiting for it learns the end.
func TestLateRedeliveryStoresAnExpiredOutcome(t *testing.T) {
	t.Parallel()
	b, js, s, r := frozenTask(t, "late")
	ctx := testContext(t)
	past := time.Now().Add(-time.Minute)
	publishRecord(ctx, t, js, wire.EventSubject("late"), r.Seq, Event{Kind: EventAttempt, Gen: r.Seq, Attempts: 1, Delivery: 1, Worker: "frozen", At: past})
	publishRecord(ctx, t, js, wire.EventSubject("late"), r.Seq, Event{Kind: EventSolved, Gen: r.Seq, Attempts: 1, Delivery: 1, Worker: "frozen",
		At: past, ExpiresAt: past.Add(30 * time.Second), CaptchaID: "77", Method: "turnstile"})
	var solves atomic.Int32
	b.startWorker(t, WorkerConfig{Solver: countingSolver(&solves)})
	o := waitOutcome(ctx, t, s, "late", r.Seq)
	require.Equal(t, StatusSolved, o.Status)
	require.Empty(t, o.Solution)
	require.Equal(t, "77", o.CaptchaID)
	_, err := b.client.waitGen(ctx, "late", r.Seq)
	require.ErrorIs(t, err, ErrTokenExpired)
	require.Zero(t, solves.Load(), "the expired solve is not paid for again")
}

// A worker that stored a solve's token and stopped before recording the
// solve (its attempt is the last event), or after recording it but before
// storing the outcome: the next delivery records the solve from the token
// stream and stores the outcome, and the service is not paid again.
func TestRedeliveryRecordsASolveFromItsStoredToken(t *testing.T) {
	t.Parallel()
	for _, recorded := range []bool{false, true} {
		t.Run(fmt.Sprintf("solve recorded %v", recorded), func(t *testing.T) {
			t.Parallel()
			b, js, s, r := frozenTask(t, "tokened")
			ctx := testContext(t)
			now := time.Now()
			attempt := publishRecord(ctx, t, js, wire.EventSubject("tokened"), r.Seq, Event{Kind: EventAttempt, Gen: r.Seq, Attempts: 1, Delivery: 1, Worker: "frozen", At: now})
			out := Outcome{ID: "tokened", Status: StatusSolved, Solution: json.RawMessage(`"the-stored-token"`), Attempts: 1,
				SolveSeconds: 1.5, ExpiresAt: now.Add(5 * time.Minute), Method: "turnstile", CaptchaID: "4242", SolvedAt: now}
			// As the frozen worker stored it: naming its attempt.
			publishRecordWith(ctx, t, js, wire.TokenSubject("tokened", r.Seq), r.Seq, out, nats.Header{wire.HeaderAttemptSeq: {strconv.FormatUint(attempt, 10)}})
			if recorded {
				publishRecord(ctx, t, js, wire.EventSubject("tokened"), r.Seq, Event{Kind: EventSolved, Gen: r.Seq, Attempts: 1, Delivery: 1,
					Worker: "frozen", At: now, ExpiresAt: out.ExpiresAt, CaptchaID: "4242"})
			}
			var solves atomic.Int32
			b.startWorker(t, WorkerConfig{Solver: countingSolver(&solves)})
			o := waitOutcome(ctx, t, s, "tokened", r.Seq)
			require.Equal(t, StatusSolved, o.Status)
			require.Empty(t, o.Solution, "the outcome in the CAPTCHA stream has no token")
			got, err := b.client.Wait(ctx, "tokened")
			require.NoError(t, err)
			require.Equal(t, `"the-stored-token"`, string(got.Solution))
			require.Equal(t, "4242", got.CaptchaID)
			require.Zero(t, solves.Load(), "the stored solve is not paid for again")
			solved := 0
			for _, ev := range b.events(t, "tokened") {
				if ev.Kind == EventSolved {
					solved++
					require.Equal(t, "4242", ev.CaptchaID)
					require.Equal(t, 1, ev.Attempts)
				}
			}
			want := 0 // the outcome records the solve
			if recorded {
				want = 1 // the one an older worker wrote
			}
			require.Equal(t, want, solved, "no solved event of its own")
		})
	}
}

// Subjects under captcha.tasks that no consumer reads are refused at
// publish: nothing is accepted that would never be handled.
func TestOffContractSubjectsAreRefused(t *testing.T) {
	t.Parallel()
	a := attackSetup(t)
	ctx := testContext(t)
	for _, subj := range []string{"captcha.tasks.fast.urgent.x", "captcha.tasks.x", "captcha.tasks.fast.normal.a.b",
		"captcha.tasks.fast.normal", "captcha.tasks.medium.high.x"} {
		m := nats.NewMsg(subj)
		m.Data = []byte(turnstileBody)
		m.Header.Set(wire.HeaderMsgID, "x")
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := a.attacker.PublishMsg(pctx, m)
		cancel()
		require.Error(t, err, subj)
		require.True(t, errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders), "%s: %v", subj, err)
	}
	info, err := a.astream.Info(ctx, jetstream.WithSubjectFilter("captcha.>"))
	require.NoError(t, err)
	require.Equal(t, map[string]uint64{wire.SubjectAnchor: 1}, info.State.Subjects)
}

// A task whose id is invalid is never solved: it ends dead, invalid-task,
// on its own subject, which is where its submitter looks.
func TestInvalidIDIsNeverSolved(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	js, s := b.raw(t)
	var solves atomic.Int32
	b.startWorker(t, WorkerConfig{Solver: countingSolver(&solves)})
	for _, id := range []string{strings.Repeat("a", 65), "order#1", "café"} {
		ack := publishRaw(ctx, t, js, "captcha.tasks.fast.normal."+id, turnstileBody, map[string]string{"Nats-Msg-Id": id})
		o := waitOutcome(ctx, t, s, id, ack.Sequence)
		require.Equal(t, StatusDead, o.Status, id)
		require.Equal(t, string(retry.ReasonInvalidTask), o.Reason, id)
		require.Contains(t, o.Detail, "id", id)
	}
	require.Zero(t, solves.Load())
}

// A worker that stops hands its tasks back at once: another worker takes
// them long before the ack wait, and the audit trail says why.
func TestStoppedWorkerHandsBackAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{}) // ack wait 30 s: the test's 60 s would not see two
	ctx := testContext(t)
	started := make(chan struct{}, 4)
	blocking := solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
		started <- struct{}{}
		<-ctx.Done()
		return solver.Answer{}, ctx.Err()
	})
	first := b.startWorker(t, WorkerConfig{Solver: blocking, Threads: 2, ShutdownGrace: time.Millisecond})
	r1, err := b.client.Submit(ctx, turnstileTask("held-1"))
	require.NoError(t, err)
	r2, err := b.client.Submit(ctx, turnstileTask("held-2"))
	require.NoError(t, err)
	<-started
	<-started
	first.stop()
	require.NoError(t, <-first.done)
	first.done <- nil // for the cleanup

	wctx, cancel := context.WithTimeout(ctx, 10*time.Second) // a third of the ack wait
	defer cancel()
	b.startWorker(t, WorkerConfig{Solver: tokenSolver()})
	for _, r := range []Receipt{r1, r2} {
		out, err := b.client.waitGen(wctx, r.ID, r.Seq)
		require.NoError(t, err, r.ID)
		require.Equal(t, 1, out.Attempts, "the hand-back spent no attempt")
	}
	evs := b.events(t, "held-1")
	require.Equal(t, EventHandback, evs[1].Kind)
	require.Equal(t, "SHUTDOWN", evs[1].Code)
}

// A worker the service refuses records that refusal on the tasks it hands
// back, not a shutdown, and hands them back at once.
func TestFatalRefusalRecordedAsSuch(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	release := make(chan struct{})
	var n atomic.Int32
	refusing := solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
		if n.Add(1) == 1 {
			select { // the other task is at the service, then the key is refused
			case <-release:
			case <-ctx.Done():
			}
			return solver.Answer{}, &solver.Error{Code: "ERROR_WRONG_USER_KEY", Class: retry.Fatal}
		}
		close(release)
		<-ctx.Done()
		return solver.Answer{}, ctx.Err()
	})
	w := b.startWorker(t, WorkerConfig{Solver: refusing, Threads: 2})
	for _, id := range []string{"fk-1", "fk-2"} {
		_, err := b.client.Submit(ctx, turnstileTask(id))
		require.NoError(t, err)
	}
	err := <-w.done
	w.done <- nil
	var fe *FatalError
	require.ErrorAs(t, err, &fe)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	b.startWorker(t, WorkerConfig{Solver: tokenSolver()})
	for _, id := range []string{"fk-1", "fk-2"} {
		_, err := b.client.Wait(wctx, id)
		require.NoError(t, err, id)
		evs := b.events(t, id)
		require.Equal(t, EventHandback, evs[1].Kind, id)
		require.Equal(t, "ERROR_WRONG_USER_KEY", evs[1].Code, id)
	}
}

// Nor can a producer hide an owner's cancel behind a forged record of its
// own, published after it on the same subject: the worker looks for a
// valid record among all of the generation's, not only the last.
func TestProducerCannotSuppressAnothersCancel(t *testing.T) {
	t.Parallel()
	a := attackSetup(t)
	ctx := testContext(t)
	solved := make(chan error, 1)
	go func() {
		_, err := a.victim.Solve(ctx, turnstileTask("hid-1"))
		solved <- err
	}()
	var ti TaskInfo
	require.Eventually(t, func() bool {
		var err error
		ti, err = a.victim.TaskOf(ctx, "hid-1")
		return err == nil && ti.Status == TaskQueued
	}, 10*time.Second, 10*time.Millisecond)
	_, err := a.victim.Cancel(ctx, "hid-1", "changed my mind")
	require.NoError(t, err)
	for i := range 3 {
		forged, _ := json.Marshal(wire.CancelRecord{ID: "hid-1", Gen: ti.Gen, By: "attacker", Secret: fmt.Sprintf("guess-%d", i)})
		_, err = a.attacker.Publish(ctx, wire.CancelSubject("hid-1", ti.Gen), forged)
		require.NoError(t, err)
	}

	a.startWorker(t)
	require.ErrorIs(t, <-solved, ErrNotSolved, "the owner's cancel was hidden")
	require.Equal(t, int32(0), a.solves.Load(), "a canceled task was paid for")
}

// A producer cancels only a task it submitted with Solve: another
// producer's cancel record is ignored (no secret), and the admin's subject
// is refused to it.
func TestProducerCannotCancelAnothersTask(t *testing.T) {
	t.Parallel()
	a := attackSetup(t)
	ctx := testContext(t)
	r, err := a.victim.Submit(ctx, turnstileTask("mine-1"))
	require.NoError(t, err)
	forged, _ := json.Marshal(wire.CancelRecord{ID: "mine-1", Gen: r.Seq, By: "attacker", Secret: "guess"})
	_, err = a.attacker.Publish(ctx, wire.CancelSubject("mine-1", r.Seq), forged)
	require.NoError(t, err, "producers may publish owners' cancels")
	anc, errs := roleConn(t, a.ns, "producer")
	ajs, err := jetstream.New(anc)
	require.NoError(t, err)
	denied(t, errs, wire.CancelRecordSubject("mine-1"), func(ctx context.Context) error {
		_, err := ajs.Publish(ctx, wire.CancelRecordSubject("mine-1"), forged)
		return err
	})

	// The owner's own cancel, from Solve, holds.
	solved := make(chan error, 1)
	go func() {
		_, err := a.victim.Solve(ctx, turnstileTask("mine-2"))
		solved <- err
	}()
	require.Eventually(t, func() bool {
		ti, err := a.victim.TaskOf(ctx, "mine-2")
		return err == nil && ti.Status == TaskQueued
	}, 10*time.Second, 10*time.Millisecond)
	_, err = a.victim.Cancel(ctx, "mine-2", "changed my mind")
	require.NoError(t, err)

	a.startWorker(t)
	out, err := a.victim.waitGen(ctx, "mine-1", r.Seq)
	require.NoError(t, err, "the forged cancel changed nothing")
	require.Equal(t, StatusSolved, out.Status)
	err = <-solved
	require.ErrorIs(t, err, ErrNotSolved)
	require.Equal(t, int32(1), a.solves.Load())
}
