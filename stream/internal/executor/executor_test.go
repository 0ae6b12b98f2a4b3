package executor

// The executor against a store in memory (fakeStore): one delivery at a
// time, with the store's compare-and-set and the token's write-once kept
// as the CAPTCHA stream keeps them, so that what a delivery records and
// when it acks can be checked without a broker. The JetStream store and
// every path through a real broker are tested in package stream.

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream/internal/jscall"
	"github.com/captchaq/captchaq/stream/internal/taskstore"
	"github.com/captchaq/captchaq/stream/wire"
)

// storedRec is one record in the fake store.
type storedRec struct {
	seq     uint64
	subject string
	header  nats.Header
	data    []byte
}

// fakeStore is a taskstore.Store in memory: one stream's records of one
// task id, written by compare-and-set on the last sequence over them, and
// a token per generation written once.
type fakeStore struct {
	mu     sync.Mutex
	seq    uint64 // the stream's last sequence
	recs   []storedRec
	tokens map[uint64]taskstore.StoredToken
	// tokenSeq is the token stream's last sequence.
	tokenSeq uint64
	// beforeAppend, when set, runs before each append (another worker
	// writing meanwhile).
	beforeAppend func(s *fakeStore)
	// heartbeats are the workers' latest heartbeats, by name.
	heartbeats map[string]storedRec
}

var _ taskstore.Store = (*fakeStore)(nil)

func newFakeStore() *fakeStore { return &fakeStore{tokens: map[uint64]taskstore.StoredToken{}} }

// put stores a record on subject, as anyone may, without a check.
func (s *fakeStore) put(subject string, h nats.Header, data []byte) uint64 {
	s.seq++
	s.recs = append(s.recs, storedRec{seq: s.seq, subject: subject, header: h, data: data})
	return s.seq
}

// lastOver is the last sequence over the task's records.
func (s *fakeStore) lastOver(id string) uint64 {
	var last uint64
	for _, r := range s.recs {
		if wire.IDFromSubject(r.subject) == id && r.subject != wire.TaskSubject(wire.LaneFast, wire.PriorityNormal, id) {
			last = r.seq
		}
	}
	return last
}

func (s *fakeStore) LoadGen(_ context.Context, id string, gen uint64) (taskstore.GenState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := taskstore.GenState{Gen: gen}
	for _, r := range s.recs {
		if r.seq >= gen && wire.IDFromSubject(r.subject) == id && r.subject != wire.TaskSubject(wire.LaneFast, wire.PriorityNormal, id) {
			st.Fold(id, r.subject, r.header, r.data, r.seq)
		}
	}
	st.Seq = s.lastOver(id)
	return st, nil
}

func (s *fakeStore) Append(ctx context.Context, id string, expect uint64, msg *nats.Msg) (uint64, error) {
	if s.beforeAppend != nil {
		f := s.beforeAppend
		s.beforeAppend = nil
		f(s)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if last := s.lastOver(id); last != expect {
		return 0, fmt.Errorf("%w: last sequence %d, expected %d", taskstore.ErrConflict, last, expect)
	}
	return s.put(msg.Subject, msg.Header, msg.Data), nil
}

func (s *fakeStore) PutToken(_ context.Context, _ string, gen uint64, msg *nats.Msg, _ time.Duration, over uint64) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tokens[gen].Seq != over {
		return 0, taskstore.ErrTokenTaken
	}
	var out wire.Outcome
	if err := json.Unmarshal(msg.Data, &out); err != nil {
		return 0, err
	}
	attempt, _ := strconv.ParseUint(msg.Header.Get(wire.HeaderAttemptSeq), 10, 64)
	s.tokenSeq++
	s.tokens[gen] = taskstore.StoredToken{Out: out, Seq: s.tokenSeq, Attempt: attempt}
	return s.tokenSeq, nil
}

func (s *fakeStore) Token(_ context.Context, _ string, gen uint64) (taskstore.StoredToken, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	tok, ok := s.tokens[gen]
	return tok, ok, nil
}

