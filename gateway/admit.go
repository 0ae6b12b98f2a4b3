package gateway

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/captchaq/captchaq/internal/dialect/classic"
	"github.com/captchaq/captchaq/internal/httpguard"
)

// Admission bounds what a request costs before its key is known, so that
// callers without a key cannot hold the gateway's memory: the zero value
// takes the defaults, a negative value turns a bound off.
type Admission struct {
	// PerAddress is how many requests without a key in their query one
	// client address may have in the gateway at once; one more is
	// answered at once, without reading its body (MAX_USER_TURN on
	// in.php, "ERROR: 1005" on res.php, the service's codes for too many
	// requests). A request with a known key in its query is bounded by
	// the key's Limits instead. Default 16.
	PerAddress int
	// Unauthenticated is how many request bodies may be read at once
	// before their key is known (a key not in the query, sent in the
	// body after other fields); a body is at most an image of the
	// service's largest size base64-encoded plus its fields (maxRequest).
	// Others wait their turn, up to UnauthenticatedWait, then get the same
	// answer as above. Default 16.
	Unauthenticated int
	// UnauthenticatedPerAddress is how many of those turns one client
	// address may hold at once; its further requests wait for one of its
	// own (within the same UnauthenticatedWait) holding none of the
	// others, so that one address stalling its uploads cannot hold every
	// turn and keep out the callers that send their key in the body
	// (2captcha-python's in.php posts its key among the form's fields).
	// Default 2.
	UnauthenticatedPerAddress int
	// UnauthenticatedWait is how long a request waits for its turn to
	// read its body before its key is known. Default 10 s.
	UnauthenticatedWait time.Duration
	// BadKeys requests with a key the gateway does not know from one
	// address within BadKeyWindow ban the address for BadKeyBan: every
	// request from it is answered IP_BANNED, unread, as the service bans
	// an address "due to many frequent attempts to access the server using
	// wrong authorization keys. Ban will be automatically lifted after 5
	// minutes" (docs.captchaai.com/api/api-error-handling, IP_BANNED).
	// Default 30 per minute and a 5-minute ban.
	BadKeys      int
	BadKeyWindow time.Duration
	BadKeyBan    time.Duration
}

// The defaults of Admission's counts.
const (
	// DefaultPerAddress is Admission.PerAddress's default.
	DefaultPerAddress = 16
	// DefaultUnauthenticated is Admission.Unauthenticated's default.
	DefaultUnauthenticated = 16
	// DefaultUnauthenticatedPerAddress is
	// Admission.UnauthenticatedPerAddress's default.
	DefaultUnauthenticatedPerAddress = 2
)

func (a Admission) withDefaults() Admission {
	if a.PerAddress == 0 {
		a.PerAddress = DefaultPerAddress
	}
	if a.Unauthenticated == 0 {
		a.Unauthenticated = DefaultUnauthenticated
	}
	if a.UnauthenticatedPerAddress == 0 {
		a.UnauthenticatedPerAddress = DefaultUnauthenticatedPerAddress
	}
	if a.UnauthenticatedWait <= 0 {
		a.UnauthenticatedWait = 10 * time.Second
	}
	if a.BadKeys == 0 {
		a.BadKeys = 30
	}
	if a.BadKeyWindow <= 0 {
		a.BadKeyWindow = time.Minute
	}
	if a.BadKeyBan <= 0 {
		a.BadKeyBan = 5 * time.Minute
	}
	return a
}

// admission holds the gateway's per-address counts and the turns to read
// a body before its key is known.
type admission struct {
	cfg    Admission
	unauth chan struct{}

	mu      sync.Mutex
	active  map[string]int             // requests in the gateway, by client address
	turns   map[string]*addrTurns      // turns to read a body, by client address
	badKeys map[string]*classic.Window // unknown keys, by client address
}

func newAdmission(cfg Admission) *admission {
	a := &admission{cfg: cfg, active: map[string]int{}, turns: map[string]*addrTurns{}, badKeys: map[string]*classic.Window{}}
	if cfg.Unauthenticated > 0 {
		a.unauth = make(chan struct{}, cfg.Unauthenticated)
	}
	return a
}

// clientAddr is the address a request comes from: the connection's peer,
// an IPv6 one as its /64 (httpguard.ClientKey). A header (X-Forwarded-For)
// is not trusted: anyone may send it.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return httpguard.ClientKey(host)
}

// banned reports whether addr is banned for its unknown keys.
func (a *admission) banned(addr string, now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	w := a.badKeys[addr]
	return w != nil && w.Banned(now)
}

// enter counts a request from addr whose key is not known yet; it reports
// false when addr is at its count, and otherwise returns leave, to call
// when the request is answered.
func (a *admission) enter(addr string) (leave func(), ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cfg.PerAddress > 0 && a.active[addr] >= a.cfg.PerAddress {
		return nil, false
	}
	a.active[addr]++
	return func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.active[addr]--; a.active[addr] <= 0 {
			delete(a.active, addr)
		}
	}, true
}

// badKey records a request from addr with a key the gateway does not know.
func (a *admission) badKey(addr string, now time.Time) {
	if a.cfg.BadKeys < 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	w := a.badKeys[addr]
	if w == nil {
		w = classic.NewWindow(a.cfg.BadKeys, a.cfg.BadKeyWindow, a.cfg.BadKeyBan)
		a.badKeys[addr] = w
	}
	w.Allow(now)
}

// sweep forgets the bad-key counts of addresses that are neither banned
// nor counted within the window any more.
func (a *admission) sweep(now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for addr, w := range a.badKeys {
		if w.Idle(now) {
			delete(a.badKeys, addr)
		}
	}
}

// unauthTurn waits for a turn to read a body from addr whose key is not
// known yet: one of addr's own (UnauthenticatedPerAddress), then one of
// all (Unauthenticated). It returns done (idempotent) to give both back
// once the key is known or the request ends, or false when none came
// within UnauthenticatedWait. A request waiting for its address's turn
// holds none of all, so one address's stalled uploads keep no other
// address's out.
func (a *admission) unauthTurn(ctx context.Context, addr string) (done func(), ok bool) {
	if a.unauth == nil {
		return func() {}, true
	}
	t := time.NewTimer(a.cfg.UnauthenticatedWait)
	defer t.Stop()
	var own *addrTurns
	if a.cfg.UnauthenticatedPerAddress > 0 {
		a.mu.Lock()
		own = a.turns[addr]
		if own == nil {
			own = &addrTurns{ch: make(chan struct{}, a.cfg.UnauthenticatedPerAddress)}
			a.turns[addr] = own
		}
		own.users++
		a.mu.Unlock()
	}
	leaveOwn := func(held bool) {
		if own == nil {
			return
		}
		if held {
			<-own.ch
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		if own.users--; own.users == 0 {
			delete(a.turns, addr)
		}
	}
	if own != nil {
		select {
		case own.ch <- struct{}{}:
		case <-t.C:
			leaveOwn(false)
			return nil, false
		case <-ctx.Done():
			leaveOwn(false)
			return nil, false
		}
	}
	select {
	case a.unauth <- struct{}{}:
	case <-t.C:
		leaveOwn(true)
		return nil, false
	case <-ctx.Done():
		leaveOwn(true)
		return nil, false
	}
	var once sync.Once
	return func() { once.Do(func() { <-a.unauth; leaveOwn(true) }) }, true
}

// addrTurns are one address's turns to read a body before its key is
// known, and how many of its requests hold or wait for one.
type addrTurns struct {
	ch    chan struct{}
	users int
}
