package stream

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream/internal/jscall"
	"github.com/captchaq/captchaq/stream/wire"
)

func TestDeadLetterListReplayTracePurge(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	var broken atomic.Bool
	broken.Store(true)
	b.startWorker(t, WorkerConfig{Solver: solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
		if broken.Load() {
			return solver.Answer{}, apiErr("ERROR_PAGEURL", retry.Permanent)
		}
		return tokenSolver().Solve(ctx, req)
	})})

	_, err := b.client.Solve(ctx, turnstileTask("d1"))
	require.ErrorIs(t, err, ErrNotSolved)
	img := Task{ID: "d2", Method: "base64", Params: Params{"body": pngBase64}}
	_, err = b.client.Solve(ctx, img)
	require.ErrorIs(t, err, ErrNotSolved)

	all, err := b.client.DeadLetters(ctx, DeadFilter{})
	require.NoError(t, err)
	require.Len(t, all, 2)
	d := all[0]
	require.Equal(t, "d1", d.ID)
	require.Equal(t, retry.ReasonPermanent, d.Reason)
	require.Equal(t, "ERROR_PAGEURL", d.Error)
	require.Equal(t, 1, d.Attempts)
	require.Equal(t, "shop.example", d.Host)
	require.Equal(t, "captcha.tasks.fast.normal.d1", d.Subject)
	require.False(t, d.FirstFailure.IsZero())
	require.Nil(t, d.Replayed)

	only, err := b.client.DeadLetters(ctx, DeadFilter{Method: "base64"})
	require.NoError(t, err)
	require.Len(t, only, 1)
	require.Equal(t, "d2", only[0].ID)
	_, err = b.client.DeadLetters(ctx, DeadFilter{Reason: "bored"})
	require.ErrorContains(t, err, "bored")

	broken.Store(false)
	r, err := b.client.Replay(ctx, "d1")
	require.NoError(t, err)
	out, err := b.client.Wait(ctx, "d1")
	require.NoError(t, err, "the replayed task is solved and Wait sees the new generation")
	require.Equal(t, 1, out.Attempts, "a replay starts a fresh budget")

	_, err = b.client.Replay(ctx, "d1")
	require.ErrorIs(t, err, ErrAlreadyReplayed)
	// Done tasks leave no task message (it holds the page URL); the worker
	// deletes it in the background once the outcome is stored.
	require.Eventually(t, func() bool { return b.count(t, wire.TaskSubjectsFor("d1")) == 0 }, 10*time.Second, 10*time.Millisecond)

	d, err = b.client.DeadLetterOf(ctx, "d1")
	require.NoError(t, err)
	require.NotNil(t, d.Replayed)
	require.Equal(t, r.Seq, d.Replayed.TaskSeq)

	tr, err := b.client.Trace(ctx, "d1")
	require.NoError(t, err)
	var kinds []string
	replayedAt := -1
	for i, e := range tr {
		if e.Kind == "replayed" { // recorded right after the new task: a fast worker may come first
			replayedAt = i
			continue
		}
		kinds = append(kinds, e.Kind)
	}
	require.Equal(t, []string{"submitted", "attempt", "dead", "dead-letter", "outcome", "submitted", "attempt", "outcome"}, kinds)
	require.Greater(t, replayedAt, 5)
	// Two replays of one letter enqueued one task: two submissions in all.
	require.Equal(t, "test-producer", tr[0].Client)

	pending, err := b.client.ReplayAll(ctx, DeadFilter{Reason: retry.ReasonPermanent})
	require.NoError(t, err)
	require.Len(t, pending, 1, "only d2 was still waiting for a replay")
	_, err = b.client.Wait(ctx, "d2")
	require.NoError(t, err)

	n, err := b.client.PurgeDead(ctx, DeadFilter{})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	left, err := b.client.DeadLetters(ctx, DeadFilter{})
	require.NoError(t, err)
	require.Empty(t, left)
}

// pngBase64 is a 1×1 PNG.
const pngBase64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="

