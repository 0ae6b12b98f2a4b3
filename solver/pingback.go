package solver

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// The service calls back when an answer is ready if in.php was given a
// `pingback` URL; a captcha submitted so is still fetched from res.php.
//
// CaptchaAI sends a GET to that URL with the query fields id (the captcha
// id) and code (the answer), and its own handlers answer 200 "OK"
// (blog.captchaai.com/captchaai-pingback-task-notification-patterns, "How
// Pingback Works" and "Pattern 1"; the parameter is in.php's "pingback").
// It documents no registration of the address and no signature: the callback
// is unauthenticated, and its advice is to accept callbacks only for ids one
// submitted and to keep polling for callbacks that never come
// (blog.captchaai.com/captchaai-webhook-security-callback-validation, "The
// Callback Flow": "step 3 is an unauthenticated request";
// blog.captchaai.com/captchaai-callback-error-handling-patterns, "Pattern 1:
// Callback + Fallback Polling"). CaptchaAI/CaptchaAI-Examples, whose
// articles/captchaai-pingback-task-notification-patterns accompanies the
// first post (commit 9f5b913263c65a2832c0d486dc8190b7a6e406f3), polls in
// its code and shows no callback.
//
// 2captcha sends the same fields as a POST form
// (2captcha.com/h/how-to-configure-automatic-response-retrieval-via-pingback,
// "Incoming request format": id=51555263943&code=ANSWER;
// 2captcha/2captcha-go, api2captcha.go, Client.Solve and
// Request.SetCallback, commit f44816c4a71035913e8929c80d75a59ce7cbeda6: the
// parameter is "pingback", and a request with it is not polled), and the
// address must first be registered in the account's pingback settings
// (2captcha/2captcha-python README.md, "callback", commit
// 8f0c8815d1bf5c8ce05320f1e72c899b63ce2952). The listener takes both.
//
// Anyone who can reach the listener can send such a request. So the URL's
// last path segment is a secret drawn at start, a callback for any other
// path is refused, and the answer is never taken from a callback: it only
// tells the waiting captcha to fetch its answer from res.php at once, at
// most pingbackFetches times, which is also what bounds a flood of forged
// callbacks against the call budget. Polling goes on behind it on a sparse
// schedule (Pingback.Grace after the usual first poll or the kind's learned
// 99.5th percentile), so a callback that never comes costs lag, not the
// captcha.

// pingbackFetches is how many callbacks a captcha answers with a res.php
// call.
const pingbackFetches = 3

// DefaultPingbackGrace is the default Pingback.Grace.
const DefaultPingbackGrace = 30 * time.Second

// pingbackQuantile: a captcha waiting for a callback is polled once its
// kind's learned ready time at this quantile, and Grace, have passed.
const pingbackQuantile = 0.995

// maxEarly bounds the callbacks kept for captchas whose in.php reply has not
// arrived yet.
const maxEarly = 4096

// Pingback receives a service's callbacks (see above) and tells the captchas
// that wait for them. Serve it (it is an http.Handler) where the service can
// reach it, give it to Config.Pingback, and give the service its URL only
// through the Client. It is safe for concurrent use.
type Pingback struct {
	// Grace is how long after the usual first poll, or after the time by
	// which nearly every captcha of its kind was ready (the learned 99.5th
	// percentile), a captcha that waits for a callback is polled anyway.
	// Zero means DefaultPingbackGrace (scaled by the Client's
	// Timing.Scale).
	Grace time.Duration

	url    string // public URL with the secret path
	secret string
	mu     sync.Mutex
	wait   map[string]chan struct{} // captcha id → told when its callback comes
	early  map[string]time.Time     // callbacks before their captcha waited
	calls  int                      // callbacks accepted, for tests and metrics
}

// NewPingback returns a Pingback whose callback URL is publicURL (an
// absolute http(s) URL the service can reach, routed to the Pingback's
// listener) with a secret path segment added.
func NewPingback(publicURL string) (*Pingback, error) {
	u, err := url.Parse(publicURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("solver: pingback URL %q is not an absolute http(s) URL", publicURL)
	}
	if u.RawQuery != "" || u.User != nil {
		return nil, errors.New("solver: pingback URL must not carry a query or credentials")
	}
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("solver: pingback secret: %w", err)
	}
	secret := hex.EncodeToString(b)
	return &Pingback{url: strings.TrimRight(publicURL, "/") + "/" + secret, secret: secret,
		wait: map[string]chan struct{}{}, early: map[string]time.Time{}}, nil
}

// ServeHTTP accepts a callback (GET or POST, id in the query or the form) on
// the secret path and answers 200 "OK"; any other path is 404, a request
// without an id 400. It never reads an answer from the request.
func (p *Pingback) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	seg := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
	if subtle.ConstantTimeCompare([]byte(seg), []byte(p.secret)) != 1 {
		http.NotFound(w, r)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	id := r.FormValue("id")
	if id == "" || len(id) > 64 {
		http.Error(w, "no captcha id", http.StatusBadRequest)
		return
	}
	p.tell(id, time.Now())
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("OK"))
}

// URL is the callback URL the Client gives the service. It holds the secret:
// never log it.
func (p *Pingback) URL() string { return p.url }

// Callbacks counts the callbacks accepted so far.
func (p *Pingback) Callbacks() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls
}

func (p *Pingback) tell(id string, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	if ch, ok := p.wait[id]; ok {
		select {
		case ch <- struct{}{}:
		default:
		}
		return
	}
	if len(p.early) >= maxEarly {
		for k, at := range p.early {
			if now.Sub(at) > time.Minute || len(p.early) >= maxEarly {
				delete(p.early, k)
			}
		}
	}
	p.early[id] = now
}

// register returns the channel told when captcha id's callback comes, and a
// function that unregisters it. A callback that came first is told at once.
func (p *Pingback) register(id string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.wait[id] = ch
	if _, ok := p.early[id]; ok {
		delete(p.early, id)
		ch <- struct{}{}
	}
	return ch, func() {
		p.mu.Lock()
		delete(p.wait, id)
		p.mu.Unlock()
	}
}