func (s *fakeStore) AttemptAt(_ context.Context, id string, gen, seq uint64) (wire.Event, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.recs {
		if r.seq == seq && r.subject == wire.EventSubject(id) {
			ev, ok := wire.ParseEvent(r.data)
			return ev, ok && ev.Kind == wire.EventAttempt && ev.Gen == gen, nil
		}
	}
	return wire.Event{}, false, nil
}

func (s *fakeStore) CancelOf(_ context.Context, _ string, st taskstore.GenState, _ nats.Header) (*wire.CancelRecord, error) {
	return st.Cancel, nil
}

func (s *fakeStore) Heartbeat(_ context.Context, worker string) ([]byte, uint64, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	hb, ok := s.heartbeats[worker]
	return hb.data, hb.seq, ok, nil
}

func (s *fakeStore) HeartbeatPart(_ context.Context, worker string, seq uint64) ([]byte, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.recs {
		if r.seq == seq && r.subject == wire.HeartbeatSubject(worker) {
			return r.data, true, nil
		}
	}
	return nil, false, nil
}

// heartbeat stores info as the latest heartbeat of its worker.
func (s *fakeStore) heartbeat(t *testing.T, info wire.WorkerInfo) {
	b, err := json.Marshal(info)
	require.NoError(t, err)
	s.mu.Lock()
	defer s.mu.Unlock()
	seq := s.put(wire.HeartbeatSubject(info.Name), nil, b)
	if s.heartbeats == nil {
		s.heartbeats = map[string]storedRec{}
	}
	s.heartbeats[info.Name] = storedRec{seq: seq, data: b}
}

// splitHeartbeat stores info as the latest heartbeat of its worker, split:
// a message for each of parts first (Part set), then info naming them.
func (s *fakeStore) splitHeartbeat(t *testing.T, info wire.WorkerInfo, parts ...[]wire.HeldTask) {
	for _, p := range parts {
		part := info
		part.Tasks, part.Part = p, true
		b, err := json.Marshal(part)
		require.NoError(t, err)
		s.mu.Lock()
		info.HeldParts = append(info.HeldParts, s.put(wire.HeartbeatSubject(info.Name), nil, b))
		s.mu.Unlock()
		info.Held += len(p)
	}
	s.heartbeat(t, info)
}

func (s *fakeStore) VerifyReplayOf(context.Context, string, uint64, time.Time, nats.Header, func() (wire.Task, error)) error {
	return fmt.Errorf("%w: no dead letters here", taskstore.ErrForged)
}

// events are the events stored for the task, in order.
func (s *fakeStore) events(t *testing.T, id string) []wire.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []wire.Event
	for _, r := range s.recs {
		if r.subject == wire.EventSubject(id) {
			ev, ok := wire.ParseEvent(r.data)
			require.True(t, ok)
			out = append(out, ev)
		}
	}
	return out
}

// outcome is the outcome stored for the task, if any.
func (s *fakeStore) outcome(t *testing.T, id string) (wire.Outcome, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.recs {
		if r.subject == wire.ResultSubject(id) {
			var out wire.Outcome
			require.NoError(t, json.Unmarshal(r.data, &out))
			return out, true
		}
	}
	return wire.Outcome{}, false
}

// fakeMsg is a delivery of a task message; it remembers how it ended.
type fakeMsg struct {
	subject string
	header  nats.Header
	data    []byte
	md      jetstream.MsgMetadata
	mu      sync.Mutex
	ended   string // "ack", "nak", "nak <delay>", "term"
}

func (m *fakeMsg) end(how string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ended = how
	return nil
}

func (m *fakeMsg) how() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ended
}

func (m *fakeMsg) Metadata() (*jetstream.MsgMetadata, error) { md := m.md; return &md, nil }
func (m *fakeMsg) Data() []byte                              { return m.data }
func (m *fakeMsg) Headers() nats.Header                      { return m.header }
func (m *fakeMsg) Subject() string                           { return m.subject }
func (m *fakeMsg) Reply() string                             { return "" }
func (m *fakeMsg) Ack() error                                { return m.end("ack") }
func (m *fakeMsg) DoubleAck(context.Context) error           { return m.end("ack") }
func (m *fakeMsg) Nak() error                                { return m.end("nak") }
func (m *fakeMsg) NakWithDelay(d time.Duration) error        { return m.end("nak " + d.String()) }
func (m *fakeMsg) InProgress() error                         { return nil }
func (m *fakeMsg) Term() error                               { return m.end("term") }
func (m *fakeMsg) TermWithReason(string) error               { return m.end("term") }

