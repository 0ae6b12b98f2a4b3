// Package fakeapi emulates a 2captcha-compatible solving service (CaptchaAI's
// in.php and res.php) for tests and demos: key checks, per-method parameter
// checks with the real error codes, a plan thread cap, solve-time
// distributions, injectable faults, and counters that tests read.
//
// It speaks the classic dialect through package classic and the JSON task
// dialect (createTask, getTaskResult, getBalance, the report calls: tasks.go)
// through package createtask, as the gateway and the solver's clients do:
// the codes, the reply shapes and the in.php rule. Both dialects reach the
// same captchas, bill (Stats), keys and faults: a task created by one can
// be polled by the other. What
// the service accepts it models on its own, deliberately: its parameter
// and image checks (params.go) and its key format are written apart from
// the method catalogue's Validate, so a mistake in the catalogue meets the
// service's answer in tests instead of agreeing with itself.
//
// A captcha's readiness is a deadline checked when it is polled; the
// emulator runs no goroutines but the timers of the service's callbacks
// (in.php's pingback: a GET for CaptchaAI, a POST for 2captcha).
package fakeapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	catalogue "github.com/captchaq/captchaq/captcha" // captcha names a captcha in flight here

	"github.com/captchaq/captchaq/internal/dialect/classic"
	"github.com/captchaq/captchaq/internal/dialect/createtask"
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

// Kinds of captcha, the keys of Config.SolveTime: the method catalogue's
// kinds (package captcha).
const (
	KindRecaptcha   = catalogue.KindRecaptcha   // userrecaptcha v2, invisible, enterprise
	KindRecaptchaV3 = catalogue.KindRecaptchaV3 // userrecaptcha version=v3
	KindTurnstile   = catalogue.KindTurnstile   // turnstile
	KindGeeTest     = catalogue.KindGeeTest     // geetest (v3)
	KindGeeTestV4   = catalogue.KindGeeTestV4   // geetest version=4
	KindHCaptcha    = catalogue.KindHCaptcha    // hcaptcha
	KindCloudflare  = catalogue.KindCloudflare  // cloudflare_challenge
	KindImage       = catalogue.KindImage       // post and base64
	KindGrid        = catalogue.KindGrid        // post and base64 with recaptcha=1
	KindBLS         = catalogue.KindBLS         // bls
	KindFriendly    = catalogue.KindFriendly    // friendly_captcha
)

// The services Config.Service emulates.
const (
	ServiceCaptchaAI = "captchaai"
	Service2Captcha  = "2captcha"
)

// Server is the emulated service, an http.Handler serving /in.php,
// /res.php and the JSON dialect's calls. It is safe for concurrent use.
type Server struct {
	cfg  Config
	keys map[string]bool

	mu       sync.Mutex
	rng      *rand.Rand
	faults   Faults
	nextID   int64
	lastID   string // the last captcha in.php accepted (Faults.ReuseID)
	captchas map[string]*captcha
	solving  map[string]*captcha        // submitted, not yet ready
	submits  map[string]*classic.Window // the in.php rule, per key
	stats    Stats
	lagSum   time.Duration
	lags     []time.Duration // pickup lags of pickups lagsFrom, lagsFrom+1, …
	lagsFrom int
	flaky    map[string]int // submissions seen per flaky-N site key and page URL
	now      func() time.Time
	// holds counts the Hold calls not released yet; held are the
	// captchas kept from becoming ready meanwhile.
	holds int
	held  []*captcha
}

type captcha struct {
	id        string
	kind      string
	method    string
	params    map[string]string
	submitted time.Time
	readyAt   time.Time
	due       time.Time // while held (Server.Hold), the readyAt drawn at submission
	code      string    // error code answered when ready, "" for an answer
	answer    json.RawMessage
	userAgent string
	fetched   bool
	reported  bool
	price     float64 // what its acceptance cost
	task      string  // TaskKey
	from      string  // the address it was submitted from (getTaskResult's ip)
}