// A task's owner can still cancel it once it has died and an operator has
// replayed it: the dead letter keeps the task's cancel hash and the replay
// carries it. No one else can: another producer's record is ignored, and
// the admin's cancel still holds.
func TestOwnerCancelsItsReplayedTask(t *testing.T) {
	t.Parallel()
	b := newReplayBed(t)
	a, ctx, operator := b.attack, b.ctx, b.operator

	// Each task submitted as Solve submits it: its message names the hash
	// of a secret only its owner, the victim's Client, holds.
	const own, other, admin = "rp-owner", "rp-other", "rp-admin"
	hashes := map[string]string{}
	for _, id := range []string{own, other, admin} {
		_, hashes[id], _ = b.submitOwned(t, id, true)
	}
	stop := b.startWorker(t, 3, nil)
	for _, id := range []string{own, other, admin} {
		out, err := a.victim.Wait(ctx, id)
		require.ErrorIs(t, err, ErrNotSolved, id)
		require.Equal(t, string(retry.ReasonPermanent), out.Reason, id)
	}
	// No worker runs while the replays are canceled: each cancel is in
	// place before the replay's first delivery.
	stop()
	b.broken.Store(false)
	replays := map[string]Receipt{}
	for _, id := range []string{own, other, admin} {
		var err error
		replays[id], err = operator.Replay(ctx, id)
		require.NoError(t, err, id)
	}
	ti, err := a.victim.Cancel(ctx, own, "changed my mind")
	require.NoError(t, err)
	require.Equal(t, replays[own].Seq, ti.Gen, "the owner cancels the replay")
	forged, _ := json.Marshal(wire.CancelRecord{ID: other, Gen: replays[other].Seq, By: "attacker", Secret: "guess"})
	_, err = a.attacker.Publish(ctx, wire.CancelSubject(other, replays[other].Seq), forged)
	require.NoError(t, err)
	_, err = operator.Cancel(ctx, admin, "operator")
	require.NoError(t, err)

	b.startWorker(t, 3, nil)
	out, err := a.victim.waitGen(ctx, own, replays[own].Seq)
	require.ErrorIs(t, err, ErrNotSolved, "the owner's cancel of its replayed task was not honoured")
	require.Equal(t, string(retry.ReasonCanceled), out.Reason)
	require.Equal(t, "canceled by victim: changed my mind", out.Detail)
	out, err = a.victim.waitGen(ctx, other, replays[other].Seq)
	require.NoError(t, err, "another producer canceled the replayed task")
	require.Equal(t, StatusSolved, out.Status)
	out, err = a.victim.waitGen(ctx, admin, replays[admin].Seq)
	require.ErrorIs(t, err, ErrNotSolved)
	require.Equal(t, "canceled by operator: operator", out.Detail)
	require.Equal(t, int32(1), b.paid.Load(), "a canceled replay was paid for")

	// Every dead letter, the replays' too, names the owner's hash, never
	// its secret.
	s, err := a.admin.Stream(ctx, DefaultStream)
	require.NoError(t, err)
	for _, id := range []string{own, other, admin} {
		ds, err := operator.DeadLetters(ctx, DeadFilter{IDs: []string{id}})
		require.NoError(t, err)
		require.NotEmpty(t, ds, id)
		for _, d := range ds {
			m, err := s.GetMsg(ctx, d.Seq)
			require.NoError(t, err)
			require.Equal(t, hashes[id], m.Header.Get(wire.HeaderCancelHash), "%s: dead letter %d", id, d.Seq)
		}
	}
}