// completeByAck is a Completer that acks at once.
type completeByAck struct{}

func (completeByAck) Complete(m jetstream.Msg, _ uint64, _ *slog.Logger) { _ = m.Ack() }

type roomy struct{}

func (roomy) Take(context.Context, time.Time) bool { return true }
func (roomy) Give()                                {}

type noThread struct{}

func (noThread) Release()               {}
func (noThread) AckWait() time.Duration { return 0 }
func (noThread) KeepAlive()             {}

type noSlot struct{}

func (noSlot) Solved() {}
func (noSlot) Detach() {}

type settled struct{}

func (settled) Settled(time.Duration) bool { return true }

// bundle is what a test of one delivery needs.
type bundle struct {
	x        *Executor
	hooks    *testHooks
	store    *fakeStore
	solves   int
	observed []wire.EventKind
}

// setup returns an executor on a fake store whose solver answers with
// answer (or fails with err), at a frozen clock.
func setup(t *testing.T, answer solver.Answer, err error) *bundle {
	t.Helper()
	b := &bundle{store: newFakeStore()}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	b.hooks = &testHooks{now: now, observe: func(ev wire.Event) { mu.Lock(); b.observed = append(b.observed, ev.Kind); mu.Unlock() }}
	b.x = &Executor{
		Hooks: b.hooks,
		Name:  "w1", Policy: retry.Policy{}.WithDefaults(),
		Solver: solver.Func(func(context.Context, solver.Request) (solver.Answer, error) {
			mu.Lock()
			b.solves++
			mu.Unlock()
			return answer, err
		}),
		TokenLifetimes: map[string]time.Duration{"turnstile": 300 * time.Second}, DefaultDeadline: 10 * time.Minute,
		AckWait: 30 * time.Second,
		Log:     slog.New(slog.DiscardHandler),
		Store:   b.store, Completer: completeByAck{}, Room: roomy{}, Held: &Held{}, Clock: &jscall.BrokerClock{}, Reach: settled{},
	}
	return b
}

// testHooks are the hooks of a worker that is not running: a frozen
// clock, a 10-s lease, no plan, no stop; observe and lookAgain, when set,
// receive what is observed and what the dispatcher is told to look at.
type testHooks struct {
	now       time.Time
	observe   func(wire.Event)
	lookAgain func(time.Duration, wire.Lane)
}

func (h *testHooks) Now() time.Time       { return h.now }
func (h *testHooks) Lease() time.Duration { return 10 * time.Second }
func (h *testHooks) Observe(ev wire.Event, _ wire.Task) {
	if h.observe != nil {
		h.observe(ev)
	}
}
func (h *testHooks) EarlyRelease(ctx context.Context, _ Thread) context.Context { return ctx }
func (h *testHooks) LookAgainAfter(d time.Duration, lane wire.Lane) {
	if h.lookAgain != nil {
		h.lookAgain(d, lane)
	}
}
func (h *testHooks) StopWith(string)                        {}
func (h *testHooks) StopCause() string                      { return "" }
func (h *testHooks) Refused(string)                         {}
func (h *testHooks) Abandon() context.Context               { return context.Background() }
func (h *testHooks) Lead(string, wire.Params) time.Duration { return 0 }

// deliver stores task as a task message of id and delivers it (number
// delivery), returning the delivery.
func (b *bundle) deliver(t *testing.T, id string, body string, number uint64) *fakeMsg {
	t.Helper()
	h := nats.Header{}
	h.Set(wire.HeaderMsgID, id)
	b.store.mu.Lock()
	gen := b.store.put(wire.TaskSubject(wire.LaneFast, wire.PriorityNormal, id), h, []byte(body))
	b.store.mu.Unlock()
	return b.redeliver(gen, id, h, body, number)
}

