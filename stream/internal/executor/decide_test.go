package executor

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream/internal/taskstore"
	"github.com/captchaq/captchaq/stream/wire"
)

// The decisions of one delivery, without a broker: what the executor
// records and does next for each state and each answer of the service.

var d0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func exactPolicy() retry.Policy {
	return retry.Policy{MaxAttempts: 3, InitialInterval: time.Second, Multiplier: 2, MaxInterval: 5 * time.Second,
		NoJitter: true, CapacityDelay: 5 * time.Second, CapacityMaxDelay: 40 * time.Second}
}

func serviceError(code string) error {
	return &solver.Error{Code: code, Class: solver.Classify(code), Op: "in.php", Text: "the service says " + code}
}

func TestResumeFrom(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		st   taskstore.GenState
		want resumeStep
	}{
		{"nothing recorded", taskstore.GenState{}, resumeNothing},
		{"an attempt that died with its worker: its token may be stored", taskstore.GenState{Last: wire.Event{Kind: wire.EventAttempt, Attempts: 1}}, resumeToken},
		{"a retry that came due", taskstore.GenState{Last: wire.Event{Kind: wire.EventRetry, Attempts: 1}}, resumeNothing},
		{"outcome stored, ack lost", taskstore.GenState{Last: wire.Event{Kind: wire.EventSolved}, Outcome: true}, resumeAck},
		{"dead letter stored, ack lost", taskstore.GenState{Last: wire.Event{Kind: wire.EventDead}, DeadLetter: true, Outcome: true}, resumeAck},
		{"verdict recorded, dead letter not", taskstore.GenState{Last: wire.Event{Kind: wire.EventDead}}, resumeDead},
		{"verdict and dead letter, no outcome", taskstore.GenState{Last: wire.Event{Kind: wire.EventDead}, DeadLetter: true}, resumeDead},
		{"solved, token alive, no outcome", taskstore.GenState{Last: wire.Event{Kind: wire.EventSolved, ExpiresAt: d0.Add(time.Second)}}, resumeToken},
		{"solved, token dead, no outcome", taskstore.GenState{Last: wire.Event{Kind: wire.EventSolved, ExpiresAt: d0}}, resumeExpired},
	}
	for _, c := range cases {
		require.Equal(t, c.want, resumeFrom(c.st, d0), c.name)
	}
}

func TestCarryOverCountsACrashAsAFailure(t *testing.T) {
	t.Parallel()
	first := d0.Add(-time.Minute)

	carried, crashed := carryOver(wire.Event{Kind: wire.EventAttempt, Attempts: 2, Snoozes: 1}, d0)
	require.True(t, crashed)
	require.Equal(t, wire.Event{Attempts: 2, Snoozes: 1, FirstFailure: d0, LastFailure: d0, LastCode: "WORKER_LOST"}, carried)

	carried, crashed = carryOver(wire.Event{Kind: wire.EventAttempt, Attempts: 2, FirstFailure: first, LastFailure: first, LastCode: "ERROR_CAPTCHA_UNSOLVABLE"}, d0)
	require.True(t, crashed)
	require.Equal(t, first, carried.FirstFailure, "the first failure stays the first")
	require.Equal(t, "WORKER_LOST", carried.LastCode)

	carried, crashed = carryOver(wire.Event{Kind: wire.EventRetry, Attempts: 1, FirstFailure: first, LastFailure: first, LastCode: "ERROR_CAPTCHA_UNSOLVABLE"}, d0)
	require.False(t, crashed, "an attempt that recorded its end did not crash")
	require.Equal(t, wire.Event{Attempts: 1, FirstFailure: first, LastFailure: first, LastCode: "ERROR_CAPTCHA_UNSOLVABLE"}, carried)

	carried, crashed = carryOver(wire.Event{}, d0)
	require.False(t, crashed)
	require.Equal(t, wire.Event{}, carried, "a fresh task carries nothing")
}

func TestAdmissionVerdicts(t *testing.T) {
	t.Parallel()
	p := exactPolicy()

	require.Equal(t, verdict{reason: retry.ReasonInvalidTask, code: "INVALID_TASK", detail: "method: missing"},
		invalidVerdict(errors.New("method: missing"), false))
	require.Equal(t, wire.CodeInvalidEnvelope, invalidVerdict(errors.New("header Nats-Msg-Id missing"), true).code)
	require.Equal(t, verdict{reason: retry.ReasonCanceled, code: "CANCELED", detail: "canceled by shop"}, canceledVerdict("canceled by shop"))

	_, ok := startVerdict(p, wire.Event{Attempts: 2}, false, d0.Add(time.Minute), d0)
	require.True(t, ok, "budget and time left")

	v, ok := startVerdict(p, wire.Event{Attempts: 0, LastCode: "ERROR_CAPTCHA_UNSOLVABLE"}, false, d0, d0)
	require.False(t, ok)
	require.Equal(t, verdict{reason: retry.ReasonExpired, code: "DEADLINE_PASSED"}, v)

	v, ok = startVerdict(p, wire.Event{Attempts: 3, LastCode: "WORKER_LOST"}, true, d0.Add(time.Minute), d0)
	require.False(t, ok)
	require.Equal(t, verdict{reason: retry.ReasonCrashed, code: "WORKER_LOST"}, v, "a budget spent by crashes says so")

	v, ok = startVerdict(p, wire.Event{Attempts: 3, LastCode: "ERROR_CAPTCHA_UNSOLVABLE"}, false, time.Time{}, d0)
	require.False(t, ok)
	require.Equal(t, verdict{reason: retry.ReasonAttemptsExhausted, code: "ERROR_CAPTCHA_UNSOLVABLE"}, v)
}