// A replay published by hand may not name a cancel hash other than its dead
// letter's: one naming another producer's ends unsolved as an invalid
// envelope, so that producer's secret cancels nothing of the owner's.
func TestHandReplayCannotTakeOverTheCancel(t *testing.T) {
	t.Parallel()
	b := newReplayBed(t)
	a, ctx := b.attack, b.ctx
	b.startWorker(t, 2, nil)

	_, hash, _ := b.submitOwned(t, "hr-1", false)
	_, err := a.victim.Wait(ctx, "hr-1")
	require.ErrorIs(t, err, ErrNotSolved)
	d, err := a.victim.DeadLetterOf(ctx, "hr-1")
	require.NoError(t, err)
	require.Equal(t, hash, d.CancelHash)
	b.broken.Store(false)

	// The attacker replays the victim's letter under a cancel hash of its
	// own, and cancels it.
	secret, own := wire.NewCancelKey()
	dead := strconv.FormatUint(d.Seq, 10)
	x := publishRaw(ctx, t, a.attacker, d.Subject, string(d.Task), map[string]string{
		wire.HeaderMsgID: wire.ReplayMsgID("hr-1", dead), wire.HeaderReplayedBy: dead, wire.HeaderCancelHash: own})
	rec, _ := json.Marshal(wire.CancelRecord{ID: "hr-1", Gen: x.Sequence, By: "attacker", Secret: secret})
	_, err = a.attacker.Publish(ctx, wire.CancelSubject("hr-1", x.Sequence), rec)
	require.NoError(t, err)

	o := waitOutcome(ctx, t, a.astream, "hr-1", x.Sequence)
	require.Equal(t, StatusDead, o.Status)
	require.Equal(t, CodeInvalidEnvelope, o.Error, "not the replay it claims to be: %s", o.Detail)
	require.Contains(t, o.Detail, wire.HeaderCancelHash)
	require.Equal(t, int32(0), b.paid.Load())
}

// An owner's cancel record is stored for any producer to read (direct
// gets), secret and all. A secret that went out on a record of one
// generation must not cancel a replay of the task, which carries the same
// hash: whoever read the record would cancel a task that is not theirs.
func TestSpentSecretCannotCancelTheReplay(t *testing.T) {
	t.Parallel()
	b := newReplayBed(t)
	a, ctx := b.attack, b.ctx

	const id = "spent-1"
	secret, _, first := b.submitOwned(t, id, false)
	stop := b.startWorker(t, 2, nil)
	_, err := a.victim.Wait(ctx, id)
	require.ErrorIs(t, err, ErrNotSolved)
	stop()
	r := b.cancelTooLateAndReplay(t, id, secret, first)

	// Another producer reads the owner's record and cancels the replay with
	// its secret.
	m, err := a.astream.GetLastMsgForSubject(ctx, wire.CancelSubject(id, first.Seq))
	require.NoError(t, err)
	var leaked wire.CancelRecord
	require.NoError(t, json.Unmarshal(m.Data, &leaked))
	require.Equal(t, secret, leaked.Secret)
	forged, _ := json.Marshal(wire.CancelRecord{ID: id, Gen: r.Seq, By: "attacker", Reason: "mine now", Secret: leaked.Secret})
	_, err = a.attacker.Publish(ctx, wire.CancelSubject(id, r.Seq), forged)
	require.NoError(t, err)

	b.startWorker(t, 2, nil)
	out, err := a.victim.waitGen(ctx, id, r.Seq)
	require.NoError(t, err, "a producer canceled another's replayed task with a secret read from the stream: %s", out.Detail)
	require.Equal(t, StatusSolved, out.Status)
	require.Equal(t, int32(1), b.paid.Load())
}

