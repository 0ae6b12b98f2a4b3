// Package fakeapi emulates a 2captcha-compatible solving service (CaptchaAI's
// in.php and res.php) for tests and demos: key checks, per-method parameter
// checks with the real error codes, a plan thread cap, solve-time
// distributions, injectable faults, and counters that tests read.
//
// The emulator runs no goroutines: a captcha's readiness is a deadline checked
// when it is polled.
package fakeapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/captchaq/captchaq/solver"
)

// TestKey is a valid key of every Server whose Config.Keys is empty. It is
// KeyLength characters long, like real keys.
const TestKey = "0123456789abcdef0123456789abcdef"

// KeyLength is the length of a well-formed key. A key of another length gets
// ERROR_WRONG_USER_KEY; one of this length that is not in Config.Keys gets
// ERROR_KEY_DOES_NOT_EXIST.
const KeyLength = 32

// MaxImageSize is the largest image accepted, in bytes once decoded: 1024 KB.
// A larger one gets ERROR_TOO_BIG_CAPTCHA_FILESIZE.
const MaxImageSize = 1024 * 1024

// Range is a distribution of solve times. With Median zero it is uniform on
// [Min, Max]; otherwise log-normal with that median and its 99th percentile at
// Max, redrawn when outside [Min, Max] — the long right tail real solves have.
type Range struct {
	// Min is the shortest solve time drawn.
	Min time.Duration
	// Median is the median of the log-normal distribution; zero makes the
	// distribution uniform.
	Median time.Duration
	// Max is the longest solve time drawn; with a Median, also the 99th
	// percentile.
	Max time.Duration
}

// Kinds of captcha, the keys of Config.SolveTime. They match the solver
// package's kinds.
const (
	KindRecaptcha   = solver.KindRecaptcha   // userrecaptcha v2, invisible, enterprise
	KindRecaptchaV3 = solver.KindRecaptchaV3 // userrecaptcha version=v3
	KindTurnstile   = solver.KindTurnstile   // turnstile
	KindGeeTest     = solver.KindGeeTest     // geetest (v3)
	KindGeeTestV4   = solver.KindGeeTestV4   // geetest version=4
	KindHCaptcha    = solver.KindHCaptcha    // hcaptcha
	KindCloudflare  = solver.KindCloudflare  // cloudflare_challenge
	KindImage       = solver.KindImage       // post and base64
	KindGrid        = solver.KindGrid        // post and base64 with recaptcha=1
	KindBLS         = solver.KindBLS         // bls
)

// DefaultSolveTimes are the solve-time distributions of kinds that
// Config.SolveTime does not name, shaped after CaptchaAI's published speeds.
func DefaultSolveTimes() map[string]Range {
	return map[string]Range{
		KindRecaptcha:   {Min: 8 * time.Second, Median: 18 * time.Second, Max: 60 * time.Second},
		KindRecaptchaV3: {Min: 3 * time.Second, Median: 7 * time.Second, Max: 25 * time.Second},
		KindTurnstile:   {Min: 2 * time.Second, Median: 6 * time.Second, Max: 25 * time.Second},
		KindGeeTest:     {Min: 5 * time.Second, Median: 12 * time.Second, Max: 45 * time.Second},
		KindImage:       {Min: 1 * time.Second, Median: 3 * time.Second, Max: 12 * time.Second},
		KindGrid:        {Min: 5 * time.Second, Median: 12 * time.Second, Max: 40 * time.Second},
		// Not published; the example pack's first polls (15 s, 20 s for
		// Cloudflare) suggest these.
		KindGeeTestV4:  {Min: 5 * time.Second, Median: 12 * time.Second, Max: 45 * time.Second},
		KindHCaptcha:   {Min: 5 * time.Second, Median: 14 * time.Second, Max: 50 * time.Second},
		KindCloudflare: {Min: 8 * time.Second, Median: 18 * time.Second, Max: 60 * time.Second},
		KindBLS:        {Min: 3 * time.Second, Median: 8 * time.Second, Max: 30 * time.Second},
	}
}

