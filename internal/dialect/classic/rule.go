package classic

import (
	"sync"
	"time"
)

// The in.php rule: a key may make SubmitLimit in.php calls in any
// SubmitWindow; the next one is answered MAX_USER_TURN, and so is every
// in.php call of the key for BanTime. CaptchaAI's own error table: "You made
// more than 60 requests to in.php within 3 seconds", MAX_USER_TURN, retry
// after 10 s (blog.captchaai.com/captchaai-api-error-handling-decision-tree,
// as solver/testdata/service/replies.json cites it).
const (
	SubmitLimit  = 60
	SubmitWindow = 3 * time.Second
	BanTime      = 10 * time.Second
)

// Rule is a rule of the in.php kind: Limit calls in any sliding Window,
// and the call over it bans the caller for Ban.
type Rule struct {
	Limit  int
	Window time.Duration
	Ban    time.Duration
}

// SubmitRule is the in.php rule.
var SubmitRule = Rule{Limit: SubmitLimit, Window: SubmitWindow, Ban: BanTime}

// Or returns r with each zero field taken from d: a Limit of 0, a Window
// or a Ban of 0 or less. A negative Limit stays: no limit.
func (r Rule) Or(d Rule) Rule {
	if r.Limit == 0 {
		r.Limit = d.Limit
	}
	if r.Window <= 0 {
		r.Window = d.Window
	}
	if r.Ban <= 0 {
		r.Ban = d.Ban
	}
	return r
}

// Window enforces a rule of the in.php kind on the server side (the
// gateway for its callers, the emulator as the service): at most a limit
// of calls in any sliding span, and the call over it bans the caller for a
// while. It is safe for concurrent use.
type Window struct {
	mu       sync.Mutex
	limit    int
	span     time.Duration
	ban      time.Duration
	calls    []time.Time
	banUntil time.Time
}

// NewWindow returns a Window allowing limit calls per span (a negative
// limit: every call) whose call over the limit bans for ban (0: only the
// span limits). NewSubmitWindow is the in.php rule's.
func NewWindow(limit int, span, ban time.Duration) *Window {
	return &Window{limit: limit, span: span, ban: ban}
}

// NewRuleWindow returns the Window enforcing r.
func NewRuleWindow(r Rule) *Window { return NewWindow(r.Limit, r.Window, r.Ban) }

// NewSubmitWindow returns the Window of the in.php rule, SubmitRule.
func NewSubmitWindow() *Window { return NewRuleWindow(SubmitRule) }

// Banned reports whether the window's ban holds at now.
func (w *Window) Banned(now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return now.Before(w.banUntil)
}

// Idle reports whether the window neither bans nor counts a call within
// its span at now: forgetting it changes nothing.
func (w *Window) Idle(now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return !now.Before(w.banUntil) && (len(w.calls) == 0 || !w.calls[len(w.calls)-1].After(now.Add(-w.span)))
}

// Allow records a call at now and reports whether it is within the limit.
// The call over the limit starts the ban and is not counted; calls during
// the ban are refused and not counted either.
func (w *Window) Allow(now time.Time) bool {
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
