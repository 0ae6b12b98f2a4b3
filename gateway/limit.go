package gateway

import (
	"time"

	"github.com/captchaq/captchaq/internal/dialect/classic"
)

// Limits mirror the service's limits on its callers, per gateway key, so a
// script that floods or polls abusively meets the codes it would meet at the
// service. The zero value takes the defaults; a negative count turns a
// limit off.
type Limits struct {
	// Submits in.php calls are allowed per SubmitWindow; the next one is
	// answered MAX_USER_TURN, and so is every in.php call for BanTime.
	// Default the service's own rule: 60 per 3 s and a 10 s ban
	// (classic.SubmitLimit, SubmitWindow, BanTime).
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
	r := l.submitRule().Or(classic.SubmitRule)
	l.Submits, l.SubmitWindow, l.BanTime = r.Limit, r.Window, r.Ban
	if l.Polls == 0 {
		l.Polls = 300
	}
	if l.PollWindow <= 0 {
		l.PollWindow = 3 * time.Second
	}
	return l
}

// submitRule is the in.php rule l sets.
func (l Limits) submitRule() classic.Rule {
	return classic.Rule{Limit: l.Submits, Window: l.SubmitWindow, Ban: l.BanTime}
}