// Config configures a Server. The zero value is a healthy service with
// unlimited threads, the default solve times and TestKey as its only key.
type Config struct {
	// Keys are the valid API keys. Empty means []string{TestKey}.
	Keys []string
	// Threads is the plan's thread cap: captchas being solved at once. Over
	// it, in.php answers ERROR_ZERO_BALANCE (CaptchaAI's "no free threads"),
	// or ERROR_NO_SLOT_AVAILABLE when NoSlotCode is set or the Service is
	// 2captcha (where ERROR_ZERO_BALANCE means no money). Zero means
	// unlimited.
	Threads int
	// NoSlotCode makes a full plan answer ERROR_NO_SLOT_AVAILABLE.
	NoSlotCode bool
	// SolveTime is the solve-time distribution by kind (Kind*). Missing kinds
	// use DefaultSolveTimes.
	SolveTime map[string]Range
	// TimeScale, when positive, multiplies every solve time (given or
	// default): 0.01 makes an 18-s reCAPTCHA take 180 ms. Zero means 1.
	TimeScale float64
	// Seed seeds the random source of solve times, faults, ids and tokens.
	// The same seed and the same sequence of requests give the same replies.
	Seed int64
	// Faults are the faults injected from the start; see SetFaults.
	Faults Faults
	// BurstLimit in.php calls of one key within BurstWindow are allowed; one
	// more answers MAX_USER_TURN and bans the key's in.php for BanTime.
	// Zero means 60.
	BurstLimit int
	// BurstWindow is the sliding window BurstLimit counts in. Zero means 3 s.
	BurstWindow time.Duration
	// BanTime is how long a key that broke BurstLimit gets MAX_USER_TURN
	// from in.php. Zero means 10 s.
	BanTime time.Duration
	// NumericIDs sends captcha ids as JSON numbers (CaptchaAI does, at times).
	NumericIDs bool
	// GeeTestAsString sends GeeTest answers as a JSON-encoded string instead
	// of an object (CaptchaAI does, at times).
	GeeTestAsString bool
	// Balance is what getbalance answers. Zero means 100.
	Balance float64
	// ResultTTL is how long a ready answer can be fetched. Zero means 10 min.
	ResultTTL time.Duration
	// BatchPolls makes res.php answer multi-id polls (action=get&ids=…), a
	// feature of some 2captcha-compatible services that CaptchaAI does not
	// document. Off, as on CaptchaAI, res.php ignores ids: such a call has
	// no id and answers ERROR_WRONG_CAPTCHA_ID.
	BatchPolls bool
	// Service is the service emulated: ServiceCaptchaAI (the default) or
	// Service2Captcha. It decides which methods exist (2captcha has no
	// cloudflare_challenge, no bls and no GeeTest v4 as geetest with
	// version=4) and what a full plan answers (see Threads).
	Service string
	// NoFunds makes in.php answer ERROR_ZERO_BALANCE to every submission,
	// as 2captcha does for an account without money. Only with
	// Service2Captcha: on CaptchaAI that code means a full plan.
	NoFunds bool
}

// The services Config.Service emulates.
const (
	ServiceCaptchaAI = "captchaai"
	Service2Captcha  = "2captcha"
)

// Faults are injected failures. Rates are probabilities per request, in
// [0, 1], drawn from the seeded source.
type Faults struct {
	// Outage answers every request with an HTTP 500 HTML page.
	Outage bool
	// HTTP500 is the rate of HTTP 500 replies with an HTML body.
	HTTP500 float64
	// HTML is the rate of HTTP 200 replies whose body is an HTML page.
	HTML float64
	// Garbage is the rate of HTTP 200 replies with a body that is no reply.
	Garbage float64
	// Slow is the rate of replies delayed by SlowDelay.
	Slow float64
	// SlowDelay is how long a slow reply is held back (not scaled by
	// TimeScale).
	SlowDelay time.Duration
	// Unsolvable is the rate of captchas that end in
	// ERROR_CAPTCHA_UNSOLVABLE instead of an answer.
	Unsolvable float64
	// Rules fail matching tasks with a fixed code.
	Rules []Rule
}