// Nor does a worker relay such a record onto the task's own records while
// the replay runs (which would end it canceled at its next write).
func TestSpentSecretIsNotRelayed(t *testing.T) {
	t.Parallel()
	b := newReplayBed(t)
	a, ctx := b.attack, b.ctx
	started := make(chan string, 4)
	release := make(chan struct{})
	unblock := sync.OnceFunc(func() { close(release) })
	b.startWorker(t, 2, func(ctx context.Context, req solver.Request) (solver.Answer, error) {
		if b.broken.Load() {
			return solver.Answer{}, apiErr("ERROR_PAGEURL", retry.Permanent)
		}
		started <- req.Method
		select {
		case <-release:
		case <-ctx.Done():
			return solver.Answer{}, ctx.Err()
		}
		return tokenSolver().Solve(ctx, req)
	})
	t.Cleanup(unblock) // registered after the worker's stop, so run before it

	const id, marker = "spent-relay", "spent-marker"
	secret, _, first := b.submitOwned(t, id, false)
	_, err := a.victim.Wait(ctx, id)
	require.ErrorIs(t, err, ErrNotSolved)
	r := b.cancelTooLateAndReplay(t, id, secret, first)
	b.submitOwned(t, marker, true)
	for range 2 {
		<-started // both run, their messages in the stream
	}

	forged, _ := json.Marshal(wire.CancelRecord{ID: id, Gen: r.Seq, By: "attacker", Reason: "mine now", Secret: secret})
	_, err = a.attacker.Publish(ctx, wire.CancelSubject(id, r.Seq), forged)
	require.NoError(t, err)
	// The relay checks records one at a time, in order: once the owner's
	// cancel of the marker task, published after, is relayed, the forged
	// one was checked.
	_, err = a.victim.Cancel(ctx, marker, "marker")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := a.astream.GetLastMsgForSubject(ctx, wire.CancelRecordSubject(marker))
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)
	// The owner's own cancel of the first generation, too late, may be
	// relayed onto that generation's records while its dead message is not
	// erased yet (harmless: that generation has ended); none may be of the
	// replay's generation.
	require.NoError(t, jscall.Walk(ctx, a.astream, wire.CancelRecordSubject(id), 0, 0, func(m *jetstream.RawStreamMsg) {
		require.Nil(t, wire.ParseCancel(m.Data, r.Seq), "a worker relayed a cancel whose secret was read from another generation's record")
	}))
	unblock()
	out, err := a.victim.waitGen(ctx, id, r.Seq)
	require.NoError(t, err, out.Detail)
}

// A replay published by hand without the letter's cancel hash would put the
// task beyond its owner's cancel: the owner's Cancel would name that
// generation and be ignored, and the task would be solved and paid for.
// It is not the letter's replay, and ends unsolved as an invalid envelope.
func TestHandReplayCannotDropTheCancel(t *testing.T) {
	t.Parallel()
	b := newReplayBed(t)
	a, ctx := b.attack, b.ctx

	const id = "hr-drop"
	b.submitOwned(t, id, true)
	stop := b.startWorker(t, 2, nil)
	_, err := a.victim.Wait(ctx, id)
	require.ErrorIs(t, err, ErrNotSolved)
	stop()
	d, err := a.victim.DeadLetterOf(ctx, id)
	require.NoError(t, err)
	b.broken.Store(false)

	// The attacker replays the victim's letter without its hash; the owner
	// cancels the task it finds queued again, before any worker runs.
	dead := strconv.FormatUint(d.Seq, 10)
	x := publishRaw(ctx, t, a.attacker, d.Subject, string(d.Task), map[string]string{
		wire.HeaderMsgID: wire.ReplayMsgID(id, dead), wire.HeaderReplayedBy: dead})
	// (Once such a message is known for not the letter's replay, the
	// owner's Cancel finds its task ended, dead, and has nothing to do.)
	if ti, err := a.victim.Cancel(ctx, id, "changed my mind"); err == nil {
		require.Equal(t, x.Sequence, ti.Gen)
	} else {
		require.ErrorIs(t, err, ErrTaskEnded)
	}

	b.startWorker(t, 2, nil)
	o := waitOutcome(ctx, t, a.astream, id, x.Sequence)
	require.NotEqual(t, StatusSolved, o.Status, "a hand replay without the cancel hash was solved despite the owner's cancel")
	require.Equal(t, int32(0), b.paid.Load())
}

