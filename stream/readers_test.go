package stream

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream/internal/taskstore"
	"github.com/captchaq/captchaq/stream/wire"
)

// refused sends a request on subject with reply as its reply subject and
// requires the server to refuse the publish with a permission violation
// naming subject: no answer may come, on reply or anywhere.
func refused(t *testing.T, nc *nats.Conn, errs <-chan error, subject, reply string, body []byte) {
	t.Helper()
	require.NoError(t, nc.PublishMsg(&nats.Msg{Subject: subject, Reply: reply, Data: body}))
	require.NoError(t, nc.Flush())
	select {
	case err := <-errs:
		require.ErrorIs(t, err, nats.ErrPermissionViolation)
		require.Contains(t, err.Error(), `"`+subject+`"`, "the violation names the request's subject")
	case <-time.After(10 * time.Second):
		t.Fatalf("%s (reply %s) was not refused", subject, reply)
	}
}

// TestProducerCannotMakeTheServerWrite: a producer with the shipped roles
// cannot create a consumer on CAPTCHA (whatever its deliver subject) nor
// send a pull request (whatever its reply subject), so it cannot make the
// server deliver messages onto subjects the streams store; the token
// stream stays empty, and a task submitted afterwards is solved once, its
// token stored.
func TestProducerCannotMakeTheServerWrite(t *testing.T) {
	t.Parallel()
	ns := authServer(t)
	ctx := testContext(t)

	anc, _ := roleConn(t, ns, "admin")
	ajs, err := jetstream.New(anc)
	require.NoError(t, err)
	as, err := ajs.Stream(ctx, DefaultStream)
	require.NoError(t, err)
	// A consumer that is not a worker's, as a lingering reader would leave.
	_, err = as.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "lingering", FilterSubject: wire.SubjectResults + ".>"})
	require.NoError(t, err)

	pnc, perrs := roleConn(t, ns, "producer")
	producer, err := NewClient(ctx, pnc, ClientConfig{Name: "producer"})
	require.NoError(t, err)
	// Something to deliver: a task with a big body, queued (no worker runs).
	big := Task{ID: "filler", Method: "base64", Params: Params{
		"body": base64.StdEncoding.EncodeToString(append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, 300<<10)...))}}
	_, err = producer.Submit(ctx, big)
	require.NoError(t, err)

	before, err := as.Info(ctx)
	require.NoError(t, err)

	targets := []string{"captcha.tokens.x.y", "captcha.tasks.fast.normal.x", "captcha.events.x", "captcha.results.x",
		"captcha.dead.x", "captcha.cancels.x.1", "captcha.workers.x"}
	for i, deliver := range targets {
		name := fmt.Sprintf("evil%d", i)
		push, _ := json.Marshal(map[string]any{"stream_name": DefaultStream, "config": map[string]any{
			"name": name, "deliver_subject": deliver, "ack_policy": "none", "filter_subject": "captcha.tasks.>"}})
		refused(t, pnc, perrs, "$JS.API.CONSUMER.CREATE.CAPTCHA."+name, pnc.NewRespInbox(), push)
		refused(t, pnc, perrs, "$JS.API.CONSUMER.CREATE.CAPTCHA."+name+".captcha.tasks.>", pnc.NewRespInbox(), push)
		refused(t, pnc, perrs, "$JS.API.CONSUMER.DURABLE.CREATE.CAPTCHA."+name, pnc.NewRespInbox(), push)
		pull, _ := json.Marshal(map[string]any{"batch": 100, "expires": int64(time.Minute)})
		for _, cons := range []string{"lingering", "workers-fast-normal", name} {
			refused(t, pnc, perrs, "$JS.API.CONSUMER.MSG.NEXT.CAPTCHA."+cons, deliver, pull)
		}
	}
	refused(t, pnc, perrs, "$JS.API.CONSUMER.DELETE.CAPTCHA.lingering", pnc.NewRespInbox(), nil)

	tokens, err := ajs.Stream(ctx, Topology{}.TokenStream())
	require.NoError(t, err)
	ti, err := tokens.Info(ctx)
	require.NoError(t, err)
	require.Zero(t, ti.State.Msgs, "nothing landed in the token stream")
	after, err := as.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, before.State.LastSeq, after.State.LastSeq, "nothing landed in CAPTCHA")

	// The queue still works for the producer, and a solve is paid once.
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
	out, err := producer.Solve(ctx, turnstileTask("victim"))
	require.NoError(t, err)
	require.Equal(t, `"tok-0x4AAAAAAAB"`, string(out.Solution))
	_, err = producer.Wait(ctx, "filler")
	require.NoError(t, err)
	require.EqualValues(t, 2, solves.Load(), "each task paid once")

	// Following, as results --follow and WaitAll do, needs no more.
	followed := make(chan Outcome, 8)
	fctx, stopFollowing := context.WithCancel(ctx)
	defer stopFollowing()
	go func() {
		_ = producer.OutcomesSince(fctx, time.Time{}, true, func(o Outcome) { followed <- o })
	}()
	r, err := producer.Submit(ctx, turnstileTask("follow-1"))
	require.NoError(t, err)
	require.NoError(t, producer.WaitAll(ctx, []Receipt{r}, func(o Outcome, err error) { require.NoError(t, err) }))
	for o := range followed {
		if o.ID == "follow-1" {
			require.NotEmpty(t, o.Solution, "with its token")
			break
		}
	}
	select {
	case err := <-perrs:
		t.Fatalf("the producer's own reads were refused: %v", err)
	default:
	}
}

