package gateway

import (
	"sync"
	"time"
)

// Limits mirror the service's limits on its callers, per gateway key, so a
// script that floods or polls abusively meets the codes it would meet at the
// service. The zero value takes the defaults; a negative count turns a
// limit off.
type Limits struct {
	// Submits in.php calls are allowed per SubmitWindow; the next one is
	// answered MAX_USER_TURN, and so is every in.php call for BanTime.
	// Default 60 per 3 s and a 10 s ban: CaptchaAI's own limit ("You made
	// more than 60 requests to in.php within 3 seconds", MAX_USER_TURN,
	// retry after 10 s: blog.captchaai.com/captchaai-api-error-handling-decision-tree,
	// as solver/testdata/service/replies.json cites it).
	Submits      int
	SubmitWindow time.Duration
	BanTime      time.Duration
	// Polls res.php calls are allowed per PollWindow; more are answered
	// "ERROR: 1005", the service's code for too many res.php requests
	// (2captcha.com/2captcha-api#error_handling, mirrored by
	// docs.captchaai.com/api/api-error-handling; the services publish the
	// code, not the number). Default 300 per 3 s: a fleet of 180 scripts
	// each polling every 5 s, as the guides poll, stays under it.
	Polls      int
	PollWindow time.Duration
}

func (l Limits) withDefaults() Limits {
	if l.Submits == 0 {
		l.Submits = 60
	}
	if l.SubmitWindow <= 0 {
		l.SubmitWindow = 3 * time.Second
	}
	if l.BanTime <= 0 {
		l.BanTime = 10 * time.Second
	}
	if l.Polls == 0 {
		l.Polls = 300
	}
	if l.PollWindow <= 0 {
		l.PollWindow = 3 * time.Second
	}
	return l
}

// window counts calls in a sliding window; a call over the limit bans the
// caller for ban (0: only the window limits).
type window struct {
	mu       sync.Mutex
	limit    int
	span     time.Duration
	ban      time.Duration
	calls    []time.Time
	banUntil time.Time
}

func newWindow(limit int, span, ban time.Duration) *window {
	return &window{limit: limit, span: span, ban: ban}
}

// banned reports whether the window's ban holds at now.
func (w *window) banned(now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return now.Before(w.banUntil)
}

// idle reports whether the window neither bans nor counts a call within
// its span at now: forgetting it changes nothing.
func (w *window) idle(now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return !now.Before(w.banUntil) && (len(w.calls) == 0 || !w.calls[len(w.calls)-1].After(now.Add(-w.span)))
}

// allow records a call at now and reports whether it is within the limit.
func (w *window) allow(now time.Time) bool {
	if w.limit < 0 {
		return true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if now.Before(w.banUntil) {
		return false
	}
	cut := 0
	for cut < len(w.calls) && !w.calls[cut].After(now.Add(-w.span)) {
		cut++
	}
	w.calls = w.calls[cut:]
	if len(w.calls) >= w.limit {
		if w.ban > 0 {
			w.banUntil = now.Add(w.ban)
			w.calls = w.calls[:0]
		}
		return false
	}
	w.calls = append(w.calls, now)
	return true
}