func (b *bundle) redeliver(gen uint64, id string, h nats.Header, body string, number uint64) *fakeMsg {
	return &fakeMsg{subject: wire.TaskSubject(wire.LaneFast, wire.PriorityNormal, id), header: h, data: []byte(body),
		md: jetstream.MsgMetadata{Sequence: jetstream.SequencePair{Stream: gen}, NumDelivered: number, Timestamp: b.x.Now()}}
}

const turnstile = `{"method":"turnstile","params":{"sitekey":"k","pageurl":"https://shop.example/p"}}`

func kinds(evs []wire.Event) []wire.EventKind {
	out := make([]wire.EventKind, len(evs))
	for i, ev := range evs {
		out[i] = ev.Kind
	}
	return out
}

func TestExecuteSolves(t *testing.T) {
	t.Parallel()
	b := setup(t, solver.Answer{Solution: json.RawMessage(`"tok"`), CaptchaID: "c1"}, nil)
	m := b.deliver(t, "a1", turnstile, 1)
	b.x.Execute(context.Background(), m, noThread{}, noSlot{})

	require.Equal(t, "ack", m.how(), "acked once the outcome is stored")
	require.Equal(t, 1, b.solves)
	require.Equal(t, []wire.EventKind{wire.EventAttempt}, kinds(b.store.events(t, "a1")), "the outcome is the record of the solve")
	out, ok := b.store.outcome(t, "a1")
	require.True(t, ok)
	require.Equal(t, wire.StatusSolved, out.Status)
	require.Empty(t, out.Solution, "the stream's outcome never holds the token")
	require.Equal(t, 1, out.Attempts)
	tok, found, _ := b.store.Token(context.Background(), "a1", 1)
	require.True(t, found)
	require.JSONEq(t, `"tok"`, string(tok.Out.Solution), "the token stream does")
	require.Equal(t, []wire.EventKind{wire.EventAttempt, wire.EventSolved}, b.observed)
}

func TestExecuteRetries(t *testing.T) {
	t.Parallel()
	b := setup(t, solver.Answer{}, &solver.Error{Code: "ERROR_CAPTCHA_UNSOLVABLE", Class: solver.Classify("ERROR_CAPTCHA_UNSOLVABLE"), Op: "res.php"})
	m := b.deliver(t, "r1", turnstile, 1)
	b.x.Execute(context.Background(), m, noThread{}, noSlot{})

	evs := b.store.events(t, "r1")
	require.Equal(t, []wire.EventKind{wire.EventAttempt, wire.EventRetry}, kinds(evs))
	require.Equal(t, "ERROR_CAPTCHA_UNSOLVABLE", evs[1].Code)
	require.True(t, strings.HasPrefix(m.how(), "nak "), "handed back for the retry's delay: %s", m.how())
	delay, err := time.ParseDuration(strings.TrimPrefix(m.how(), "nak "))
	require.NoError(t, err)
	require.Equal(t, evs[1].DelayMS, delay.Milliseconds(), "the delay the retry event records")
	_, ok := b.store.outcome(t, "r1")
	require.False(t, ok)
}

func TestExecuteDeadLettersAnInvalidTaskWithoutSolving(t *testing.T) {
	t.Parallel()
	b := setup(t, solver.Answer{Solution: json.RawMessage(`"tok"`)}, nil)
	m := b.deliver(t, "i1", `{"method":"turnstile","params":{"sitekey":"k"}}`, 1)
	b.x.Execute(context.Background(), m, noThread{}, noSlot{})

	require.Zero(t, b.solves, "an invalid task never reaches the service")
	require.Equal(t, "ack", m.how())
	out, ok := b.store.outcome(t, "i1")
	require.True(t, ok)
	require.Equal(t, wire.StatusDead, out.Status)
	require.Equal(t, string(retry.ReasonInvalidTask), out.Reason)
	require.Contains(t, out.Detail, "pageurl")
	var dead int
	for _, r := range b.store.recs {
		if r.subject == wire.DeadSubject("i1") {
			dead++
			require.Equal(t, strconv.Itoa(1), r.header.Get(wire.HeaderGen))
		}
	}
	require.Equal(t, 1, dead, "one dead letter")
}