// TestTokenStreamBounded: the token stream holds at most TokenMaxBytes
// (the oldest tokens give way, no store is refused for room) and no token
// over wire.TokenMaxMsgSize.
func TestTokenStreamBounded(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{TokenMaxBytes: 256 << 10})
	ctx := testContext(t)
	cfg := b.client.tokens.CachedInfo().Config
	require.EqualValues(t, 256<<10, cfg.MaxBytes)
	require.EqualValues(t, wire.TokenMaxMsgSize, cfg.MaxMsgSize)
	require.Equal(t, jetstream.DiscardOld, cfg.Discard)

	js, err := jetstream.New(b.nc)
	require.NoError(t, err)
	body := make([]byte, 4<<10)
	for i := range 200 {
		_, err := js.Publish(ctx, wire.TokenSubject(fmt.Sprintf("t%d", i), 1), body, jetstream.WithExpectStream(b.top.TokenStream()))
		require.NoError(t, err, "token %d: a store is never refused for room", i)
	}
	info, err := b.client.tokens.Info(ctx)
	require.NoError(t, err)
	require.LessOrEqual(t, info.State.Bytes, uint64(256<<10))
	_, err = js.Publish(ctx, wire.TokenSubject("huge", 1), make([]byte, wire.TokenMaxMsgSize+1), jetstream.WithExpectStream(b.top.TokenStream()))
	require.ErrorIs(t, err, jetstream.ErrStreamMessageExceedsMaximum)
}

// TestTokenTooLargeEndsTheTask: an answer the token stream cannot keep ends
// the task dead (TOKEN_TOO_LARGE), once: the service is not asked again.
func TestTokenTooLargeEndsTheTask(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	var solves atomic.Int32
	b.startWorker(t, WorkerConfig{Threads: 1, Solver: solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
		solves.Add(1)
		huge, _ := json.Marshal(string(make([]byte, wire.TokenMaxMsgSize)))
		return solver.Answer{Solution: huge}, nil
	})})
	out, err := b.client.Solve(ctx, turnstileTask("huge-1"))
	require.ErrorIs(t, err, ErrNotSolved)
	require.Equal(t, CodeTokenTooLarge, out.Error)
	require.EqualValues(t, 1, solves.Load())
}

// TestForgedCancelsCostABoundedRead: 100,000 forged cancel records on an
// owner's task do not make its delivery read them: the delivery reads the
// task's cancel state with at most one request on its cancel subject (each
// direct get the server answers is counted here), the task is solved once,
// and a task without an owner's cancel costs none.
func TestForgedCancelsCostABoundedRead(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	gen := ownersTask(t, b, "forged-1")
	forgeCancels(t, b, "forged-1", gen, 100_000)
	ctx := testContext(t) // from here: forging takes long under the race detector
	plain, err := b.client.Submit(ctx, turnstileTask("plain-1"))
	require.NoError(t, err)

	// Every direct get request (all of them, by subject or in the body) that
	// names a task's cancel subjects.
	var reads, plainReads atomic.Int64
	spy := b.connect(t)
	_, err = spy.Subscribe("$JS.API.DIRECT.GET.>", func(m *nats.Msg) {
		req := m.Subject + " " + string(m.Data)
		if strings.Contains(req, "captcha.cancels.forged-1") {
			reads.Add(1)
		}
		if strings.Contains(req, "captcha.cancels.plain-1") {
			plainReads.Add(1)
		}
	})
	require.NoError(t, err)
	require.NoError(t, spy.Flush())

	var solves atomic.Int32
	b.startWorker(t, WorkerConfig{Threads: 2, Solver: countingSolver(&solves)})
	out, err := b.client.waitGen(ctx, "forged-1", gen)
	require.NoError(t, err)
	require.Equal(t, StatusSolved, out.Status)
	_, err = b.client.waitGen(ctx, "plain-1", plain.Seq)
	require.NoError(t, err)
	require.NoError(t, spy.Flush())
	require.EqualValues(t, 2, solves.Load(), "each task solved once")
	require.LessOrEqual(t, reads.Load(), int64(1), "the delivery read the forged records")
	require.Zero(t, plainReads.Load(), "a task nobody but the admin can cancel costs no read")
}

