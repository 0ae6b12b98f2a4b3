package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
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

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream/broker"
	"github.com/captchaq/captchaq/stream/internal/taskstore"
	"github.com/captchaq/captchaq/stream/wire"
)

// Whatever a producer publishes under captcha.tasks.> (any subject, any
// headers, any body), every message the stream accepts ends: with exactly
// one outcome of its own generation, or, for a forged message past the
// worker's budget (docs/security.md, "Floods of forged messages"), ended
// without a record and counted as forged; and every paid solve is the
// message's own task. The random test runs a fresh mix on every run (the seed is
// logged; CAPTCHAQ_FUZZ_SEED replays one); FuzzTaskMessage lets `go test
// -fuzz FuzzTaskMessage ./stream/` search for more.

// fuzzRig is one server and worker shared by the messages of a run.
type fuzzRig struct {
	ns     *server.Server
	js     jetstream.JetStream
	s      jetstream.Stream
	tokens jetstream.Stream
	mu     sync.Mutex
	solved map[string]int // solves by site key
	// forged counts the forged messages the worker ended (recorded or not),
	// unrecorded those the rig saw end without an outcome, recorded those
	// that ended with an INVALID_ENVELOPE outcome.
	forged, unrecorded, recorded atomic.Int64
}

func newFuzzRig(t testing.TB) *fuzzRig {
	ns, err := broker.Start(broker.Config{StoreDir: t.TempDir(), LazySync: true})
	require.NoError(t, err)
	r := &fuzzRig{ns: ns, solved: map[string]int{}}
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	require.NoError(t, err)
	r.js, err = jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	top := Topology{AckWait: 2 * time.Second, DuplicateWindow: time.Minute}
	r.s, err = EnsureTopology(ctx, r.js.Conn(), top, true)
	require.NoError(t, err)
	r.tokens, err = r.js.Stream(ctx, top.TokenStream())
	require.NoError(t, err)
	wnc, err := nats.Connect("", nats.InProcessServer(ns))
	require.NoError(t, err)
	w, err := NewWorker(ctx, wnc, WorkerConfig{Topology: top, Threads: 8, IdleCheck: 20 * time.Millisecond,
		Observer: ObserverFunc(func(o Observation) {
			if o.Kind == ObservedForged {
				r.forged.Add(1)
			}
		}),
		Solver: solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.solved[req.Params["sitekey"]]++
			b, _ := json.Marshal("tok-" + req.Params["sitekey"])
			return solver.Answer{Solution: b, CaptchaID: "1"}, nil
		})})
	require.NoError(t, err)
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(wctx) }()
	cleanup := func() {
		stop()
		<-done
		wnc.Close()
		nc.Close()
		ns.Shutdown()
		ns.WaitForShutdown()
	}
	if tt, ok := t.(interface{ Cleanup(func()) }); ok {
		tt.Cleanup(cleanup)
	}
	return r
}

// fuzzMsg is one message a producer might publish.
type fuzzMsg struct {
	subject string
	headers map[string]string
	body    string
}

