package solver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/captchaq/captchaq/retry"
)

// wait polls res.php for captcha id on the schedule of req's kind: on its own,
// or through the Client's batcher (batch.go), which tells it when a batch call
// found it ready. When h (nil: none) is told to hand its thread back
// (ready.go), it calls h.onBack.
func (c *Client) wait(ctx context.Context, req Request, id string, submitted time.Time, h *holder) (Answer, error) {
	kind := Kind(req.Method, req.Params)
	kt := c.timing.forKind(kind)
	sched := c.poller.schedule(kind, kt)
	deadline := submitted.Add(kt.maxWait)
	var called <-chan struct{} // the service's callback (pingback.go); nil: none
	callbacks := 0
	if c.pingsBack() {
		ch, stop := c.pingback.register(id)
		defer stop()
		called = ch
		// Polls only for a callback that does not come: Grace after the
		// usual first poll, or after nearly every captcha of the kind was
		// ready, whichever is later.
		pk := kt
		pk.first += c.pingbackGrace()
		if d, ok := c.poller.readyBy(kind, kt, pingbackQuantile); ok {
			pk.first = max(pk.first, d+c.pingbackGrace())
		}
		// The callbacks' fetches count against MaxCalls too.
		if sched = pk.fixedSchedule(); len(sched) == 0 {
			sched = []time.Duration{kt.maxWait}
		} else if n := max(kt.maxCalls-pingbackFetches, 1); len(sched) > n {
			sched = sched[:n]
		}
	}
	var handBack <-chan struct{} // nil: never
	var confirm <-chan struct{}  // nil: never
	if h != nil {
		handBack = h.back
		if called == nil {
			confirm = h.confirm
		}
	}
	var w *pollWaiter
	var news <-chan struct{} // nil without a batcher: never ready
	if c.batch != nil && called == nil {
		if w = c.batch.add(id, kind); w != nil {
			defer c.batch.remove(w)
			news = w.signal
		}
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()

	var lastNotReady time.Duration // offset at which the service last said not ready
	var lastErr error
	fails := 0              // own polls in a row that got no word from the service
	var heldSince time.Time // when the first of them failed
	own := false            // a batch call failed or was not understood: the next scheduled poll is our own
	polls := 0
	// An unknown-id reply for a live captcha is asked again once
	// (recheck) before it is given up: unknown is that reply while its
	// re-check is still to come.
	var unknown error
	rechecked := false
	// solved learns from the window the answer became ready in, seen after
	// submission, and logs the solve.
	solved := func(a Answer, seen time.Duration) (Answer, error) {
		c.poller.observe(kind, lastNotReady, seen)
		c.log.LogAttrs(ctx, slog.LevelDebug, "captcha solved",
			slog.String("method", req.Method), slog.String("captcha_id", id),
			slog.Int("polls", polls), slog.Duration("elapsed", c.now().Sub(submitted)))
		return a, nil
	}
	// answeredAgain tells of the end of a hold (WithHeld): the service
	// answered about the captcha at, after polls that got no word.
	answeredAgain := func(at time.Time) {
		if fails > 0 {
			held(ctx, Held{ID: id, Since: heldSince, Code: CodeOf(lastErr), Again: at})
		}
	}
	// fetch asks res.php about id on its own and says whether that ended the
	// wait, with what. readyAt is when a batch call saw it ready (zero: this
	// call tells).
	fetch := func(readyAt time.Time) (done bool, a Answer, err error) {
		sent := c.now()
		a, err = c.Fetch(ctx, id)
		polls++
		unknown = nil // this call is the re-check, if one was due
		// The service answered somewhere between sending and receiving.
		seen := sent.Add(c.now().Sub(sent) / 2).Sub(submitted)
		if !readyAt.IsZero() {
			seen = readyAt.Sub(submitted)
		}
		if cls := ClassOf(err); ctx.Err() == nil && cls != retry.Transient && cls != retry.Capacity {
			answeredAgain(sent)
		}
		switch cls := ClassOf(err); {
		case err == nil:
			a, err = solved(a, seen)
			return true, a, err
		case ctx.Err() != nil:
			return true, Answer{}, ended(ctx, id, heldSince, fails, lastErr)
		case cls == retry.Poll:
			lastNotReady, fails = max(lastNotReady, seen), 0
			c.occ.notReady(h, lastNotReady)
		case cls == retry.Transient || cls == retry.Capacity:
			// The service did not say anything about the captcha: a
			// refused or cut connection, a timeout, an HTTP 5xx, a body
			// that is no reply, or a 429 / ERROR: 1005 asking to slow
			// down. The service accepted it and is paid for it, so it is
			// kept and polled again, however long that lasts: only the
			// service saying it does not know the id (ERROR_WRONG_CAPTCHA_ID,
			// ERROR_NO_SUCH_CAPCHA_ID: codes.go; twice for a live captcha,
			// recheck), the task's ctx, or an answer gives it up.
			fails++
			lastErr = err
			if fails == 1 {
				heldSince = sent
				held(ctx, Held{ID: id, Since: heldSince, Code: CodeOf(err)})
			}
			c.log.LogAttrs(ctx, slog.LevelDebug, "poll failed; the captcha is kept and polled again",
				slog.String("captcha_id", id), slog.String("code", CodeOf(err)), slog.Int("in_a_row", fails))
		case CaptchaUnknown(err) && !rechecked && c.now().Before(deadline):
			// The service says it does not know the id of a captcha it
			// accepted within the wait for it (recheck): once is asked
			// again, by the next poll, the captcha's own.
			rechecked, unknown, own = true, err, true
			c.log.LogAttrs(ctx, slog.LevelDebug, "the service says it does not know a captcha it accepted: asked once more before it is given up",
				slog.String("captcha_id", id), slog.String("code", CodeOf(err)))
		default:
			return true, Answer{}, err
		}
		return false, Answer{}, nil
	}

	var fired time.Time // when the last scheduled poll came
	lastNow := c.now()  // the latest clock reading, to see the clock go back
	i := 0
	for i < len(sched) {
		if now := c.now(); lastNow.Sub(now) > clockBack {
			// The clock went back: the plan is moved back as far, so its
			// polls keep their spacing in the time that really passes
			// instead of waiting for the clock to come back to them.
			d := lastNow.Sub(now)
			submitted, deadline, fired, lastNow = submitted.Add(-d), deadline.Add(-d), fired.Add(-d), now
		} else {
			lastNow = latest(lastNow, now)
		}
		at, last := submitted.Add(sched[i]), i == len(sched)-1
		if !c.now().Before(deadline) && polls > 0 {
			// Past the deadline: a call took that long. A captcha resumed
			// past its deadline (Request.CaptchaID) is asked once first:
			// the service may have its answer.
			break
		}
		if i > 0 {
			// Behind the schedule (a slow call, a starved process), keep its
			// spacing from the poll before instead of making up the missed
			// polls at once: that would send a burst of own polls or, with a
			// batcher, earn calls faster than it spends them (the unspent
			// are dropped) and run through the budget without asking.
			at = latest(at, fired.Add(sched[i]-sched[i-1]))
		}
		if at.After(deadline) {
			// A poll planned or pushed past the deadline (an adaptive
			// plan's grid ends up to a step beyond MaxWait) is made at the
			// deadline, the captcha's own and its last: a captcha ready
			// by then is not given up before.
			at, last = deadline, true
		}
		timer.Reset(at.Sub(c.now()))
		select {
		case <-ctx.Done():
			return Answer{}, ended(ctx, id, heldSince, fails, lastErr)
		case <-timer.C:
			// A scheduled poll: with a batcher it earns the call, except
			// the last, which is always the captcha's own, and the first
			// after a batch call failed.
			fired = c.now()
			i++
			if w != nil && !last && !own && c.batch.on() {
				c.batch.earn()
				continue
			}
			own = false
			if done, a, err := fetch(time.Time{}); done {
				return a, err
			}
			if last {
				i = len(sched)
			}
		case <-handBack:
			handBack = nil
			h.onBack()
		case <-confirm:
			// The hand-back asks whether this captcha is done (ready.go,
			// confirm): its next scheduled poll is made now instead, so
			// the schedule's calls are not exceeded. The last is kept for
			// its time: it is the captcha's own, and giving up after it
			// means what it always meant.
			if last {
				c.occ.declined(h)
				continue
			}
			i++
			if w != nil && !own && c.batch.on() {
				c.batch.earn()
				continue
			}
			own = false
			failed := fails
			done, a, err := fetch(time.Time{})
			switch {
			case fails > failed:
				// Failed, it says nothing: not asked again before the
				// time of the poll it took (ready.go, failed).
				c.occ.failed(h, submitted.Add(sched[i-1]))
			case !done && len(sched)-i <= confirmKeep:
				// Not ready, with its last polls left: confirmed at most
				// once a poll interval from now on (confirmKeep).
				c.occ.notYet(h, c.now().Add(kt.interval))
			}
			c.occ.settled(h)
			if done {
				return a, err
			}
		case <-called:
			// Ready about now: fetch the answer (never taken from the
			// callback), and learn the ready time as this moment.
			if callbacks++; callbacks >= pingbackFetches {
				called = nil
			}
			lastNotReady = max(lastNotReady, c.now().Sub(submitted)-time.Millisecond)
			if done, a, err := fetch(time.Time{}); done {
				return a, err
			}
		case <-news:
			for _, n := range w.take() {
				switch n.kind {
				case newsNotReady:
					answeredAgain(n.seen)
					lastNotReady, fails = max(lastNotReady, n.seen.Sub(submitted)), 0
					c.occ.notReady(h, lastNotReady)
					polls++
				case newsFailed:
					// Failures in a row are counted on the captcha's own
					// polls, as without batching.
					own, lastErr = true, n.err
					c.occ.settled(h)
				case newsFatal:
					return Answer{}, n.err
				case newsAnswer:
					polls++
					sol, _ := json.Marshal(n.answer)
					return solved(Answer{Solution: sol, CaptchaID: id}, n.seen.Sub(submitted))
				case newsFetch:
					if !n.seen.IsZero() {
						// The service answered about it: the failures in a
						// row, if any, are over; fetch the answer it has.
						answeredAgain(n.seen)
						fails = 0
					}
					if done, a, err := fetch(n.seen); done {
						return a, err
					}
				}
			}
		}
	}
	if unknown != nil {
		// The schedule ran out on an unknown-id reply: its re-check.
		if done, a, err := c.recheck(ctx, id, kt, unknown, fetch); done {
			return a, err
		}
	}
	if fails > 0 {
		// The last poll got no word from the service: the schedule ran out
		// during an outage. Whether the captcha is ready is unknown, and
		// giving it up would pay for it again: it is held and polled on a
		// backoff until the service answers.
		if done, a, err := c.hold(ctx, id, kt, heldSince, &fails, &lastErr, fetch); done {
			return a, err
		}
	}
	code, why := CodePollLimit, fmt.Sprintf("no answer after %d res.php calls", len(sched))
	if len(sched) < kt.maxCalls || !c.now().Before(deadline) {
		code, why = CodeTimeout, fmt.Sprintf("no answer within %v", kt.maxWait)
	}
	if lastErr != nil {
		why += fmt.Sprintf(" (last poll error: %v)", lastErr)
	}
	if c.outage.active() {
		// The time ran out while the service did not answer: the
		// outage's, a capacity wait, not the task's attempt.
		code = CodeUnreachable
	}
	return Answer{}, newError("res.php", code, errors.New(why)).about(id)
}

// recheck: the service answered that it does not know captcha id
// (ERROR_NO_SUCH_CAPCHA_ID, ERROR_WRONG_CAPTCHA_ID: CaptchaUnknown) while
// the captcha was live, accepted by it within the wait for it. The codes
// mean an id the service never issued or has forgotten: "You've provided
// incorrect captcha ID" (CaptchaAI, docs.captchaai.com/api/api-error-handling,
// res.php errors; 2captcha, 2captcha.com/api-docs/error-codes, error 16),
// and a task "that does not exist in your current task list or has been
// expired" in the compatible createTask API (anti-captcha.com/apidoc). An
// id the service gave moments ago is neither, and services answer so for
// a moment: giving the captcha up would pay for it again. So the captcha
// is asked once more, a poll interval later, and given up only if the
// service says it again.
func (c *Client) recheck(ctx context.Context, id string, kt kindTiming, unknown error,
	fetch func(time.Time) (bool, Answer, error)) (bool, Answer, error) {
	timer := time.NewTimer(kt.interval)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return true, Answer{}, fmt.Errorf("solver: captcha %s, unknown to the service once (%w): %w", id, unknown, ctx.Err())
	case <-timer.C:
	}
	return fetch(time.Time{})
}