func TestAfterAttempt(t *testing.T) {
	t.Parallel()
	p := exactPolicy()
	start, end := d0, d0.Add(20*time.Second)
	first := d0.Add(-time.Minute)
	// attemptEv is the attempt event of the n-th attempt, as recorded
	// before the solve.
	attemptEv := func(n, snoozes int) wire.Event {
		ev := wire.Event{Kind: wire.EventAttempt, Attempts: n, Snoozes: snoozes, At: start, Gen: 7, Method: "userrecaptcha"}
		if n > 1 {
			ev.FirstFailure, ev.LastFailure, ev.LastCode = first, first, "ERROR_CAPTCHA_UNSOLVABLE"
		}
		return ev
	}
	result := func(ev wire.Event, err error) attemptResult {
		return attemptResult{ev: ev, err: err, end: end, deadline: d0.Add(10 * time.Minute)}
	}

	t.Run("solved", func(t *testing.T) {
		nx := afterAttempt(p, result(attemptEv(1, 0), nil))
		require.Equal(t, nextSolved, nx.kind)
		require.Equal(t, 1, nx.ev.Attempts, "the solve spent its attempt")
		require.Equal(t, end, nx.ev.At)
		require.Empty(t, nx.ev.Code)
		require.True(t, nx.ev.FirstFailure.IsZero())
	})
	t.Run("a failure with budget left is retried after the policy's delay", func(t *testing.T) {
		nx := afterAttempt(p, result(attemptEv(2, 0), serviceError("ERROR_CAPTCHA_UNSOLVABLE")))
		require.Equal(t, nextRetry, nx.kind)
		require.Equal(t, wire.EventRetry, nx.ev.Kind)
		require.Equal(t, p.Delay(2), nx.delay)
		require.Equal(t, nx.delay.Milliseconds(), nx.ev.DelayMS)
		require.Equal(t, 2, nx.ev.Attempts)
		require.Equal(t, first, nx.ev.FirstFailure)
		require.Equal(t, end, nx.ev.LastFailure)
		require.Equal(t, "ERROR_CAPTCHA_UNSOLVABLE", nx.ev.LastCode)
		require.Equal(t, retry.Resubmit.String(), nx.ev.Class)
	})
	t.Run("a failure on the last attempt ends dead", func(t *testing.T) {
		nx := afterAttempt(p, result(attemptEv(3, 0), serviceError("ERROR_CAPTCHA_UNSOLVABLE")))
		require.Equal(t, nextDead, nx.kind)
		require.Equal(t, verdict{reason: retry.ReasonAttemptsExhausted, code: "ERROR_CAPTCHA_UNSOLVABLE",
			detail: "the service says ERROR_CAPTCHA_UNSOLVABLE"}, nx.verdict)
		require.Equal(t, 3, nx.ev.Attempts)
	})
	t.Run("no free thread at the service snoozes and spends nothing", func(t *testing.T) {
		nx := afterAttempt(p, result(attemptEv(2, 1), serviceError("ERROR_NO_SLOT_AVAILABLE")))
		require.Equal(t, nextRetry, nx.kind)
		require.Equal(t, wire.EventSnooze, nx.ev.Kind)
		require.Equal(t, 1, nx.ev.Attempts, "the refused attempt is not spent")
		require.Equal(t, 2, nx.ev.Snoozes)
		require.Equal(t, p.SnoozeDelay(2), nx.delay)
	})
	t.Run("a permanent error ends dead at once", func(t *testing.T) {
		nx := afterAttempt(p, result(attemptEv(1, 0), serviceError("ERROR_PAGEURL")))
		require.Equal(t, nextDead, nx.kind)
		require.Equal(t, retry.ReasonPermanent, nx.verdict.reason)
		require.Equal(t, "ERROR_PAGEURL", nx.verdict.code)
	})
	t.Run("a refused key stops the worker and spends nothing", func(t *testing.T) {
		nx := afterAttempt(p, result(attemptEv(1, 0), serviceError("ERROR_WRONG_USER_KEY")))
		require.Equal(t, nextStop, nx.kind)
		require.Equal(t, wire.EventHandback, nx.ev.Kind)
		require.Equal(t, 0, nx.ev.Attempts)
		require.Equal(t, "ERROR_WRONG_USER_KEY", nx.ev.Code)
	})
	t.Run("a stopping worker hands back without spending", func(t *testing.T) {
		r := result(attemptEv(2, 0), fmt.Errorf("poll: %w", context.Canceled))
		r.shutdown = true
		nx := afterAttempt(p, r)
		require.Equal(t, nextHandback, nx.kind)
		require.Equal(t, wire.EventHandback, nx.ev.Kind)
		require.Equal(t, 1, nx.ev.Attempts)
		require.Equal(t, "SHUTDOWN", nx.ev.Code)
		require.Empty(t, nx.ev.Class)

		r.stopCode = "ERROR_KEY_DOES_NOT_EXIST"
		nx = afterAttempt(p, r)
		require.Equal(t, "ERROR_KEY_DOES_NOT_EXIST", nx.ev.Code, "a hand-back says why the worker stopped")
		require.Equal(t, retry.Fatal.String(), nx.ev.Class)
	})
	t.Run("a solve cut off by the task's deadline ends dead, expired", func(t *testing.T) {
		r := result(attemptEv(1, 0), fmt.Errorf("poll: %w", context.DeadlineExceeded))
		r.deadline = end
		nx := afterAttempt(p, r)
		require.Equal(t, nextDead, nx.kind)
		require.Equal(t, verdict{reason: retry.ReasonExpired, code: "DEADLINE_PASSED"}, nx.verdict)
		require.Equal(t, end, nx.ev.FirstFailure)
	})
	t.Run("a retry that would come due after the deadline ends dead", func(t *testing.T) {
		r := result(attemptEv(1, 0), serviceError("ERROR_CAPTCHA_UNSOLVABLE"))
		r.deadline = end.Add(p.Delay(1) / 2)
		nx := afterAttempt(p, r)
		require.Equal(t, nextDead, nx.kind)
		require.Equal(t, retry.ReasonExpired, nx.verdict.reason)
	})
}

