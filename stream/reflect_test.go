package stream

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream/wire"
)

// producerRequests are the request subjects the shipped PRODUCER role may
// publish to, each with a body its responder answers.
func producerRequests(seq uint64) map[string]string {
	get := fmt.Sprintf(`{"seq":%d}`, seq)
	return map[string]string{
		"$JS.API.STREAM.INFO.CAPTCHA":                              "",
		"$JS.API.STREAM.MSG.GET.CAPTCHA":                           get,
		"$JS.API.DIRECT.GET.CAPTCHA":                               get,
		"$JS.API.DIRECT.GET.CAPTCHA.captcha.tasks.fast.normal.atk": "",
		"$JS.API.STREAM.INFO.CAPTCHA_TOKENS":                       "",
		"$JS.API.STREAM.MSG.GET.CAPTCHA_TOKENS":                    `{"seq":1}`,
		"$JS.API.CONSUMER.INFO.CAPTCHA.workers-fast-normal":        "",
		"$JS.API.STREAM.INFO.CAPTCHA_PLAN":                         "",
		"$JS.API.STREAM.INFO.KV_captchaq-timings":                  "",
		"captchaq.store":                                           "{}",
		"captchaq.reports":                                         `{"id":"victim","good":true}`,
	}
}

// TestProducerCannotMakeTheServerAnswerIntoAStream: every request the
// producer role may send, with its reply subject on every subject a stream
// stores (tasks, records, admin cancels, tokens, the plan's threads, the
// timings bucket): no answer is stored anywhere. Were it stored, a
// producer could write any record of any task (an outcome, an admin
// cancel, a token), the plan's thread quota and the learned timings, with
// a body of its choice (a direct get of a message it published).
func TestProducerCannotMakeTheServerAnswerIntoAStream(t *testing.T) {
	t.Parallel()
	ns := authServer(t)
	ctx := testContext(t)
	// captchaq server answers captchaq.store, and workers captchaq.reports.
	snc, _ := roleConn(t, ns, "admin")
	sjs, err := jetstream.New(snc)
	require.NoError(t, err)
	wnc, _ := roleConn(t, ns, "worker")
	w, err := NewWorker(ctx, wnc, WorkerConfig{Solver: solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
		return solver.Answer{Solution: json.RawMessage(`"x"`)}, nil
	}), Threads: 1, IdleCheck: 50 * time.Millisecond})
	require.NoError(t, err)
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	t.Cleanup(func() { stop(); <-done })
	_, err = snc.Subscribe("captchaq.store", func(m *nats.Msg) { _ = m.Respond([]byte(`{"room":1}`)) })
	require.NoError(t, err)
	require.NoError(t, SetPlan(ctx, sjs.Conn(), Topology{}, 2))
	_, err = EnsureTimings(ctx, sjs.Conn(), Topology{})
	require.NoError(t, err)

	anc, _ := roleConn(t, ns, "producer")
	ajs, err := jetstream.New(anc)
	require.NoError(t, err)
	// A message of the attacker's own, without Nats-Msg-Id (a copy of it
	// would otherwise be dropped as a duplicate).
	m := nats.NewMsg("captcha.tasks.fast.normal.atk")
	m.Header.Set(wire.HeaderGen, "1")
	m.Data = []byte(`{"id":"victim","gen":1,"reason":"forged"}`)
	ack, err := ajs.PublishMsg(ctx, m)
	require.NoError(t, err)

	streams := []string{DefaultStream, Topology{}.TokenStream(), "CAPTCHA_PLAN", "KV_captchaq-timings"}
	replies := []string{"captcha.results.victim", "captcha.cancels.victim", "captcha.events.victim", "captcha.dead.victim",
		"captcha.cancels.victim.1", "captcha.tasks.fast.normal.victim", "captcha.workers.x", wire.TokenSubject("victim", 1),
		"captcha-plan.threads", "$KV.captchaq-timings.turnstile"}
	// What the streams hold on the replies' subjects: an answer stored
	// would be there. (The worker's own writes, its heartbeats and the
	// records of the attacker's task, are on other subjects.)
	stored := func() map[string]uint64 {
		n := map[string]uint64{}
		for _, name := range streams {
			s, err := sjs.Stream(ctx, name)
			require.NoError(t, err, name)
			info, err := s.Info(ctx, jetstream.WithSubjectFilter(">"))
			require.NoError(t, err)
			for _, reply := range replies {
				if c := info.State.Subjects[reply]; c > 0 {
					n[name+" "+reply] = c
				}
			}
		}
		return n
	}
	before := stored()
	reqs := producerRequests(ack.Sequence)
	for subj, body := range reqs {
		for _, reply := range replies {
			require.NoError(t, anc.PublishMsg(&nats.Msg{Subject: subj, Reply: reply, Data: []byte(body)}))
		}
	}
	// Then each request once more, answered to the attacker's own inbox:
	// a responder answers one subject's requests in the order they came
	// (the server's API from one queue, a client's subscription one by
	// one), so once all these are answered, so are the ones before.
	answers := make(chan *nats.Msg, len(reqs))
	inbox := nats.NewInbox()
	sub, err := anc.ChanSubscribe(inbox+".*", answers)
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	i := 0
	for subj, body := range reqs {
		i++
		require.NoError(t, anc.PublishMsg(&nats.Msg{Subject: subj, Reply: fmt.Sprintf("%s.%d", inbox, i), Data: []byte(body)}))
	}
	for range reqs {
		select {
		case <-answers:
		case <-ctx.Done():
			t.Fatal("a request to the attacker's own inbox was not answered")
		}
	}
	require.Equal(t, before, stored(), "an answer to a producer's request was stored")
}