// A delivery whose attempt record loses the compare-and-set to another
// delivery of the same generation leaves the task to it: no solve.
func TestExecuteYieldsToAnotherDelivery(t *testing.T) {
	t.Parallel()
	b := setup(t, solver.Answer{Solution: json.RawMessage(`"tok"`)}, nil)
	m := b.deliver(t, "y1", turnstile, 1)
	b.store.beforeAppend = func(s *fakeStore) {
		other, _ := json.Marshal(wire.Event{Kind: wire.EventAttempt, Gen: 1, Attempts: 1, Worker: "w2", Delivery: 2})
		s.mu.Lock()
		s.put(wire.EventSubject("y1"), nil, other)
		s.mu.Unlock()
	}
	b.x.Execute(context.Background(), m, noThread{}, noSlot{})

	require.Zero(t, b.solves, "the other delivery holds the task")
	require.Equal(t, "nak 10s", m.how(), "handed back for a lease period (Lease): the other delivery ends it")
	require.Equal(t, []string{"w2"}, workers(b.store.events(t, "y1")))
}

func workers(evs []wire.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.Worker
	}
	return out
}

// A redelivery after a worker died between storing the token and the
// outcome records the solve from the token: the service is not paid again.
func TestExecuteFinishesFromTheToken(t *testing.T) {
	t.Parallel()
	b := setup(t, solver.Answer{Solution: json.RawMessage(`"second"`)}, nil)
	m := b.deliver(t, "k1", turnstile, 1)
	attempt, _ := json.Marshal(wire.Event{Kind: wire.EventAttempt, Gen: 1, Attempts: 1, Worker: "gone", Delivery: 1, At: b.x.Now()})
	attemptSeq := b.store.put(wire.EventSubject("k1"), nil, attempt)
	b.store.tokens[1] = taskstore.StoredToken{Seq: 1, Attempt: attemptSeq, Out: wire.Outcome{ID: "k1", Status: wire.StatusSolved,
		Solution: json.RawMessage(`"first"`), Attempts: 1, CaptchaID: "c1", SolvedAt: b.x.Now(), ExpiresAt: b.x.Now().Add(time.Minute)}}
	again := b.redeliver(1, "k1", m.header, turnstile, 2)
	b.x.Execute(context.Background(), again, noThread{}, noSlot{})

	require.Zero(t, b.solves)
	require.Equal(t, "ack", again.how())
	out, ok := b.store.outcome(t, "k1")
	require.True(t, ok)
	require.Equal(t, "c1", out.CaptchaID)
	require.Empty(t, out.Solution)
}

// A token on the generation's subject that names no attempt event of it
// (someone made the broker publish it there) is never taken for a solve of
// the pool: neither by a redelivery after a crash, nor by a solve whose own
// write finds it there. The solve's own token is stored over it and the
// outcome names the solve.
func TestExecuteRefusesAForeignToken(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		attempt func(b *bundle) uint64 // the attempt the foreign token names
		crashed bool
	}{
		{"naming nothing", func(*bundle) uint64 { return 0 }, false},
		{"naming nothing, after a crash", func(*bundle) uint64 { return 0 }, true},
		{"naming another generation's attempt", func(b *bundle) uint64 {
			rec, _ := json.Marshal(wire.Event{Kind: wire.EventAttempt, Gen: 99, Attempts: 1})
			return b.store.put(wire.EventSubject("p1"), nil, rec)
		}, false},
		{"naming the solve's own attempt", func(*bundle) uint64 { return 2 }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, solver.Answer{Solution: json.RawMessage(`"own"`), CaptchaID: "c-own"}, nil)
			m := b.deliver(t, "p1", turnstile, 1)
			if c.crashed {
				attempt, _ := json.Marshal(wire.Event{Kind: wire.EventAttempt, Gen: 1, Attempts: 1, Worker: "gone", Delivery: 1, At: b.x.Now()})
				b.store.put(wire.EventSubject("p1"), nil, attempt)
				m = b.redeliver(1, "p1", m.header, turnstile, 2)
			}
			b.store.tokens[1] = taskstore.StoredToken{Seq: 7, Attempt: c.attempt(b), Out: wire.Outcome{ID: "p1", Status: wire.StatusSolved,
				Solution: json.RawMessage(`"PLANTED"`), Attempts: 1, CaptchaID: "1", SolvedAt: b.x.Now(), ExpiresAt: b.x.Now().Add(time.Hour)}}
			b.x.Execute(context.Background(), m, noThread{}, noSlot{})

			require.Equal(t, 1, b.solves, "solved by the pool")
			require.Equal(t, "ack", m.how())
			out, ok := b.store.outcome(t, "p1")
			require.True(t, ok)
			require.Equal(t, "c-own", out.CaptchaID, "the outcome names the pool's solve")
			tok, found, _ := b.store.Token(context.Background(), "p1", 1)
			require.True(t, found)
			require.JSONEq(t, `"own"`, string(tok.Out.Solution), "the solve's token is stored over the foreign one")
			require.Equal(t, "c-own", tok.Out.CaptchaID)
			for _, r := range b.store.recs {
				if r.subject == wire.ResultSubject("p1") {
					require.Equal(t, strconv.FormatUint(tok.Seq, 10), r.header.Get(wire.HeaderTokenSeq), "the outcome names its token")
				}
			}
		})
	}
}

