// Solving one delivery: the solver runs under the task's deadline while the
// lease is kept alive, and the news of its captcha (accepted, held) is
// recorded as it comes, so that the task's next worker polls the captcha
// instead of paying for another.

package executor

import (
	"context"
	"log/slog"
	"time"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream/wire"
)

// solve runs the solver on req under the task's deadline, keeping the
// lease alive with InProgress while it works. Every captcha id the service
// accepts for it is recorded as it comes (accepted), after attempt, the
// attempt's event.
func (d *delivery) solve(ctx context.Context, req solver.Request, attempt wire.Event) (solver.Answer, error) {
	sctx, cancel := context.WithDeadline(ctx, d.deadline)
	defer cancel()
	sctx = solver.WithAccepted(sctx, func(a solver.Accepted) { d.accepted(ctx, attempt, a) })
	sctx = solver.WithHeld(sctx, func(h solver.Held) { d.held(ctx, attempt, h) })
	sctx = solver.WithDetach(sctx, d.detach)
	done := make(chan struct{})
	defer close(done)
	go func() {
		every := d.x.Lease()
		if pw := d.thread.AckWait(); pw > 0 && pw/3 < every {
			every = pw / 3
		}
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = d.m.InProgress()
				d.thread.KeepAlive()
			}
		}
	}()
	ans, err := d.x.Solver.Solve(sctx, req)
	if solver.ClassOf(err) != retry.Fatal {
		// The service's thread is free again: give it back at once. Not
		// after a Fatal error: the worker is stopping, and a plan thread
		// given back now could carry one more task to a service that
		// refuses the key (the worker returns it when the task ends).
		d.thread.Release()
	}
	return ans, err
}

// detach gives the delivery's worker thread and plan thread to the next
// task: its captcha waits at a service paid per solve, which counts
// neither (solver.WithDetach). The delivery goes on polling it, and ends
// as any other.
func (d *delivery) detach() {
	d.thread.Release()
	if d.slot != nil {
		d.slot.Detach()
	}
}

// canceled reports whether the delivered generation was canceled, and the
// dead letter's detail if so. A failed read is taken as "not canceled": a
// cancel is a request, and losing one to a broker hiccup costs a solve, not
// a task.
func (d *delivery) canceled(ctx context.Context) (string, bool) {
	rec, err := d.x.Store.CancelOf(ctx, d.id, d.st, d.m.Headers())
	if err != nil {
		d.log.Warn("cannot read the task's cancel record; solving it", slog.Any("error", err))
		return "", false
	}
	if rec == nil {
		return "", false
	}
	return wire.CancelDetail(rec), true
}

// accepted records that the service accepted captcha a for the attempt
// whose event is attempt (or that the attempt resumed it), before the
// captcha's first poll: the task's next worker, should this one die, polls
// it instead of paying for another. The write waits an ack wait at most:
// a broker out of reach delays the polls that long, and the captcha, not
// recorded, is then the task's only while this worker lives.
func (d *delivery) accepted(ctx context.Context, attempt wire.Event, a solver.Accepted) {
	d.captcha = a
	ev := attempt
	ev.Kind, ev.At, ev.CaptchaID, ev.AcceptedAt, ev.Resumed, ev.Replaces, ev.Code = wire.EventAccepted, d.x.Now(), a.ID, d.brokerTime(a.At), a.Resumed, a.Replaces, a.ReplacedCode
	ev.Provider, ev.Crashed = a.Provider, false
	d.captchaEvent(ctx, ev)
}

// held records that the service gives no word of the attempt's captcha
// since h.Since (held), or answered about it again (answered, h.Again):
// the trace shows the hold, and a worker that dies meanwhile leaves the
// captcha to the next as its accepted event does.
func (d *delivery) held(ctx context.Context, attempt wire.Event, h solver.Held) {
	ev := attempt
	ev.Kind, ev.At, ev.CaptchaID, ev.AcceptedAt, ev.HeldSince, ev.Code = wire.EventHeld, d.x.Now(), h.ID, d.brokerTime(d.captcha.At), h.Since, h.Code
	if !h.Again.IsZero() {
		ev.Kind, ev.At = wire.EventAnswered, h.Again
	}
	ev.Provider, ev.Crashed = d.captcha.Provider, false
	d.captchaEvent(ctx, ev)
	if d.x.FreeHeld && h.Again.IsZero() {
		// Its captcha waits for a silent service: the threads may carry
		// the next task elsewhere. The plan thread too: with a plan-wide
		// quota held by captchas at a plan that went silent, no task
		// would reach the fallback until the plan answers. Once it does,
		// the plan may hold more captchas than the quota until these end,
		// and refuses what it cannot take (a capacity wait, nothing paid).
		d.thread.Release()
		if d.slot != nil {
			d.slot.Solved()
		}
	}
}

// brokerTime is t, a time of this worker's clock, on the broker's clock;
// the zero time stays zero. When a captcha was accepted is recorded so: the
// next worker to poll it, whose clock may differ, counts its wait from the
// same instant (LocalTime on its own offset), instead of finding it minutes
// older and giving it up, paid, as past its wait.
func (d *delivery) brokerTime(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return d.x.Clock.BrokerTime(t)
}

// captchaEvent stores ev, an event about the attempt's captcha, waiting an
// ack wait at most.
func (d *delivery) captchaEvent(ctx context.Context, ev wire.Event) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.x.AckWait)
	defer cancel()
	defer context.AfterFunc(d.x.Abandon(), cancel)()
	r, err := eventRecord(d, ev)
	if err == nil {
		err = d.store(wctx, r)
	}
	if err != nil {
		d.log.Warn("cannot record the news of the attempt's captcha; it is the task's while this worker lives",
			slog.String("event", string(ev.Kind)), slog.String("captcha_id", ev.CaptchaID), slog.Any("error", err))
		return
	}
	d.observe(ev)
}