// TestProducerCannotPlantAToken: nats-server answers a direct get on the
// request's reply subject, whatever it is, from inside the account, so a
// streamed subject gets the answer stored. A producer with the shipped
// roles publishes a message shaped as another producer's token (its own
// task message, with the headers and body of its choice), then direct-gets
// it with the victim's token subject as reply: the copy lands in the token
// stream before any worker solved the victim's task. The victim's task must
// still be solved (paid once) and the victim must get its own answer, never
// the planted one.
func TestProducerCannotPlantAToken(t *testing.T) {
	t.Parallel()
	ns := authServer(t)
	ctx := testContext(t)

	vnc, _ := roleConn(t, ns, "producer")
	victim, err := NewClient(ctx, vnc, ClientConfig{Name: "victim"})
	require.NoError(t, err)
	r, err := victim.Submit(ctx, turnstileTask("victim"))
	require.NoError(t, err)

	// The attacker: a plain nats.go client with the producer's role.
	anc, aerrs := roleConn(t, ns, "producer")
	plantToken(ctx, t, anc, "", "victim", r.Seq)
	select {
	case err := <-aerrs:
		t.Logf("the plant was refused: %v", err)
	default:
	}

	var solves atomic.Int32
	solve := solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
		solves.Add(1)
		b, _ := json.Marshal("tok-" + req.Params["sitekey"])
		return solver.Answer{Solution: b, CaptchaID: "7" + strconv.Itoa(int(solves.Load()))}, nil
	})
	wnc, _ := roleConn(t, ns, "worker")
	w, err := NewWorker(ctx, wnc, WorkerConfig{Solver: solve, Threads: 2, IdleCheck: 50 * time.Millisecond})
	require.NoError(t, err)
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	t.Cleanup(func() { stop(); <-done })

	out, err := victim.Wait(ctx, "victim")
	if err == nil {
		require.NotEqual(t, `"PLANTED"`, string(out.Solution), "the victim got the attacker's token")
		require.Equal(t, `"tok-0x4AAAAAAAB"`, string(out.Solution))
	}
	require.EqualValues(t, 1, solves.Load(), "the victim's task is solved once")
}

