// res.php: polls of one captcha or, when enabled, of many, and reports.

package fakeapi

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/captchaq/captchaq/internal/dialect/classic"
)

func (s *Server) result(w http.ResponseWriter, jsonOut bool, form values) {
	action := form.get("action")
	id := form.get("id")
	switch action {
	case "":
		s.reply(w, jsonOut, "", classic.CodeEmptyAction, nil, "")
		return
	case classic.ActionGetBalance:
		// A bare number in plain text, the request string with json=1
		// (2captcha/2captcha-go, GetBalance; 2captcha/2captcha-python,
		// balance).
		s.mu.Lock()
		left := s.cfg.Balance - s.stats.Spent
		s.mu.Unlock()
		bal := strconv.FormatFloat(left, 'f', 5, 64)
		classic.WriteBare(w, jsonOut, bal)
		return
	case classic.ActionGet, classic.ActionReportGood, classic.ActionReportBad:
	default:
		s.reply(w, jsonOut, "", classic.CodeBadParameters, nil, "")
		return
	}
	if ids := form.get("ids"); action == classic.ActionGet && id == "" && ids != "" && s.cfg.BatchPolls {
		s.batch(w, jsonOut, strings.Split(ids, ","))
		return
	}
	if id == "" {
		s.reply(w, jsonOut, "", classic.CodeWrongCaptchaID, nil, "")
		return
	}
	if _, err := strconv.ParseUint(id, 10, 64); err != nil {
		s.reply(w, jsonOut, "", classic.CodeWrongIDFormat, nil, "")
		return
	}
	s.mu.Lock()
	now := s.now()
	s.sweep()
	c, ok := s.captchas[id]
	if action == classic.ActionGet && ok {
		s.stats.ResCallsPerCaptcha[id]++
		s.stats.MaxResCallsPerCaptcha = max(s.stats.MaxResCallsPerCaptcha, s.stats.ResCallsPerCaptcha[id])
	}
	switch {
	case !ok:
		s.mu.Unlock()
		s.reply(w, jsonOut, "", classic.CodeWrongCaptchaID, nil, "")
	case action != classic.ActionGet:
		if c.code != "" || now.Before(c.readyAt) {
			s.mu.Unlock()
			s.reply(w, jsonOut, "", classic.CodeReportNotRecorded, nil, "")
			return
		}
		if c.reported {
			s.mu.Unlock()
			s.reply(w, jsonOut, "", classic.CodeDuplicateReport, nil, "")
			return
		}
		c.reported = true
		if action == classic.ActionReportGood {
			s.stats.ReportsGood++
		} else {
			s.stats.ReportsBad++
		}
		s.mu.Unlock()
		classic.WriteBare(w, jsonOut, classic.CodeReportRecorded) // bare, as the service sends it
	case now.Before(c.readyAt):
		s.mu.Unlock()
		s.reply(w, jsonOut, "", classic.CodeNotReady, nil, "")
	default:
		s.pickup(c, now)
		s.mu.Unlock()
		s.reply(w, jsonOut, c.kind, c.code, c.answer, c.userAgent)
	}
}

// pickup records the first time res.php returned c's answer or error code.
// Callers hold s.mu.
func (s *Server) pickup(c *captcha, now time.Time) {
	if c.fetched {
		return
	}
	c.fetched = true
	lag := now.Sub(c.readyAt)
	s.stats.Pickups++
	s.lagSum += lag
	if len(s.lags) == maxLags {
		s.lags, s.lagsFrom = s.lags[maxLags/2:], s.lagsFrom+maxLags/2
	}
	s.lags = append(s.lags, lag)
	s.stats.PickupLagMax = max(s.stats.PickupLagMax, lag)
	if c.code == "" {
		s.stats.Solved++
	} else {
		s.stats.Failed++
	}
	if c.code == classic.CodeCaptchaUnsolvable {
		// "The captcha price is automatically returned to your balance"
		// (2captcha.com/api-docs/error-codes, error 12).
		s.stats.Spent -= c.price
		s.stats.Refunded++
		s.stats.PerTask[c.task]--
	}
}

// batch answers a batch poll, action=get&ids=<id>,<id>,… (at most 100 ids):
// each captcha's state in the order asked, joined by "|": its answer as
// text, CAPCHA_NOT_READY, or an error code (ERROR_WRONG_CAPTCHA_ID for an
// unknown id). As plain text the bare list; with json=1 the list is the
// request string of status 1. A ready captcha counts as picked up.
func (s *Server) batch(w http.ResponseWriter, jsonOut bool, ids []string) {
	if len(ids) > classic.MaxBatchIDs {
		s.reply(w, jsonOut, "", classic.CodeBadParameters, nil, "")
		return
	}
	for _, id := range ids {
		if _, err := strconv.ParseUint(id, 10, 64); err != nil {
			s.reply(w, jsonOut, "", classic.CodeWrongIDFormat, nil, "")
			return
		}
	}
	states := make([]string, len(ids))
	s.mu.Lock()
	now := s.now()
	s.sweep()
	s.stats.BatchCalls++
	s.stats.BatchAsked += len(ids)
	for i, id := range ids {
		c, ok := s.captchas[id]
		switch {
		case !ok:
			states[i] = classic.CodeWrongCaptchaID
		case now.Before(c.readyAt):
			states[i] = classic.CodeNotReady
		case c.code != "":
			states[i] = c.code
			s.pickup(c, now)
		default:
			states[i] = classic.PlainText(c.answer) // a string, or an object (GeeTest)
			s.pickup(c, now)
		}
	}
	s.mu.Unlock()
	classic.WriteStates(w, jsonOut, states)
}
