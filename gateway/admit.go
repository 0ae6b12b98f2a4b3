package gateway

import (
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
	// UnauthenticatedReserved is how many of the Unauthenticated turns
	// only an address that proved a gateway key (any request with a key
	// the gateway knows, in its query or its body, within the last
	// ProvenFor) may take: stalled uploads from as many networks as it
	// takes to hold every other turn never hold these, so a caller that
	// polled or submitted before (res.php polls carry the key in the
	// query) gets a turn at once whatever they do. Default 4; negative:
	// none.
	UnauthenticatedReserved int
	// ProvenFor is how long an address stays one that proved a key.
	// Default 1 h.
	ProvenFor time.Duration
	// UnauthenticatedPerNetwork is how many of those turns one client
	// network may hold at once: an IPv6 /48 (the prefix a subscriber is
	// commonly given, RFC 6177: it chooses each of its 65,536 /64s) or an
	// IPv4 /24. Addresses cost a caller nothing to change within its own
	// network, so a per-address share alone is a share per /64 the caller
	// cares to use; this second level keeps one subscriber to a few turns
	// whatever it spreads them over. An address that proved a key (see
	// UnauthenticatedReserved) is not held to its network's share: its
	// neighbours in a shared block cannot keep it from the reserve.
	// Default 4.
	UnauthenticatedPerNetwork int
	// UnauthenticatedWait is how long a request waits for its turn to
	// read its body before its key is known. Default 10 s.
	UnauthenticatedWait time.Duration
	// UnauthenticatedGrace and UnauthenticatedMinRate are the pace a body
	// holding one of those turns must keep: UnauthenticatedGrace, plus
	// one second per UnauthenticatedMinRate bytes read, after it got its
	// turn (Apache's mod_reqtimeout rule, "body=20,MinRate=500": 20 s,
	// and 1 s more per 500 bytes received). A body behind that pace gives
	// its turn back to the callers waiting, and its reading ends (HTTP
	// 408). A stalled upload so holds a turn for the grace, not for the
	// server's whole-request timeout, and holding one longer costs
	// its sender UnauthenticatedMinRate bytes a second; a caller on a
	// poor link (2 KB/s, four times the rate) is never behind. Default
	// 10 s (the wait above: a caller waiting for a turn held by stalled
	// uploads sees it freed within its wait) and 500 bytes a second.
	UnauthenticatedGrace   time.Duration
	UnauthenticatedMinRate int
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
	// DefaultUnauthenticatedReserved is
	// Admission.UnauthenticatedReserved's default.
	DefaultUnauthenticatedReserved = 4
	// DefaultUnauthenticatedPerNetwork is
	// Admission.UnauthenticatedPerNetwork's default.
	DefaultUnauthenticatedPerNetwork = 4
	// DefaultUnauthenticatedMinRate is
	// Admission.UnauthenticatedMinRate's default, in bytes a second.
	DefaultUnauthenticatedMinRate = 500
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
	if a.UnauthenticatedReserved == 0 {
		a.UnauthenticatedReserved = DefaultUnauthenticatedReserved
	}
	if a.ProvenFor <= 0 {
		a.ProvenFor = time.Hour
	}
	if a.UnauthenticatedPerNetwork == 0 {
		a.UnauthenticatedPerNetwork = DefaultUnauthenticatedPerNetwork
	}
	if a.UnauthenticatedWait <= 0 {
		a.UnauthenticatedWait = 10 * time.Second
	}
	if a.UnauthenticatedGrace <= 0 {
		a.UnauthenticatedGrace = 10 * time.Second
	}
	if a.UnauthenticatedMinRate == 0 {
		a.UnauthenticatedMinRate = DefaultUnauthenticatedMinRate
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
	// reserved are the turns only a proven address takes (a nil channel,
	// which no select takes, when none are).
	reserved chan struct{}

	mu      sync.Mutex
	active  map[string]int             // requests in the gateway, by client address
	turns   map[string]*addrTurns      // turns to read a body, by client address
	badKeys map[string]*classic.Window // unknown keys, by client address
	proven  map[string]provenBy        // when a known key last came, and whose, by client address
	// provenOf counts the addresses in proven by key (its SHA-256).
	provenOf map[[32]byte]int
}

// provenBy is when a request from an address last carried a known key,
// and which key (its SHA-256).
type provenBy struct {
	at  time.Time
	key [32]byte
}

// maxProven bounds the addresses remembered as proven, and maxProvenPerKey
// those of one key: only a request with a valid key adds one, and one
// key's holder sending it from address after address (an IPv6 /48 has
// 65,536 /64s) fills no more than its share, so that the callers of other
// keys are still remembered. Past either, no more are added (for that
// key) until the sweep forgets the stale ones.
const (
	maxProven       = 1 << 16
	maxProvenPerKey = 1 << 10
)

func newAdmission(cfg Admission) *admission {
	a := &admission{cfg: cfg, active: map[string]int{}, turns: map[string]*addrTurns{}, badKeys: map[string]*classic.Window{},
		proven: map[string]provenBy{}, provenOf: map[[32]byte]int{}}
	if cfg.Unauthenticated > 0 {
		// The reserve is at most half the turns: callers new to the
		// gateway keep the rest.
		r := min(max(cfg.UnauthenticatedReserved, 0), cfg.Unauthenticated/2)
		a.unauth = make(chan struct{}, cfg.Unauthenticated-r)
		if r > 0 {
			a.reserved = make(chan struct{}, r)
		}
	}
	return a
}

// prove notes that a request from addr carried a key the gateway knows,
// key its SHA-256.
func (a *admission) prove(addr string, key [32]byte, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p, ok := a.proven[addr]; ok {
		a.unprove(p.key)
	} else if len(a.proven) >= maxProven || a.provenOf[key] >= maxProvenPerKey {
		return
	}
	a.proven[addr] = provenBy{at: now, key: key}
	a.provenOf[key]++
}

// unprove uncounts an address of key's; a.mu held.
func (a *admission) unprove(key [32]byte) {
	if a.provenOf[key]--; a.provenOf[key] <= 0 {
		delete(a.provenOf, key)
	}
}

// isProven reports whether a request from addr carried a known key within
// ProvenFor.
func (a *admission) isProven(addr string, now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	p, ok := a.proven[addr]
	return ok && now.Sub(p.at) < a.cfg.ProvenFor
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
	for addr, p := range a.proven {
		if now.Sub(p.at) >= a.cfg.ProvenFor {
			delete(a.proven, addr)
			a.unprove(p.key)
		}
	}
}
