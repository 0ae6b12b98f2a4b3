// in.php: a captcha submitted, checked as the service checks it, and given
// its solve time.

package fakeapi

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	neturl "net/url"
	"strconv"
	"strings"
	"time"

	catalogue "github.com/captchaq/captchaq/captcha"

	"github.com/captchaq/captchaq/internal/dialect/classic"
)

func (s *Server) submit(w http.ResponseWriter, jsonOut bool, form values, file []byte, fileName string) {
	key := form.get("key")
	method := form.get("method")
	params := form.params()
	if method == "post" {
		delete(params, "body")
		if file != nil {
			params["file"] = "" // present; the bytes are checked below
		}
	}
	code := checkParams(method, params, file, fileName)
	if s.cfg.Service == Service2Captcha && (method == "cloudflare_challenge" || method == "bls" ||
		method == "geetest" && params["version"] == "4") {
		code = classic.CodeBadParameters // not a method of 2captcha's in.php
	}

	s.mu.Lock()
	now := s.now()
	// The in.php rule: more than BurstLimit calls in BurstWindow ban the
	// key's in.php for BanTime.
	win := s.submits[key]
	if win == nil {
		win = classic.NewRuleWindow(s.cfg.submitRule())
		s.submits[key] = win
	}
	if !win.Allow(now) {
		s.mu.Unlock()
		s.reply(w, jsonOut, "", classic.CodeMaxUserTurn, nil, "")
		return
	}
	if code != "" {
		s.mu.Unlock()
		s.reply(w, jsonOut, "", code, nil, "")
		return
	}
	inCode, onPoll := s.demoFault(params)
	if inCode != "" {
		s.mu.Unlock()
		s.reply(w, jsonOut, "", inCode, nil, "")
		return
	}
	for _, r := range s.faults.Rules {
		if !r.matches(params) {
			continue
		}
		if !r.OnPoll {
			s.mu.Unlock()
			s.reply(w, jsonOut, "", r.Code, nil, "")
			return
		}
		if onPoll == "" {
			onPoll = r.Code
		}
	}
	s.sweep()
	if s.cfg.Service == Service2Captcha && s.cfg.NoFunds {
		s.mu.Unlock()
		s.reply(w, jsonOut, "", classic.CodeZeroBalance, nil, "")
		return
	}
	if s.cfg.Threads > 0 && len(s.solving) >= s.cfg.Threads {
		s.mu.Unlock()
		code := classic.CodeZeroBalance
		if s.cfg.NoSlotCode || s.cfg.Service == Service2Captcha {
			code = classic.CodeNoSlotAvailable
		}
		s.reply(w, jsonOut, "", code, nil, "")
		return
	}
	kind := catalogue.KindOf(method, params)
	if last := s.captchas[s.lastID]; s.faults.ReuseID && last != nil {
		s.stats.Submitted++
		s.stats.Spent += s.price(method)
		s.stats.PerTask[TaskKey(method, params, file)]++
		s.mu.Unlock()
		id, _ := json.Marshal(last.id)
		s.reply(w, jsonOut, kind, "", id, "")
		return
	}
	c := &captcha{
		id:        strconv.FormatInt(s.nextID, 10),
		kind:      kind,
		method:    method,
		params:    params,
		submitted: now,
		readyAt:   now.Add(s.solveTime(kind)),
		code:      onPoll,
	}
	s.nextID += 1 + s.rng.Int64N(997)
	if c.code == "" && s.faults.Unsolvable > 0 && s.rng.Float64() < s.faults.Unsolvable {
		c.code = classic.CodeCaptchaUnsolvable
	}
	if c.code == "" {
		c.answer, c.userAgent = s.answer(c)
	}
	s.captchas[c.id] = c
	s.solving[c.id] = c
	s.lastID = c.id
	if cb := params["pingback"]; cb != "" {
		s.callBack(c, cb, c.readyAt.Sub(now))
	}
	s.stats.Submitted++
	c.price, c.task = s.price(method), TaskKey(method, params, file)
	s.stats.Spent += c.price
	s.stats.PerTask[c.task]++
	s.stats.MaxConcurrent = max(s.stats.MaxConcurrent, len(s.solving))
	s.mu.Unlock()

	id, _ := json.Marshal(c.id)
	if s.cfg.NumericIDs {
		id = []byte(c.id)
	}
	s.reply(w, jsonOut, kind, "", id, "")
}

