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
	case classic.ActionThreadsInfo:
		if s.cfg.Service == Service2Captcha {
			break // 2captcha publishes no such action: it falls to ERROR_BAD_PARAMETERS
		}
		if code := s.cfg.ThreadsInfoCode; code != "" {
			s.reply(w, jsonOut, "", code, nil, "")
			return
		}
		// The account's threads as CaptchaAI's MCP server reports them,
		// "threads, working_threads, free_threads"
		// (pypi.org/project/captchaai-mcp, get_threads), in both readings
		// the gateway answers (classic.WriteThreadsInfo): working are the
		// captchas being solved.
		s.mu.Lock()
		s.sweep()
		working := len(s.solving)
		s.mu.Unlock()
		classic.WriteThreadsInfo(w, jsonOut, classic.ThreadsInfo{Threads: s.cfg.Threads, WorkingThreads: working,
			FreeThreads: max(s.cfg.Threads-working, 0)})
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
	if action != classic.ActionGet {
		code := s.report(id, action == classic.ActionReportGood)
		if code == classic.CodeReportRecorded {
			classic.WriteBare(w, jsonOut, code) // bare, as the service sends it
			return
		}
		s.reply(w, jsonOut, "", code, nil, "")
		return
	}
	c, state := s.poll(id)
	if state != "" {
		s.reply(w, jsonOut, "", state, nil, "")
		return
	}
	s.reply(w, jsonOut, c.kind, c.code, c.answer, c.userAgent)
}

// poll is a poll of captcha id, by either dialect: the captcha once its
// solve time has passed (its answer, or its code, picked up), else
// CAPCHA_NOT_READY or, for an id the service does not know,
// ERROR_WRONG_CAPTCHA_ID.
func (s *Server) poll(id string) (*captcha, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.sweep()
	c, ok := s.captchas[id]
	if !ok {
		return nil, classic.CodeWrongCaptchaID
	}
	s.stats.ResCallsPerCaptcha[id]++
	s.stats.MaxResCallsPerCaptcha = max(s.stats.MaxResCallsPerCaptcha, s.stats.ResCallsPerCaptcha[id])
	if now.Before(c.readyAt) {
		return c, classic.CodeNotReady
	}
	s.pickup(c, now)
	return c, ""
}

// report records a report on captcha id's answer, by either dialect:
// OK_REPORT_RECORDED, or the code refusing it (an unknown id, a captcha
// not answered yet or without an answer, a second report).
func (s *Server) report(id string, good bool) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.sweep()
	c, ok := s.captchas[id]
	switch {
	case !ok:
		return classic.CodeWrongCaptchaID
	case c.code != "" || now.Before(c.readyAt):
		return classic.CodeReportNotRecorded
	case c.reported:
		return classic.CodeDuplicateReport
	}
	c.reported = true
	if good {
		s.stats.ReportsGood++
	} else {
		s.stats.ReportsBad++
	}
	return classic.CodeReportRecorded
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