// TestAdminCancelFailsTheAttemptWrite: an admin's cancel is one of the
// task's records, so a first delivery that assumed nothing was recorded
// finds it when its attempt's compare-and-set write fails, and ends the
// task canceled without calling the service.
func TestAdminCancelFailsTheAttemptWrite(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	r, err := b.client.Submit(ctx, turnstileTask("adm-1"))
	require.NoError(t, err)
	ti, err := b.client.Cancel(ctx, "adm-1", "operator")
	require.NoError(t, err)
	require.True(t, ti.Canceled)
	ti, err = b.client.TaskOf(ctx, "adm-1")
	require.NoError(t, err)
	require.True(t, ti.Canceled, "task ls shows it")

	var solves atomic.Int32
	b.startWorker(t, WorkerConfig{Threads: 1, Solver: countingSolver(&solves)})
	out, err := b.client.waitGen(ctx, "adm-1", r.Seq)
	require.ErrorIs(t, err, ErrNotSolved)
	require.Equal(t, "canceled", out.Reason)
	require.Zero(t, solves.Load())
	require.Zero(t, out.Attempts, "no attempt was made")
	trace, err := b.client.Trace(ctx, "adm-1")
	require.NoError(t, err)
	var kinds []string
	for _, e := range trace {
		kinds = append(kinds, e.Kind)
	}
	require.Contains(t, kinds, "cancel", "the audit trail shows the cancel")
}

// TestOwnersCancelIsRelayed: an owner's cancel stored behind more forged
// records than a delivery looks at is still honoured: a running worker
// relays it among the task's records as it is stored.
func TestOwnersCancelIsRelayed(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	release := make(chan struct{})
	released := false
	t.Cleanup(func() {
		if !released {
			close(release)
		}
	})
	var solves atomic.Int32
	b.startWorker(t, WorkerConfig{Threads: 1, Solver: solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
		solves.Add(1)
		if req.Params["sitekey"] == "blocker" {
			select {
			case <-release:
			case <-ctx.Done():
				return solver.Answer{}, ctx.Err()
			}
		}
		return solver.Answer{Solution: json.RawMessage(`"tok"`)}, nil
	})})
	blocker := turnstileTask("blocker-1")
	blocker.Params["sitekey"] = "blocker"
	_, err := b.client.Submit(ctx, blocker)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return solves.Load() == 1 }, 10*time.Second, 5*time.Millisecond, "the one thread is busy")

	secret, hash := wire.NewCancelKey()
	b.client.cancelHashes.Store("own-1", hash)
	r, err := b.client.Submit(ctx, turnstileTask("own-1"))
	b.client.cancelHashes.Delete("own-1")
	require.NoError(t, err)
	forgeCancels(t, b, "own-1", r.Seq, 2*taskstore.OwnerCancelScan)
	b.client.cancelKeys.Store("own-1", secret)
	_, err = b.client.Cancel(ctx, "own-1", "changed my mind")
	require.NoError(t, err)
	_, s := b.raw(t)
	require.Eventually(t, func() bool {
		m, err := s.GetLastMsgForSubject(ctx, wire.CancelRecordSubject("own-1"))
		return err == nil && wire.ParseCancel(m.Data, r.Seq) != nil && wire.ParseCancel(m.Data, r.Seq).Secret == ""
	}, 10*time.Second, 10*time.Millisecond, "relayed without its secret")

	close(release)
	released = true
	out, err := b.client.waitGen(ctx, "own-1", r.Seq)
	require.ErrorIs(t, err, ErrNotSolved)
	require.Equal(t, "canceled", out.Reason)
	require.EqualValues(t, 1, solves.Load(), "the canceled task was not paid for")
}