func TestOnConflict(t *testing.T) {
	t.Parallel()
	before := taskstore.GenState{Gen: 5, Seq: 9, Last: wire.Event{Kind: wire.EventAttempt}, LastSeq: 9}
	othersWrote := before
	othersWrote.Seq = 12
	require.Equal(t, conflictRetry, onConflict(before, othersWrote, false), "only other generations wrote")
	require.Equal(t, conflictStored, onConflict(before, othersWrote, true), "the record's acknowledgement was lost")
	moved := othersWrote
	moved.Last, moved.LastSeq = wire.Event{Kind: wire.EventRetry}, 12
	require.Equal(t, conflictMoved, onConflict(before, moved, false), "another delivery of this generation moved on")
	finished := before
	finished.Outcome = true
	require.Equal(t, conflictMoved, onConflict(before, finished, false))
}

// An attempt that is still the last event died with its worker.
func TestSpentAttempts(t *testing.T) {
	t.Parallel()
	attempts, crashed := spentAttempts(wire.Event{Kind: wire.EventAttempt, Attempts: 2})
	require.Equal(t, 2, attempts)
	require.True(t, crashed, "an attempt that is still the last event died with its worker")
	attempts, crashed = spentAttempts(wire.Event{Kind: wire.EventRetry, Attempts: 2})
	require.Equal(t, 2, attempts)
	require.False(t, crashed)
}

// A dead letter's detail never carries a URL's path.
func TestSafeDetail(t *testing.T) {
	t.Parallel()
	require.Equal(t, `params.x: want a string, got ["<url on shop.example>"]`, safeDetail(`params.x: want a string, got ["https://shop.example/secret/path?q=1"]`))
	require.NotContains(t, safeDetail("see ftp://files.example/a/b"), "/a/b")
}

// Which last event leaves a captcha to the next attempt: an attempt's
// accepted, held or answered event (its worker died while polling it), or
// a handback that names one (its worker stopped). Those of an attempt
// under way also make a crash, counted against the budget; a handback
// does not.
func TestCaptchaToResume(t *testing.T) {
	t.Parallel()
	at := d0.Add(-time.Minute)
	tests := []struct {
		kind    wire.EventKind
		id      string
		resume  bool
		crashed bool
	}{
		{wire.EventAttempt, "", false, true}, // died before in.php answered, or its answer was lost
		{wire.EventAccepted, "7001", true, true},
		{wire.EventHeld, "7001", true, true},
		{wire.EventAnswered, "7001", true, true},
		{wire.EventHandback, "7001", true, false},
		{wire.EventHandback, "", false, false},
		{wire.EventRetry, "7001", false, false}, // what became of it is the retry's code: a new captcha
		{wire.EventSnooze, "", false, false},
	}
	for _, tt := range tests {
		last := wire.Event{Kind: tt.kind, Attempts: 1, CaptchaID: tt.id, AcceptedAt: at}
		id, got, ok := captchaToResume(last)
		require.Equal(t, tt.resume, ok, "%s %q", tt.kind, tt.id)
		if ok {
			require.Equal(t, tt.id, id)
			require.True(t, got.Equal(at))
		}
		carried, crashed := carryOver(last, d0)
		require.Equal(t, tt.crashed, crashed, "%s", tt.kind)
		require.Equal(t, 1, carried.Attempts, "%s: a crash stays spent, nothing else is", tt.kind)
		if tt.crashed {
			require.Equal(t, resumeToken, resumeFrom(taskstore.GenState{Last: last}, d0), "%s: a token may be there", tt.kind)
		}
	}
}