// holdBackoffCap bounds the backoff of a held captcha's polls, in poll
// intervals: 6 × 5 s = 30 s in production.
const holdBackoffCap = 6

// holdEvery is the wait before the next poll of a captcha held through an
// outage after fails polls in a row got no word from the service: twice the
// poll interval, doubling, at most holdBackoffCap intervals. CaptchaAI
// advises to retry a transient server error after about 10 s, with
// exponential backoff (docs.captchaai.com/pages/err_handling, "Quick
// handling rules"), and to wait 5 s after anything that is no reply
// (docs.captchaai.com/api/api-error-handling).
func holdEvery(interval time.Duration, fails int) time.Duration {
	d := interval * 2
	for i := 1; i < fails && d < holdBackoffCap*interval; i++ {
		d *= 2
	}
	return min(d, holdBackoffCap*interval)
}

// jitter spreads d by ±20 %: captchas held through one outage failed at
// about the same times, and would otherwise all poll again at once when
// the service comes back.
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// hold polls captcha id after its schedule ran out while the service gave
// no word of it (fails polls in a row failed, the first at since), on the
// holdEvery backoff, until the service says something about it (fetch's
// done: an answer, an error code about the captcha) or ctx ends. A "not
// ready" ends the hold without an answer (done false): the schedule is
// spent, and the caller gives up as it would have without the outage.
func (c *Client) hold(ctx context.Context, id string, kt kindTiming, since time.Time, fails *int, lastErr *error,
	fetch func(time.Time) (bool, Answer, error)) (bool, Answer, error) {
	c.log.LogAttrs(ctx, slog.LevelDebug, "the service gives no word of an accepted captcha; holding it and polling again",
		slog.String("captcha_id", id), slog.Time("held_since", since))
	timer := time.NewTimer(jitter(holdEvery(kt.interval, *fails)))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return true, Answer{}, ended(ctx, id, since, *fails, *lastErr)
		case <-timer.C:
		}
		if done, a, err := fetch(time.Time{}); done {
			return true, a, err
		}
		if *fails == 0 {
			return false, Answer{}, nil // the service answered: not ready
		}
		timer.Reset(jitter(holdEvery(kt.interval, *fails)))
	}
}

