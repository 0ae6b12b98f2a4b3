// res.php: polls of one captcha or, when enabled, of many, and reports.

package fakeapi

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

func (s *Server) result(w http.ResponseWriter, jsonOut bool, form values) {
	action := form.get("action")
	id := form.get("id")
	switch action {
	case "":
		s.reply(w, jsonOut, "", "ERROR_EMPTY_ACTION", nil, "")
		return
	case "getbalance":
		// A bare number in plain text, the request string with json=1
		// (2captcha/2captcha-go, GetBalance; 2captcha/2captcha-python,
		// balance).
		s.mu.Lock()
		left := s.cfg.Balance - s.stats.Spent
		s.mu.Unlock()
		bal := strconv.FormatFloat(left, 'f', 5, 64)
		if !jsonOut {
			w.Header().Set("Content-Type", "text/plain")
			io.WriteString(w, bal)
			return
		}
		v, _ := json.Marshal(bal)
		s.reply(w, jsonOut, "", "", v, "")
		return
	case "get", "reportgood", "reportbad":
	default:
		s.reply(w, jsonOut, "", "ERROR_BAD_PARAMETERS", nil, "")
		return
	}
	if ids := form.get("ids"); action == "get" && id == "" && ids != "" && s.cfg.BatchPolls {
		s.batch(w, jsonOut, strings.Split(ids, ","))
		return
	}
	if id == "" {
		s.reply(w, jsonOut, "", "ERROR_WRONG_CAPTCHA_ID", nil, "")
		return
	}
	if _, err := strconv.ParseUint(id, 10, 64); err != nil {
		s.reply(w, jsonOut, "", "ERROR_WRONG_ID_FORMAT", nil, "")
		return
	}
	s.mu.Lock()
	now := s.now()
	s.sweep()
	c, ok := s.captchas[id]
	if action == "get" && ok {
		s.stats.ResCallsPerCaptcha[id]++
		s.stats.MaxResCallsPerCaptcha = max(s.stats.MaxResCallsPerCaptcha, s.stats.ResCallsPerCaptcha[id])
	}
	switch {
	case !ok:
		s.mu.Unlock()
		s.reply(w, jsonOut, "", "ERROR_WRONG_CAPTCHA_ID", nil, "")
	case action != "get":
		if c.code != "" || now.Before(c.readyAt) {
			s.mu.Unlock()
			s.reply(w, jsonOut, "", "ERROR_REPORT_NOT_RECORDED", nil, "")
			return
		}
		if c.reported {
			s.mu.Unlock()
			s.reply(w, jsonOut, "", "ERROR_DUPLICATE_REPORT", nil, "")
			return
		}
		c.reported = true
		if action == "reportgood" {
			s.stats.ReportsGood++
		} else {
			s.stats.ReportsBad++
		}
		s.mu.Unlock()
		if !jsonOut {
			io.WriteString(w, "OK_REPORT_RECORDED") // bare, as the service sends it
			return
		}
		v, _ := json.Marshal("OK_REPORT_RECORDED")
		s.reply(w, jsonOut, "", "", v, "")
	case now.Before(c.readyAt):
		s.mu.Unlock()
		s.reply(w, jsonOut, "", "CAPCHA_NOT_READY", nil, "")
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
	if c.code == "ERROR_CAPTCHA_UNSOLVABLE" {
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
	if len(ids) > 100 {
		s.reply(w, jsonOut, "", "ERROR_BAD_PARAMETERS", nil, "")
		return
	}
	for _, id := range ids {
		if _, err := strconv.ParseUint(id, 10, 64); err != nil {
			s.reply(w, jsonOut, "", "ERROR_WRONG_ID_FORMAT", nil, "")
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
			states[i] = "ERROR_WRONG_CAPTCHA_ID"
		case now.Before(c.readyAt):
			states[i] = "CAPCHA_NOT_READY"
		case c.code != "":
			states[i] = c.code
			s.pickup(c, now)
		default:
			var text string
			if json.Unmarshal(c.answer, &text) != nil {
				text = string(c.answer) // an object (GeeTest)
			}
			states[i] = text
			s.pickup(c, now)
		}
	}
	s.mu.Unlock()
	v, _ := json.Marshal(strings.Join(states, "|"))
	if !jsonOut {
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, strings.Join(states, "|"))
		return
	}
	s.reply(w, true, "", "", v, "")
}
