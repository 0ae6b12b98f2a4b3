package gateway

// The turns a request takes to read its body before its key is known, and
// the pace such a body must keep (the admission's half that runs per
// request; admit.go holds its counts and bans).

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// unauthTurn waits for a turn to read a body from addr whose key is not
// known yet: one of addr's own (UnauthenticatedPerAddress), then one of
// its network's (UnauthenticatedPerNetwork; not for a proven address),
// then one of all
// (Unauthenticated; for an address that proved a key, proven, one of the
// reserve as well). It returns done (idempotent) to give them back once
// the key is known or the request ends, or false when none came within
// UnauthenticatedWait. A request waiting for one share holds none of the
// next, so one address's or one network's stalled uploads keep no other
// network's out.
func (a *admission) unauthTurn(ctx context.Context, addr string, proven bool) (done func(), ok bool) {
	if a.unauth == nil {
		return func() {}, true
	}
	t := time.NewTimer(a.cfg.UnauthenticatedWait)
	defer t.Stop()
	var held []func()
	giveBack := func() {
		for i := len(held) - 1; i >= 0; i-- {
			held[i]()
		}
	}
	levels := []struct {
		key string
		n   int
	}{{"addr " + addr, a.cfg.UnauthenticatedPerAddress}, {"net " + networkOf(addr), a.cfg.UnauthenticatedPerNetwork}}
	if proven {
		// A network is not one party: a hosting provider's /24 or /48
		// holds many tenants, any of whom may stall uploads on all of its
		// share. An address that proved a key does not wait behind them
		// for the reserve kept for it; its own address's share still
		// bounds it.
		levels = levels[:1]
	}
	for _, l := range levels {
		if l.n <= 0 {
			continue
		}
		s := a.share(l.key, l.n)
		select {
		case s.ch <- struct{}{}:
			held = append(held, func() { <-s.ch; a.unshare(l.key, s) })
			continue
		case <-t.C:
		case <-ctx.Done():
		}
		a.unshare(l.key, s)
		giveBack()
		return nil, false
	}
	var reserved chan struct{} // nil: never taken
	if proven {
		reserved = a.reserved
	}
	select {
	case a.unauth <- struct{}{}:
		held = append(held, func() { <-a.unauth })
	case reserved <- struct{}{}:
		held = append(held, func() { <-reserved })
	case <-t.C:
		giveBack()
		return nil, false
	case <-ctx.Done():
		giveBack()
		return nil, false
	}
	var once sync.Once
	return func() { once.Do(giveBack) }, true
}

// share is the turns of one address or network (key) of n, counting the
// request that will wait for one of them.
func (a *admission) share(key string, n int) *addrTurns {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.turns[key]
	if s == nil {
		s = &addrTurns{ch: make(chan struct{}, n)}
		a.turns[key] = s
	}
	s.users++
	return s
}

// unshare is share's end: the request neither holds nor waits for one of
// key's turns any more.
func (a *admission) unshare(key string, s *addrTurns) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s.users--; s.users == 0 {
		delete(a.turns, key)
	}
}

// addrTurns are one address's or network's turns to read a body before
// its key is known, and how many of its requests hold or wait for one.
type addrTurns struct {
	ch    chan struct{}
	users int
}

// networkOf is the network of a client address as clientAddr gives it:
// an IPv6 /64's /48, an IPv4 address's /24; anything else is its own.
func networkOf(addr string) string {
	if p, err := netip.ParsePrefix(addr); err == nil && p.Addr().Is6() {
		return netip.PrefixFrom(p.Addr(), 48).Masked().String()
	}
	if ip, err := netip.ParseAddr(addr); err == nil && ip.Is4() {
		return netip.PrefixFrom(ip, 24).Masked().String()
	}
	return addr
}

// errTooSlow ends the reading of a body that fell behind the pace a body
// holding a turn must keep before its key is known.
var errTooSlow = errors.New("the body arrives too slowly")

// paced is a body read on one of the turns before its key is known,
// counting what arrives.
type paced struct {
	io.ReadCloser
	n    atomic.Int64
	slow atomic.Bool
}

func (p *paced) Read(b []byte) (int, error) {
	n, err := p.ReadCloser.Read(b)
	p.n.Add(int64(n))
	if p.slow.Load() {
		return n, errTooSlow
	}
	return n, err
}

// pace holds r's body, read on a turn that done gives back, to
// UnauthenticatedGrace plus one second per UnauthenticatedMinRate bytes
// read: behind that, the turn is given back at once (not when the server's
// read timeout ends the request) and the body's reading ends with
// errTooSlow. It returns done extended to stop the watch.
func (a *admission) pace(w http.ResponseWriter, r *http.Request, done func()) func() {
	if a.cfg.UnauthenticatedMinRate <= 0 {
		return done
	}
	p := &paced{ReadCloser: r.Body}
	r.Body = p
	stop := make(chan struct{})
	start := time.Now()
	go func() {
		t := time.NewTimer(a.cfg.UnauthenticatedGrace)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			due := start.Add(a.cfg.UnauthenticatedGrace + time.Duration(p.n.Load())*time.Second/time.Duration(a.cfg.UnauthenticatedMinRate))
			if wait := time.Until(due); wait > 0 {
				t.Reset(wait)
				continue
			}
			p.slow.Store(true)
			done()
			// A read waiting on the connection ends now; a body that is
			// not a connection's (a handler's caller of its own) is
			// closed instead.
			if err := http.NewResponseController(w).SetReadDeadline(time.Now()); err != nil {
				_ = p.ReadCloser.Close()
			}
			return
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(stop); done() }) }
}