// Rule fails the tasks it matches with Code: at in.php, or — with OnPoll — at
// res.php once the captcha's solve time has passed.
//
//	Rule{Param: "pageurl", Contains: "bad.example", Code: "ERROR_PAGEURL"}
type Rule struct {
	// Param is the parameter looked at; empty means any parameter.
	Param string
	// Contains must be in the parameter's value; empty matches every task
	// that has the parameter (every task, when Param is empty too).
	Contains string
	// Code is the API code answered.
	Code string
	// OnPoll answers Code from res.php when the captcha would be ready,
	// instead of from in.php.
	OnPoll bool
}

// Stats are the Server's counters.
type Stats struct {
	// InCalls and ResCalls count requests to in.php and res.php, faults
	// included.
	InCalls, ResCalls int
	// BatchCalls counts the res.php calls that asked about several captchas
	// (action=get&ids=…), also counted in ResCalls; BatchAsked is the sum of
	// the ids they asked about.
	BatchCalls, BatchAsked int
	// Submitted counts captchas accepted by in.php.
	Submitted int
	// Solved counts answers delivered: the first res.php call that returned a
	// captcha's answer.
	Solved int
	// Failed counts captchas that ended in an error code (unsolvable, OnPoll
	// rules) delivered by res.php.
	Failed int
	// Concurrent is how many captchas are being solved now (submitted, not
	// yet ready); MaxConcurrent is the most there ever were at once.
	Concurrent, MaxConcurrent int
	// ResCallsPerCaptcha counts res.php action=get&id calls per captcha id
	// (batch polls not included), for
	// the captchas the Server still remembers: an entry goes with its
	// captcha, once the captcha's answer is older than ResultTTL and more
	// than 1024 captchas are remembered, so that a long-running emulator
	// does not grow without bound.
	ResCallsPerCaptcha map[string]int
	// MaxResCallsPerCaptcha is the most res.php action=get calls any captcha
	// ever got, forgotten ones included.
	MaxResCallsPerCaptcha int
	// PickupLagMean and PickupLagMax are the time from a captcha becoming
	// ready to the res.php call that first returned it, over Pickups captchas.
	PickupLagMean, PickupLagMax time.Duration
	// Pickups counts the captchas whose final reply (answer or error code)
	// res.php has returned: the sample of PickupLagMean and PickupLagMax.
	Pickups int
	// Codes counts the error codes answered, injected ones included.
	Codes map[string]int
	// ReportsGood and ReportsBad count recorded reports.
	ReportsGood, ReportsBad int
}

// Server is the emulated service, an http.Handler serving /in.php and
// /res.php. It is safe for concurrent use.
type Server struct {
	cfg  Config
	keys map[string]bool

	mu       sync.Mutex
	rng      *rand.Rand
	faults   Faults
	nextID   int64
	captchas map[string]*captcha
	solving  map[string]*captcha // submitted, not yet ready
	submits  map[string][]time.Time
	banned   map[string]time.Time
	stats    Stats
	lagSum   time.Duration
	now      func() time.Time
}

type captcha struct {
	id        string
	kind      string
	method    string
	params    map[string]string
	submitted time.Time
	readyAt   time.Time
	code      string // error code answered when ready, "" for an answer
	answer    json.RawMessage
	userAgent string
	fetched   bool
	reported  bool
}