// A hand replay under the attacker's own cancel hash ends INVALID_ENVELOPE,
// and its end writes a dead letter too: the latest of the id, which an
// operator's `dead replay` takes. That letter must not hand the attacker's
// hash on to the operator's replay, or the attacker cancels it.
func TestForgedReplaysLetterGivesNoCancel(t *testing.T) {
	t.Parallel()
	b := newReplayBed(t)
	a, ctx, operator := b.attack, b.ctx, b.operator
	b.startWorker(t, 2, nil)

	const id = "hr-letter"
	b.submitOwned(t, id, false)
	_, err := a.victim.Wait(ctx, id)
	require.ErrorIs(t, err, ErrNotSolved)
	d, err := a.victim.DeadLetterOf(ctx, id)
	require.NoError(t, err)
	b.broken.Store(false)

	secret, own := wire.NewCancelKey()
	dead := strconv.FormatUint(d.Seq, 10)
	x := publishRaw(ctx, t, a.attacker, d.Subject, string(d.Task), map[string]string{
		wire.HeaderMsgID: wire.ReplayMsgID(id, dead), wire.HeaderReplayedBy: dead, wire.HeaderCancelHash: own})
	o := waitOutcome(ctx, t, a.astream, id, x.Sequence)
	require.Equal(t, CodeInvalidEnvelope, o.Error)

	// The operator replays the task's latest letter; the attacker cancels
	// the replay with its own secret.
	latest, err := operator.DeadLetterOf(ctx, id)
	require.NoError(t, err)
	require.NotEqual(t, own, latest.CancelHash, "dead letter %d of a forged message names the forger's cancel hash", latest.Seq)
	r, err := operator.Replay(ctx, id)
	require.NoError(t, err)
	rec, _ := json.Marshal(wire.CancelRecord{ID: id, Gen: r.Seq, By: "attacker", Reason: "mine now", Secret: secret})
	_, err = a.attacker.Publish(ctx, wire.CancelSubject(id, r.Seq), rec)
	require.NoError(t, err)
	out, err := a.victim.waitGen(ctx, id, r.Seq)
	require.NoError(t, err, "the attacker canceled the operator's replay: %s", out.Detail)
	require.Equal(t, int32(1), b.paid.Load())
}

// A message published ahead of the operator's replay under its message id,
// with the letter's cancel hash but a task of the attacker's, is not the
// replay: Replay must say its id is taken rather than report the task
// queued again while workers end that message INVALID_ENVELOPE.
func TestReplayDoesNotTakeAnotherTaskForItsOwn(t *testing.T) {
	t.Parallel()
	b := newReplayBed(t)
	a, ctx, operator := b.attack, b.ctx, b.operator
	stop := b.startWorker(t, 2, nil) // broken throughout

	const id = "hr-other-task"
	_, hash, _ := b.submitOwned(t, id, false)
	_, err := a.victim.Wait(ctx, id)
	require.ErrorIs(t, err, ErrNotSolved)
	stop()
	d, err := a.victim.DeadLetterOf(ctx, id)
	require.NoError(t, err)

	other := turnstileTask(id)
	other.Params["sitekey"] = "0x4AAAAAAATTACKER"
	body, _ := json.Marshal(other)
	dead := strconv.FormatUint(d.Seq, 10)
	publishRaw(ctx, t, a.attacker, d.Subject, string(body), map[string]string{
		wire.HeaderMsgID: wire.ReplayMsgID(id, dead), wire.HeaderReplayedBy: dead, wire.HeaderCancelHash: hash})
	r, err := operator.Replay(ctx, id)
	require.Error(t, err, "Replay took message %d, another task, for the replay of dead letter %d", r.Seq, d.Seq)
}

// replayBed is the set-up of the replay and cancel tests: the attack
// set-up (a victim producer, an attacker), an operator Client of the admin
// role, and workers whose service refuses every task for good
// (ERROR_PAGEURL) while broken is set, and solves it after, counting the
// solves in paid.
type replayBed struct {
	*attack
	ctx      context.Context
	operator *Client
	broken   atomic.Bool
	paid     atomic.Int32
}