// A canceled generation ends dead without a solve.
func TestExecuteCanceled(t *testing.T) {
	t.Parallel()
	b := setup(t, solver.Answer{Solution: json.RawMessage(`"tok"`)}, nil)
	m := b.deliver(t, "c1", turnstile, 1)
	rec, _ := json.Marshal(wire.CancelRecord{ID: "c1", Gen: 1, By: "ops", Reason: "operator"})
	b.store.put(wire.CancelRecordSubject("c1"), nil, rec)
	again := b.redeliver(1, "c1", m.header, turnstile, 2) // a redelivery reads the state
	b.x.Execute(context.Background(), again, noThread{}, noSlot{})

	require.Zero(t, b.solves)
	out, ok := b.store.outcome(t, "c1")
	require.True(t, ok)
	require.Equal(t, string(retry.ReasonCanceled), out.Reason)
	require.Equal(t, "canceled by ops: operator", out.Detail)
	require.Equal(t, "ack", again.how())
}

// A forged envelope (a message id that is not the task's) ends dead as
// such, on its own id.
func TestExecuteForgedEnvelope(t *testing.T) {
	t.Parallel()
	b := setup(t, solver.Answer{Solution: json.RawMessage(`"tok"`)}, nil)
	h := nats.Header{}
	h.Set(wire.HeaderMsgID, "someone-else")
	b.store.mu.Lock()
	gen := b.store.put(wire.TaskSubject(wire.LaneFast, wire.PriorityNormal, "f1"), h, []byte(turnstile))
	b.store.mu.Unlock()
	m := b.redeliver(gen, "f1", h, turnstile, 1)
	b.x.Execute(context.Background(), m, noThread{}, noSlot{})

	require.Zero(t, b.solves)
	out, ok := b.store.outcome(t, "f1")
	require.True(t, ok)
	require.Equal(t, wire.CodeInvalidEnvelope, out.Error)
}

// A worker stopping while it records a delivery's attempt (the service
// refused its key, or it was told to stop) says nothing of it: the task
// comes back like every task it held, and its stop has been said. Said as
// "cannot record task event: context canceled", it read as a failure of
// its own after the stop's reason.
func TestExecuteStoppingSaysNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, solver.Answer{Solution: json.RawMessage(`"tok"`), CaptchaID: "c1"}, nil)
	var logs strings.Builder
	var mu sync.Mutex
	b.x.Log = slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logs.Write(p)
	}), nil))
	m := b.deliver(t, "a1", turnstile, 1)
	ctx, cancel := context.WithCancel(context.Background())
	b.store.beforeAppend = func(*fakeStore) { cancel() }
	b.x.Execute(ctx, m, noThread{}, noSlot{})
	require.Equal(t, 0, b.solves, "no solve without its attempt recorded")
	mu.Lock()
	defer mu.Unlock()
	require.NotContains(t, logs.String(), "context canceled")
	require.NotContains(t, logs.String(), "level=WARN")
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