func (r Rule) matches(params map[string]string) bool {
	if r.Param != "" {
		v, ok := params[r.Param]
		return ok && strings.Contains(v, r.Contains)
	}
	if r.Contains == "" {
		return true
	}
	for _, v := range params {
		if strings.Contains(v, r.Contains) {
			return true
		}
	}
	return false
}

// sweep moves captchas whose solve time has passed out of solving and, once
// more than 1024 captchas are remembered, forgets those whose answer is older
// than ResultTTL, with their ResCallsPerCaptcha entries. Callers hold s.mu.
func (s *Server) sweep() {
	now := s.now()
	for id, c := range s.solving {
		if !now.Before(c.readyAt) {
			delete(s.solving, id)
		}
	}
	if len(s.captchas) > 1024 {
		for id, c := range s.captchas {
			if now.Sub(c.readyAt) > s.cfg.ResultTTL {
				delete(s.captchas, id)
				delete(s.stats.ResCallsPerCaptcha, id)
			}
		}
	}
}

// solveTime draws a solve time for kind. Callers hold s.mu.
func (s *Server) solveTime(kind string) time.Duration {
	r, ok := s.cfg.SolveTime[kind]
	if !ok {
		r = DefaultSolveTimes()[kind]
	}
	var d time.Duration
	switch {
	case r.Max <= r.Min:
		d = r.Min
	case r.Median <= 0:
		d = r.Min + time.Duration(s.rng.Int64N(int64(r.Max-r.Min)+1))
	default:
		med := float64(r.Median)
		sigma := math.Log(float64(r.Max)/med) / 2.326
		d = r.Max
		for range 16 {
			v := time.Duration(med * math.Exp(sigma*s.rng.NormFloat64()))
			if v >= r.Min && v <= r.Max {
				d = v
				break
			}
		}
	}
	return time.Duration(float64(d) * s.cfg.TimeScale)
}

// callBack calls url back when c is ready, after d, with the fields id and
// code (the answer as text, or the error code), as each service documents
// it. CaptchaAI sends a GET with both in the query
// (blog.captchaai.com/captchaai-pingback-task-notification-patterns, "How
// Pingback Works": "CaptchaAI sends GET request to your callback:
// YOUR_CALLBACK_URL?id=TASK_ID&code=TOKEN"; the same in
// blog.captchaai.com/captchaai-webhook-security-callback-validation, "The
// Callback Flow"). 2captcha POSTs them as a form
// (2captcha.com/h/how-to-configure-automatic-response-retrieval-via-pingback,
// "Incoming request format"). Callers hold s.mu.
func (s *Server) callBack(c *captcha, url string, d time.Duration) {
	code := c.code
	if code == "" {
		var text string
		if json.Unmarshal(c.answer, &text) != nil {
			text = string(c.answer) // an object (GeeTest)
		}
		code = text
	}
	form := neturl.Values{"id": {c.id}, "code": {code}}
	method, target, body := http.MethodPost, url, form.Encode()
	if s.cfg.Service != Service2Captcha {
		method, body = http.MethodGet, ""
		if u, err := neturl.Parse(url); err == nil {
			q := u.Query()
			for k, v := range form {
				q[k] = v
			}
			u.RawQuery = q.Encode()
			target = u.String()
		}
	}
	time.AfterFunc(d, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, method, target, strings.NewReader(body))
		if err != nil {
			return
		}
		if method == http.MethodPost {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		s.mu.Lock()
		s.stats.Pingbacks++
		s.mu.Unlock()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			s.mu.Lock()
			s.stats.PingbacksFailed++
			s.mu.Unlock()
			return
		}
		_ = resp.Body.Close()
	})
}