// New returns a Server for cfg.
func New(cfg Config) *Server {
	if len(cfg.Keys) == 0 {
		cfg.Keys = []string{TestKey}
	}
	r := cfg.submitRule().Or(classic.SubmitRule)
	cfg.BurstLimit, cfg.BurstWindow, cfg.BanTime = r.Limit, r.Window, r.Ban
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
		submits:  map[string]*classic.Window{},
		now:      time.Now,
		stats: Stats{
			ResCallsPerCaptcha: map[string]int{},
			Codes:              map[string]int{},
			PerTask:            map[string]int{},
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

// ServeHTTP serves /in.php and /res.php (GET and POST, form and multipart,
// json=0 and json=1) and the JSON dialect's calls (createtask.IsPath,
// POST); other paths are 404.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	op := strings.TrimPrefix(r.URL.Path, "/")
	served, tasks, allow := createtask.Route(op, r.Method)
	if !served {
		http.NotFound(w, r)
		return
	}
	if allow != "" {
		w.Header().Set("Allow", allow)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if s.fault(w, r, op == classic.SubmitPath || op == createtask.PathCreateTask) {
		return
	}
	if tasks {
		s.serveTasks(w, r, op)
		return
	}
	form, file, fileName, perr := parseRequest(w, r)
	jsonOut := form.get("json") == "1"
	if perr != nil {
		s.reply(w, jsonOut, "", classic.CodeUpload, nil, "")
		return
	}
	if code := s.checkKey(form.get("key")); code != "" {
		s.reply(w, jsonOut, "", code, nil, "")
		return
	}
	if op == classic.SubmitPath {
		s.submit(w, jsonOut, form, file, fileName)
		return
	}
	s.result(w, jsonOut, form)
}

// fault counts a call (a submission when submit, else a poll or another
// call) and answers it with the fault injected now, if any, reporting
// whether it did: the same for both dialects.
func (s *Server) fault(w http.ResponseWriter, r *http.Request, submit bool) bool {
	s.mu.Lock()
	if submit {
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
			return true
		}
	}
	switch fault {
	case "outage", "500":
		s.count(CodeHTTP500)
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, "<html><head><title>500 Internal Server Error</title></head><body><center><h1>500 Internal Server Error</h1></center><hr><center>nginx</center></body></html>\n")
	case "html":
		s.count(CodeHTML)
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, "<!DOCTYPE html><html><head><title>Just a moment...</title></head><body>Checking your browser</body></html>\n")
	case "garbage":
		s.count(CodeGarbage)
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "{\"status\":1,\"requ\x00\xff")
	default:
		return false
	}
	return true
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
		return classic.CodeKeyDoesNotExist
	case len(key) != KeyLength:
		return classic.CodeWrongUserKey
	case !s.keys[key]:
		return classic.CodeKeyDoesNotExist
	}
	return ""
}

// reply writes an answer in the dialect's shapes (classic.WriteOK,
// classic.WriteCode): ok (value, useragent) when code is "", else code,
// with its error_text but for CAPCHA_NOT_READY.
func (s *Server) reply(w http.ResponseWriter, jsonOut bool, kind, code string, value json.RawMessage, userAgent string) {
	switch {
	case code == classic.CodeNotReady:
		classic.WriteCode(w, jsonOut, code, "")
	case code != "":
		s.count(code)
		classic.WriteCode(w, jsonOut, code, errorText(code))
	case kind == KindCloudflare:
		// cloudflare_challenge names it user_agent, Turnstile
		// useragent (CaptchaAI-Examples, articles/how-to-solve-
		// cloudflare-challenge-using-api/python/solve.py).
		classic.WriteOK(w, jsonOut, value, "user_agent", userAgent)
	default:
		classic.WriteOK(w, jsonOut, value, "useragent", userAgent)
	}
}

// maxRequest bounds a request body: a 1024-KB image, base64-encoded, and the
// rest.
const maxRequest = 2*MaxImageSize + 64*1024

// ListenAndServe serves s on addr (host:port) until ctx is done, calling
// ready with the address it listens on once it does.
func (s *Server) ListenAndServe(ctx context.Context, addr string, ready func(net.Addr)) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("fakeapi: listen on %s: %w", addr, err)
	}
	// Connections on which no request has begun: net/http's Shutdown
	// counts one as active for its first 5 s (a client's spare dial),
	// and would wait that long for it. Once stopping, one told new is
	// closed at once: a connection accepted just before the listener
	// closed is told after the stop began.
	var mu sync.Mutex
	fresh := map[net.Conn]bool{}
	stopping := false
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second, ConnState: func(c net.Conn, st http.ConnState) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case st == http.StateNew && stopping:
			_ = c.Close()
		case st == http.StateNew:
			fresh[c] = true
		default:
			delete(fresh, c)
		}
	}}
	if ready != nil {
		ready(ln.Addr())
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("fakeapi: serve: %w", err)
	case <-ctx.Done():
		mu.Lock()
		stopping = true
		for c := range fresh {
			_ = c.Close()
		}
		mu.Unlock()
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