// confirmKeep is how many of its scheduled polls a captcha keeps from the
// hand-back's confirms: once no more are left, it is confirmed at most once
// a poll interval. The confirm that finds a captcha likeliest done takes
// its next scheduled poll, and the oldest captcha of a Client stays the
// likeliest: asked at every decision (five times a second), it is picked
// up within moments of being ready, which is most of what the confirms
// gain. A straggler asked so spent every poll of its schedule within
// seconds, before it was ready, and then waited for its last one at the
// end of MaxWait (the 100-s idle that ended some bursts). With its last
// confirmKeep polls (twice the reserve) spent at most one per interval,
// a straggler is still looked at every interval for a further half a
// minute (6 × 5 s), and then on its reserve.
const confirmKeep = 2 * reserveCalls

// ended is the error of a wait that ctx ended: ctx's error, and, when the
// captcha's last polls got no word from the service (fails of them, the
// first at since), the last poll's error too, so that the caller sees what
// the service did (CodeOf, ClassOf) beside why the wait ended (errors.Is).
func ended(ctx context.Context, id string, since time.Time, fails int, last error) error {
	if fails == 0 || last == nil {
		return fmt.Errorf("solver: captcha %s: %w", id, ctx.Err())
	}
	return fmt.Errorf("solver: captcha %s, held through %d failed polls since %s (last: %w): %w",
		id, fails, since.Format(time.RFC3339), last, ctx.Err())
}