// New returns a Server for cfg.
func New(cfg Config) *Server {
	if len(cfg.Keys) == 0 {
		cfg.Keys = []string{TestKey}
	}
	if cfg.BurstLimit <= 0 {
		cfg.BurstLimit = 60
	}
	if cfg.BurstWindow <= 0 {
		cfg.BurstWindow = 3 * time.Second
	}
	if cfg.BanTime <= 0 {
		cfg.BanTime = 10 * time.Second
	}
	if cfg.Balance == 0 {
		cfg.Balance = 100
	}
	if cfg.ResultTTL <= 0 {
		cfg.ResultTTL = 10 * time.Minute
	}
	if cfg.TimeScale <= 0 {
		cfg.TimeScale = 1
	}
	s := &Server{
		cfg:      cfg,
		keys:     map[string]bool{},
		rng:      rand.New(rand.NewPCG(uint64(cfg.Seed), uint64(cfg.Seed)^0x9E3779B97F4A7C15)),
		faults:   cfg.Faults,
		captchas: map[string]*captcha{},
		solving:  map[string]*captcha{},
		submits:  map[string][]time.Time{},
		banned:   map[string]time.Time{},
		now:      time.Now,
		stats: Stats{
			ResCallsPerCaptcha: map[string]int{},
			Codes:              map[string]int{},
		},
	}
	for _, k := range cfg.Keys {
		s.keys[k] = true
	}
	s.nextID = 70_000_000_000 + s.rng.Int64N(1_000_000_000)
	return s
}

// SetFaults replaces the injected faults; it takes effect with the next
// request (tests turn an outage on and off with it).
func (s *Server) SetFaults(f Faults) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = f
}

// Faults returns the faults injected now.
func (s *Server) Faults() Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults
}

// Stats returns a copy of the counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep()
	st := s.stats
	st.Concurrent = len(s.solving)
	st.ResCallsPerCaptcha = make(map[string]int, len(s.stats.ResCallsPerCaptcha))
	for k, v := range s.stats.ResCallsPerCaptcha {
		st.ResCallsPerCaptcha[k] = v
	}
	st.Codes = make(map[string]int, len(s.stats.Codes))
	for k, v := range s.stats.Codes {
		st.Codes[k] = v
	}
	if st.Pickups > 0 {
		st.PickupLagMean = s.lagSum / time.Duration(st.Pickups)
	}
	return st
}