// TestSolveNeverWaitsOnAnotherProducersTask: a producer that publishes a
// task under an id another is about to use (within the duplicate window)
// makes the other's publish a duplicate of its own. Solve must not then
// wait on, and hand out the token of, the squatter's task (its page, its
// sitekey): Solve's task carries the hash of a cancel secret only its
// Client knows, so a duplicate whose message does not carry that hash is
// another's, and Solve says the id is taken.
func TestSolveNeverWaitsOnAnotherProducersTask(t *testing.T) {
	t.Parallel()
	ns := authServer(t)
	ctx := testContext(t)
	var solves atomic.Int32
	solve := solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
		solves.Add(1)
		b, _ := json.Marshal("tok-" + req.Params["sitekey"])
		return solver.Answer{Solution: b}, nil
	})
	wnc, _ := roleConn(t, ns, "worker")
	w, err := NewWorker(ctx, wnc, WorkerConfig{Solver: solve, Threads: 2, IdleCheck: 50 * time.Millisecond})
	require.NoError(t, err)
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	t.Cleanup(func() { stop(); <-done })

	anc, _ := roleConn(t, ns, "producer")
	ajs, err := jetstream.New(anc)
	require.NoError(t, err)
	m := nats.NewMsg("captcha.tasks.fast.normal.order-1001")
	m.Header.Set("Nats-Msg-Id", "order-1001")
	m.Data = []byte(`{"method":"turnstile","params":{"sitekey":"0xSQUATTER","pageurl":"https://evil.example/"}}`)
	_, err = ajs.PublishMsg(ctx, m)
	require.NoError(t, err)

	vnc, _ := roleConn(t, ns, "producer")
	victim, err := NewClient(ctx, vnc, ClientConfig{Name: "victim"})
	require.NoError(t, err)
	out, err := victim.Solve(ctx, turnstileTask("order-1001"))
	require.NotEqual(t, `"tok-0xSQUATTER"`, string(out.Solution), "the victim got the squatter's token")
	require.ErrorIs(t, err, ErrIDTaken)
	require.ErrorContains(t, err, "order-1001")
}

// plantToken is the planted-token attack of a producer on nc: it publishes
// a message shaped as the token of generation gen of task victim (a task
// message of its own, with the headers and the solved body of its choice),
// then direct-gets it with the victim's token subject as the reply, so
// that nats-server answers onto that subject. domain is the JetStream
// domain of the stream, "" for none. It returns once the plant was
// answered: the same get with a reply of the attacker's own, sent after it
// on the same connection, is answered after it (the stream answers a
// client's direct gets as they come, in order).
func plantToken(ctx context.Context, t *testing.T, nc *nats.Conn, domain, victim string, gen uint64) {
	t.Helper()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	now := time.Now().UTC()
	forged, _ := json.Marshal(map[string]any{"id": victim, "status": "solved", "solution": "PLANTED",
		"attempts": 1, "method": "turnstile", "captcha_id": "1", "solved_at": now, "expires_at": now.Add(time.Hour)})
	m := nats.NewMsg("captcha.tasks.fast.normal.atk")
	m.Header.Set("Nats-Msg-Id", "atk")
	m.Header.Set(wire.HeaderTaskID, victim)
	m.Header.Set(wire.HeaderGen, strconv.FormatUint(gen, 10))
	m.Data = forged
	ack, err := js.PublishMsg(ctx, m)
	require.NoError(t, err)
	get, _ := json.Marshal(map[string]any{"seq": ack.Sequence})
	api := "$JS.API.DIRECT.GET.CAPTCHA"
	if domain != "" {
		api = "$JS." + domain + ".API.DIRECT.GET.CAPTCHA"
	}
	require.NoError(t, nc.PublishMsg(&nats.Msg{Subject: api, Reply: wire.TokenSubject(victim, gen), Data: get}))
	_, err = nc.RequestWithContext(ctx, api, get)
	require.NoError(t, err)
}