func newReplayBed(t *testing.T) *replayBed {
	t.Helper()
	b := &replayBed{attack: attackSetup(t), ctx: testContext(t)}
	adm, _ := roleConn(t, b.ns, "admin")
	op, err := NewClient(b.ctx, adm, ClientConfig{Name: "operator"})
	require.NoError(t, err)
	b.operator = op
	b.broken.Store(true)
	return b
}

// startWorker runs a worker of the worker role with threads threads,
// solving with solve (nil: the bed's service); stop ends it and checks how
// it ended, also at the test's end.
func (b *replayBed) startWorker(t *testing.T, threads int, solve solver.Func) (stop func()) {
	t.Helper()
	if solve == nil {
		solve = func(ctx context.Context, req solver.Request) (solver.Answer, error) {
			if b.broken.Load() {
				return solver.Answer{}, apiErr("ERROR_PAGEURL", retry.Permanent)
			}
			b.paid.Add(1)
			return tokenSolver().Solve(ctx, req)
		}
	}
	nc, _ := roleConn(t, b.ns, "worker")
	w, err := NewWorker(b.ctx, nc, WorkerConfig{Threads: threads, IdleCheck: 50 * time.Millisecond, Solver: solve})
	require.NoError(t, err)
	wctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	stop = sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	t.Cleanup(stop)
	return stop
}

// submitOwned submits the victim's task id as Solve does: its message
// names the hash of a fresh secret. keep: the victim's Client keeps the
// secret to cancel the task with, as Solve does until the task ends.
func (b *replayBed) submitOwned(t *testing.T, id string, keep bool) (secret, hash string, r Receipt) {
	t.Helper()
	secret, hash = wire.NewCancelKey()
	b.victim.cancelHashes.Store(id, hash)
	r, err := b.victim.Submit(b.ctx, turnstileTask(id))
	b.victim.cancelHashes.Delete(id)
	require.NoError(t, err)
	if keep {
		b.victim.cancelKeys.Store(id, secret)
	}
	return secret, hash, r
}

// cancelTooLateAndReplay publishes the owner's cancel of generation first
// of task id that lost the race to its death (Cancel read the task
// running, the last attempt then failed): its record, with the secret, is
// in the stream, where every producer reads it. Then the service works
// again and the operator replays the task.
func (b *replayBed) cancelTooLateAndReplay(t *testing.T, id, secret string, first Receipt) Receipt {
	t.Helper()
	rec, _ := json.Marshal(wire.CancelRecord{ID: id, Gen: first.Seq, By: "victim", Reason: "too late", Secret: secret})
	_, err := b.victim.js.Publish(b.ctx, wire.CancelSubject(id, first.Seq), rec)
	require.NoError(t, err)
	b.broken.Store(false)
	r, err := b.operator.Replay(b.ctx, id)
	require.NoError(t, err)
	return r
}

// TestReplayOfACanceledTaskIsSolved checks that a cancel is its
// generation's alone: a task its owner canceled, replayed by the operator,
// is solved (paid once), not read as canceled by the first generation's
// record, which the task's records keep.
func TestReplayOfACanceledTaskIsSolved(t *testing.T) {
	t.Parallel()
	b := newReplayBed(t)
	a, ctx := b.attack, b.ctx
	const id = "rp-canceled"
	b.broken.Store(false)
	b.submitOwned(t, id, true)
	_, err := a.victim.Cancel(ctx, id, "not now")
	require.NoError(t, err)
	stop := b.startWorker(t, 1, nil)
	out, err := a.victim.Wait(ctx, id)
	require.ErrorIs(t, err, ErrNotSolved)
	require.Equal(t, string(retry.ReasonCanceled), out.Reason)
	stop()

	r, err := b.operator.Replay(ctx, id)
	require.NoError(t, err)
	b.startWorker(t, 1, nil)
	out, err = a.victim.waitGen(ctx, id, r.Seq)
	require.NoError(t, err, "the replay of a canceled task was taken for canceled")
	require.Equal(t, StatusSolved, out.Status)
	require.Equal(t, int32(1), b.paid.Load(), "paid for the canceled generation, or twice")
}