// ServeHTTP serves /in.php and /res.php (GET and POST, form and multipart,
// json=0 and json=1); other paths are 404.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	op := strings.TrimPrefix(r.URL.Path, "/")
	if op != "in.php" && op != "res.php" {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodPost {
		w.Header().Set("Allow", "GET, POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	form, file, fileName, perr := parseRequest(w, r)

	s.mu.Lock()
	if op == "in.php" {
		s.stats.InCalls++
	} else {
		s.stats.ResCalls++
	}
	f := s.faults
	slow := f.Slow > 0 && s.rng.Float64() < f.Slow
	var fault string
	switch {
	case f.Outage:
		fault = "outage"
	case f.HTTP500 > 0 && s.rng.Float64() < f.HTTP500:
		fault = "500"
	case f.HTML > 0 && s.rng.Float64() < f.HTML:
		fault = "html"
	case f.Garbage > 0 && s.rng.Float64() < f.Garbage:
		fault = "garbage"
	}
	s.mu.Unlock()

	if slow && f.SlowDelay > 0 {
		t := time.NewTimer(f.SlowDelay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	switch fault {
	case "outage", "500":
		s.count(CodeHTTP500)
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, "<html><head><title>500 Internal Server Error</title></head><body><center><h1>500 Internal Server Error</h1></center><hr><center>nginx</center></body></html>\n")
		return
	case "html":
		s.count(CodeHTML)
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, "<!DOCTYPE html><html><head><title>Just a moment...</title></head><body>Checking your browser</body></html>\n")
		return
	case "garbage":
		s.count(CodeGarbage)
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "{\"status\":1,\"requ\x00\xff")
		return
	}

	jsonOut := form.get("json") == "1"
	if perr != nil {
		s.reply(w, jsonOut, "", "ERROR_UPLOAD", nil, "")
		return
	}
	if code := s.checkKey(form.get("key")); code != "" {
		s.reply(w, jsonOut, "", code, nil, "")
		return
	}
	if op == "in.php" {
		s.submit(w, jsonOut, form, file, fileName)
		return
	}
	s.result(w, jsonOut, form)
}

// Pseudo-codes counted in Stats.Codes for injected faults that carry no API
// code.
const (
	// CodeHTTP500 counts HTTP 500 replies (Faults.HTTP500 and Faults.Outage).
	CodeHTTP500 = "HTTP_500"
	// CodeHTML counts HTTP 200 replies with an HTML page (Faults.HTML).
	CodeHTML = "HTML_PAGE"
	// CodeGarbage counts HTTP 200 replies with a garbage body (Faults.Garbage).
	CodeGarbage = "GARBAGE"
)

func (s *Server) count(code string) {
	s.mu.Lock()
	s.stats.Codes[code]++
	s.mu.Unlock()
}

func (s *Server) checkKey(key string) string {
	switch {
	case key == "":
		return "ERROR_KEY_DOES_NOT_EXIST"
	case len(key) != KeyLength:
		return "ERROR_WRONG_USER_KEY"
	case !s.keys[key]:
		return "ERROR_KEY_DOES_NOT_EXIST"
	}
	return ""
}

// reply writes an answer: ok (value, useragent) when code is "", else code.
// The plain-text form is OK|<text> or the bare code.
func (s *Server) reply(w http.ResponseWriter, jsonOut bool, kind, code string, value json.RawMessage, userAgent string) {
	if code != "" && code != "CAPCHA_NOT_READY" {
		s.count(code)
	}
	if jsonOut {
		w.Header().Set("Content-Type", "application/json")
		var out []byte
		switch {
		case code == "CAPCHA_NOT_READY":
			out, _ = json.Marshal(struct {
				Status  int    `json:"status"`
				Request string `json:"request"`
			}{0, code})
		case code != "":
			out, _ = json.Marshal(struct {
				Status    int    `json:"status"`
				Request   string `json:"request"`
				ErrorText string `json:"error_text"`
			}{0, code, errorText(code)})
		case kind == KindCloudflare:
			// cloudflare_challenge names it user_agent, Turnstile
			// useragent (CaptchaAI-Examples, articles/how-to-solve-
			// cloudflare-challenge-using-api/python/solve.py).
			out, _ = json.Marshal(struct {
				Status    int             `json:"status"`
				Request   json.RawMessage `json:"request"`
				UserAgent string          `json:"user_agent,omitempty"`
			}{1, value, userAgent})
		default:
			out, _ = json.Marshal(struct {
				Status    int             `json:"status"`
				Request   json.RawMessage `json:"request"`
				UserAgent string          `json:"useragent,omitempty"`
			}{1, value, userAgent})
		}
		w.Write(append(out, '\n'))
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	if code != "" {
		io.WriteString(w, code)
		return
	}
	var text string
	if json.Unmarshal(value, &text) != nil {
		text = string(value) // a number or an object
	}
	io.WriteString(w, "OK|"+text)
}

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
		code = "ERROR_BAD_PARAMETERS" // not a method of 2captcha's in.php
	}

	s.mu.Lock()
	now := s.now()
	// Burst ban: more than BurstLimit calls in BurstWindow.
	if until, ok := s.banned[key]; ok && now.Before(until) {
		s.mu.Unlock()
		s.reply(w, jsonOut, "", "MAX_USER_TURN", nil, "")
		return
	}
	recent := s.submits[key]
	cut := 0
	for cut < len(recent) && now.Sub(recent[cut]) >= s.cfg.BurstWindow {
		cut++
	}
	recent = append(recent[cut:], now)
	s.submits[key] = recent
	if len(recent) > s.cfg.BurstLimit {
		s.banned[key] = now.Add(s.cfg.BanTime)
		s.mu.Unlock()
		s.reply(w, jsonOut, "", "MAX_USER_TURN", nil, "")
		return
	}
	if code != "" {
		s.mu.Unlock()
		s.reply(w, jsonOut, "", code, nil, "")
		return
	}
	var onPoll string
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
		s.reply(w, jsonOut, "", "ERROR_ZERO_BALANCE", nil, "")
		return
	}
	if s.cfg.Threads > 0 && len(s.solving) >= s.cfg.Threads {
		s.mu.Unlock()
		code := "ERROR_ZERO_BALANCE"
		if s.cfg.NoSlotCode || s.cfg.Service == Service2Captcha {
			code = "ERROR_NO_SLOT_AVAILABLE"
		}
		s.reply(w, jsonOut, "", code, nil, "")
		return
	}
	kind := solver.Kind(method, params)
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
		c.code = "ERROR_CAPTCHA_UNSOLVABLE"
	}
	if c.code == "" {
		c.answer, c.userAgent = s.answer(c)
	}
	s.captchas[c.id] = c
	s.solving[c.id] = c
	s.stats.Submitted++
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
		bal := strconv.FormatFloat(s.cfg.Balance, 'f', 5, 64)
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
	s.stats.PickupLagMax = max(s.stats.PickupLagMax, lag)
	if c.code == "" {
		s.stats.Solved++
	} else {
		s.stats.Failed++
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

// values are a request's parameters from the query and the body.
type values map[string][]string

func (v values) get(k string) string {
	if vs := v[k]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// params are the task's parameters: everything but the request's own
// (key, method, json, action, id, soft_id).
func (v values) params() map[string]string {
	out := map[string]string{}
	for k, vs := range v {
		switch k {
		case "key", "method", "json", "action", "id", "soft_id", "header_acao":
			continue
		}
		if len(vs) > 0 {
			out[k] = vs[0]
		}
	}
	return out
}

// maxRequest bounds a request body: a 1024-KB image, base64-encoded, and the
// rest.
const maxRequest = 2*MaxImageSize + 64*1024

// parseRequest reads a request's parameters from the query and the body
// (form or multipart) and the uploaded file, if any.
func parseRequest(w http.ResponseWriter, r *http.Request) (v values, file []byte, fileName string, err error) {
	v = values(r.URL.Query())
	if r.Method != http.MethodPost {
		return v, nil, "", nil
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxRequest)
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch ct {
	case "multipart/form-data":
		if err := r.ParseMultipartForm(maxRequest); err != nil {
			return v, nil, "", fmt.Errorf("multipart: %w", err)
		}
		for k, vs := range r.MultipartForm.Value {
			v[k] = append(vs, v[k]...)
		}
		if fhs := r.MultipartForm.File["file"]; len(fhs) > 0 {
			f, err := fhs[0].Open()
			if err != nil {
				return v, nil, "", fmt.Errorf("file: %w", err)
			}
			defer f.Close()
			file, err = io.ReadAll(f)
			if err != nil {
				return v, nil, "", fmt.Errorf("file: %w", err)
			}
			if file == nil {
				file = []byte{}
			}
			fileName = fhs[0].Filename
		}
	default:
		if err := r.ParseForm(); err != nil {
			return v, nil, "", fmt.Errorf("form: %w", err)
		}
		for k, vs := range r.PostForm {
			v[k] = append(vs, v[k]...)
		}
	}
	if v.get("method") == "post" && file == nil {
		// A post without a multipart file may carry the image base64-encoded
		// in a form field: body, as CaptchaAI's grid example sends it
		// (CaptchaAI-Examples, articles/how-to-solve-grid-image-captcha-
		// automatically/), or file.
		b64 := v.get("body")
		if b64 == "" {
			b64 = v.get("file")
		}
		if b64 != "" {
			if b, err := base64.StdEncoding.DecodeString(b64); err == nil {
				file = b
			}
		}
	}
	return v, file, fileName, nil
}

// ListenAndServe serves s on addr (host:port) until ctx is done, calling
// ready with the address it listens on once it does.
func (s *Server) ListenAndServe(ctx context.Context, addr string, ready func(net.Addr)) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("fakeapi: listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	if ready != nil {
		ready(ln.Addr())
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("fakeapi: serve: %w", err)
	case <-ctx.Done():
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(shut); err != nil {
			return fmt.Errorf("fakeapi: shutdown: %w", err)
		}
		return nil
	}
}

// ServeLocal serves h (the emulator, or a handler wrapped around it) on a
// free port of 127.0.0.1 and returns its base URL and a function that stops
// it.
func ServeLocal(h http.Handler) (baseURL string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("fakeapi: listen: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = srv.Close() }, nil
}