// publish sends m and returns its generation, 0 when the stream did not
// accept it as a new message.
func (r *fuzzRig) publish(t testing.TB, m fuzzMsg) uint64 {
	msg := nats.NewMsg(m.subject)
	msg.Data = []byte(m.body)
	for k, v := range m.headers {
		msg.Header.Set(k, v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	// No retries on "no responders": nats.go waits half a second for a
	// stream that may be starting; here none will.
	ack, err := r.js.PublishMsg(ctx, msg, jetstream.WithRetryAttempts(0))
	if err != nil || ack.Duplicate {
		return 0
	}
	return ack.Sequence
}

// check waits for the outcome of generation gen of message m and checks it
// is the only one, and that a solved outcome is the message's own task's.
// A forged message (its envelope does not hold together) past the
// workers' budget ends without an outcome (executor.ForgedBudget): one
// whose message is gone with no outcome must be forged.
func (r *fuzzRig) check(t testing.TB, m fuzzMsg, gen uint64, sitekey string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	subject := m.subject
	id := wire.IDFromSubject(subject)
	var got []Outcome
	require.Eventually(t, func() bool {
		if _, err := r.s.GetMsg(ctx, gen); !errors.Is(err, jetstream.ErrMsgNotFound) {
			return false // not ended yet (its outcome is stored before its ack)
		}
		got = outcomesOf(ctx, t, r.s, id, gen)
		return true
	}, 30*time.Second, 20*time.Millisecond, "message %d on %s never ended", gen, subject)
	if len(got) == 0 {
		h := nats.Header{}
		for k, v := range m.headers {
			h.Set(k, v)
		}
		task, _ := wire.ParseTask([]byte(m.body))
		forged := wire.IsMovedCopy(h) || wire.CheckEnvelope(id, h, task) != nil || h.Get(wire.HeaderMsgID) != id
		require.True(t, forged, "message %d on %s ended without an outcome, and its envelope holds", gen, subject)
		r.unrecorded.Add(1)
		return
	}
	require.Len(t, got, 1, "exactly one outcome for %s generation %d", id, gen)
	out := got[0]
	if out.Error == wire.CodeInvalidEnvelope {
		r.recorded.Add(1)
	}
	if out.Status == StatusSolved && sitekey != "" {
		tok, found, err := taskstore.ReadToken(ctx, r.tokens, id, gen)
		require.NoError(t, err)
		require.True(t, found, "message %d on %s: no token", gen, subject)
		require.Equal(t, `"tok-`+sitekey+`"`, string(tok.Solution), "message %d on %s got another task's token", gen, subject)
	}
}

// checkForged requires every message that ended without an outcome to be
// one the worker ended as forged: no valid task is dropped unrecorded.
func (r *fuzzRig) checkForged(t testing.TB) {
	unrecorded, forged, recorded := r.unrecorded.Load(), r.forged.Load(), r.recorded.Load()
	require.LessOrEqual(t, unrecorded, forged-recorded,
		"%d messages ended without an outcome, but the worker ended only %d forged ones without a record (%d forged, %d recorded)",
		unrecorded, forged-recorded, forged, recorded)
}

// randomMsg makes the n-th message of a run: a mix of valid tasks and every
// kind of wrong envelope.
func randomMsg(rng *rand.Rand, n int, ids []string) (fuzzMsg, string) {
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	id := ids[rng.IntN(len(ids))]
	other := ids[rng.IntN(len(ids))]
	sitekey := fmt.Sprintf("0xK%04d", n)
	subject := pick("captcha.tasks.fast.normal.", "captcha.tasks.fast.high.", "captcha.tasks.slow.normal.", "captcha.tasks.slow.high.",
		"captcha.tasks.fast.urgent.", "captcha.tasks.", "captcha.tasks.fast.normal.x.") + id
	h := map[string]string{}
	switch rng.IntN(6) {
	case 0, 1, 2:
		h[wire.HeaderMsgID] = id
	case 3:
		h[wire.HeaderMsgID] = pick("result.", "dead.") + other + "." + strconv.Itoa(rng.IntN(50))
	case 4:
		h[wire.HeaderMsgID] = wire.ReplayMsgID(id, strconv.Itoa(rng.IntN(50)))
		h[wire.HeaderReplayedBy] = strconv.Itoa(rng.IntN(50))
	}
	if rng.IntN(4) == 0 {
		h[wire.HeaderTaskID] = pick(id, other)
	}
	for _, k := range []string{wire.HeaderGen, wire.HeaderReason, wire.HeaderAttempts, wire.HeaderError, wire.HeaderSubject, wire.HeaderReplayedBy, wire.HeaderClient} {
		if rng.IntN(8) == 0 {
			h[k] = pick("1", "forged", "99", "")
		}
	}
	if rng.IntN(10) == 0 {
		h["Nats-Expected-Last-Sequence"] = strconv.Itoa(rng.IntN(3))
	}
	body := pick(
		`{"method":"turnstile","params":{"sitekey":"`+sitekey+`","pageurl":"https://shop.example/p"}}`,
		`{"method":"turnstile","params":{"sitekey":"`+sitekey+`","pageurl":"https://shop.example/p"}}`,
		`{"id":"`+other+`","method":"turnstile","params":{"sitekey":"`+sitekey+`","pageurl":"https://shop.example/p"}}`,
		`{"method":"turnstile","prority":"high","params":{"sitekey":"`+sitekey+`"}}`,
		`{{ not json`, ``)
	return fuzzMsg{subject: subject, headers: h, body: body}, sitekey
}

func TestRandomTaskMessagesEachEndOnce(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CAPTCHAQ_FUZZ_SEED"); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
	}
	t.Logf("seed %d (CAPTCHAQ_FUZZ_SEED=%d replays it)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	r := newFuzzRig(t)
	ids := []string{strings.Repeat("z", 65), "order#5", "café"}
	for i := range 24 {
		ids = append(ids, fmt.Sprintf("id-%d", i))
	}
	type accepted struct {
		msg     fuzzMsg
		sitekey string
		gen     uint64
	}
	var got []accepted
	for n := range 150 {
		m, sitekey := randomMsg(rng, n, ids)
		if gen := r.publish(t, m); gen > 0 {
			got = append(got, accepted{m, sitekey, gen})
		}
	}
	require.NotEmpty(t, got)
	for _, a := range got {
		r.check(t, a.msg, a.gen, a.sitekey)
	}
	r.checkForged(t)
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, n := range r.solved {
		require.Equal(t, 1, n, "site key %s solved %d times", k, n)
	}
	t.Logf("%d messages accepted, %d solved, %d forged ended without a record", len(got), len(r.solved), r.unrecorded.Load())
}

// FuzzTaskMessage publishes one message per input under captcha.tasks.> and
// checks that, if the stream accepts it, it ends with exactly one outcome,
// or as a forged message counted past the budget.
func FuzzTaskMessage(f *testing.F) {
	f.Add("fast.normal.f1", "f1", "", `{"method":"turnstile","params":{"sitekey":"0xF","pageurl":"https://a.example/"}}`)
	f.Add("fast.normal.f2", "result.f1.3", "", `{"method":"turnstile","params":{"sitekey":"0xF","pageurl":"https://a.example/"}}`)
	f.Add("slow.high.f3", "f3", "f1", `{"method":"userrecaptcha","params":{"googlekey":"k","pageurl":"https://a.example/"}}`)
	f.Add("fast.normal.f4", "f4.replay.2", "", `{"method":"turnstile","params":{}}`)
	f.Add("fast.urgent.f5", "f5", "", `{}`)
	rig := newFuzzRig(f)
	var n atomic.Int64
	f.Fuzz(func(t *testing.T, subject, msgID, taskID, body string) {
		sitekey := ""
		if strings.Contains(body, `"0xF"`) {
			sitekey = fmt.Sprintf("0xZ%d", n.Add(1))
			body = strings.ReplaceAll(body, `"0xF"`, `"`+sitekey+`"`)
		}
		m := fuzzMsg{subject: "captcha.tasks." + subject, headers: map[string]string{}, body: body}
		if msgID != "" {
			m.headers[wire.HeaderMsgID] = msgID
		}
		if taskID != "" {
			m.headers[wire.HeaderTaskID] = taskID
		}
		if gen := rig.publish(t, m); gen > 0 {
			rig.check(t, m, gen, sitekey)
			rig.checkForged(t)
		}
	})
}
