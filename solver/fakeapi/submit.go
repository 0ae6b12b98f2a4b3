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
	method := form.get("method")
	params := form.params()
	if method == "post" {
		delete(params, "body")
		if file != nil {
			params["file"] = "" // present; the bytes are checked below
		}
	}
	sub := submission{key: form.get("key"), method: method, params: params, file: file, fileName: fileName,
		callback: params["pingback"]}
	if s.cfg.Service == Service2Captcha && (method == "cloudflare_challenge" || method == "bls" ||
		method == "geetest" && params["version"] == "4") {
		sub.refused = classic.CodeBadParameters // not a method of 2captcha's in.php
	}
	c, code := s.accept(sub)
	if code != "" {
		s.reply(w, jsonOut, "", code, nil, "")
		return
	}
	id, _ := json.Marshal(c.id)
	if s.cfg.NumericIDs {
		id = []byte(c.id)
	}
	s.reply(w, jsonOut, c.kind, "", id, "")
}

// submission is a captcha handed to the service, by either dialect.
type submission struct {
	key, method string
	params      map[string]string // in.php's names
	file        []byte
	fileName    string
	callback    string // in.php's pingback, or createTask's callbackUrl (with tasks)
	tasks       bool   // sent by createTask: the JSON dialect's answers
	from        string // the address it came from
	// refused is the code the dialect refuses it with, answered where
	// a bad parameter's would be (after the in.php rule).
	refused string
}

// accept runs a submission through the service's checks (its parameters,
// the in.php rule, the faults, the plan's threads, the funds) and, when it
// passes, records and bills it: the captcha it became, or the in.php code
// refusing it. A full plan answers ERROR_NO_SLOT_AVAILABLE in the JSON
// dialect, whose ERROR_ZERO_BALANCE means no money at every provider of it
// (anti-captcha.com/apidoc/errors, ids 2 and 10); NoFunds applies to it
// whatever the Service.
func (s *Server) accept(sub submission) (*captcha, string) {
	method, params, file := sub.method, sub.params, sub.file
	code := sub.refused
	if code == "" {
		code = checkParams(method, params, file, sub.fileName)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	// The in.php rule: more than BurstLimit calls in BurstWindow ban the
	// key's in.php for BanTime.
	win := s.submits[sub.key]
	if win == nil {
		win = classic.NewRuleWindow(s.cfg.submitRule())
		s.submits[sub.key] = win
	}
	if !win.Allow(now) {
		return nil, classic.CodeMaxUserTurn
	}
	if code != "" {
		return nil, code
	}
	inCode, onPoll := s.demoFault(params)
	if inCode != "" {
		return nil, inCode
	}
	for _, r := range s.faults.Rules {
		if !r.matches(params) {
			continue
		}
		if !r.OnPoll {
			return nil, r.Code
		}
		if onPoll == "" {
			onPoll = r.Code
		}
	}
	s.sweep()
	if s.cfg.NoFunds && (sub.tasks || s.cfg.Service == Service2Captcha) {
		return nil, classic.CodeZeroBalance
	}
	if s.cfg.Threads > 0 && len(s.solving) >= s.cfg.Threads {
		if s.cfg.NoSlotCode || s.cfg.Service == Service2Captcha || sub.tasks {
			return nil, classic.CodeNoSlotAvailable
		}
		return nil, classic.CodeZeroBalance
	}
	kind := catalogue.KindOf(method, params)
	if last := s.captchas[s.lastID]; s.faults.ReuseID && last != nil {
		s.stats.Submitted++
		s.stats.Spent += s.price(method)
		s.stats.PerTask[TaskKey(method, params, file)]++
		return last, ""
	}
	c := &captcha{
		id:        strconv.FormatInt(s.nextID, 10),
		kind:      kind,
		method:    method,
		params:    params,
		submitted: now,
		readyAt:   now.Add(s.solveTime(kind)),
		code:      onPoll,
		from:      sub.from,
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
	if s.holds > 0 {
		s.holdLocked(c)
	}
	s.lastID = c.id
	if sub.callback != "" {
		s.callBack(c, sub.callback, sub.tasks, c.readyAt.Sub(now))
	}
	s.stats.Submitted++
	c.price, c.task = s.price(method), TaskKey(method, params, file)
	s.stats.Spent += c.price
	s.stats.PerTask[c.task]++
	s.stats.MaxConcurrent = max(s.stats.MaxConcurrent, len(s.solving))
	return c, ""
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

// callBack calls url back when c is ready, after d. An in.php pingback
// gets the fields id and code (the answer as text, or the error code), as
// each service documents it: CaptchaAI sends a GET with both in the query
// (blog.captchaai.com/captchaai-pingback-task-notification-patterns, "How
// Pingback Works": "CaptchaAI sends GET request to your callback:
// YOUR_CALLBACK_URL?id=TASK_ID&code=TOKEN"; the same in
// blog.captchaai.com/captchaai-webhook-security-callback-validation, "The
// Callback Flow"); 2captcha POSTs them as a form
// (2captcha.com/h/how-to-configure-automatic-response-retrieval-via-pingback,
// "Incoming request format"). A createTask callbackUrl (tasks) gets a POST
// of what getTaskResult answers then, as captchaq's gateway sends it:
// Anti-Captcha names callbackUrl (anti-captcha.com/apidoc/methods/createTask)
// without publishing the call's shape in captchaq's sources. Callers hold
// s.mu.
func (s *Server) callBack(c *captcha, url string, tasks bool, d time.Duration) {
	code := c.code
	if code == "" {
		var text string
		if json.Unmarshal(c.answer, &text) != nil {
			text = string(c.answer) // an object (GeeTest)
		}
		code = text
	}
	form := neturl.Values{"id": {c.id}, "code": {code}}
	method, target, body, ctype := http.MethodPost, url, form.Encode(), "application/x-www-form-urlencoded"
	switch {
	case tasks:
		ctype = "application/json"
	case s.cfg.Service != Service2Captcha:
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
		if tasks {
			s.mu.Lock()
			b, _ := json.Marshal(s.taskResult(c))
			s.mu.Unlock()
			body = string(b)
		}
		req, err := http.NewRequestWithContext(ctx, method, target, strings.NewReader(body))
		if err != nil {
			return
		}
		if method == http.MethodPost {
			req.Header.Set("Content-Type", ctype)
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
