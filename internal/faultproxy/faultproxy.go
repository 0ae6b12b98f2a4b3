// Package faultproxy holds Proxy, a TCP proxy on 127.0.0.1 that tests put
// in front of a server (the solving service's emulator, a nats-server) to
// make it fail as a real one does: refuse connections (nothing listens),
// at once or once each open exchange is answered, or freeze (connections are accepted and what is sent is held, unanswered,
// as by a stopped process) and later thaw (what was held goes through at
// once, as a resumed process works off its backlog).
package faultproxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// state is what the proxy does with traffic.
type state int

const (
	up      state = iota // forwards
	frozen               // accepts and holds
	refused              // does not listen
)

// Proxy forwards the connections it accepts on Addr to its target, unless
// told to fail. It is safe for concurrent use.
type Proxy struct {
	target string
	addr   string

	mu       sync.Mutex
	st       state
	ln       net.Listener // nil while refusing
	thaw     chan struct{}
	conns    map[net.Conn]struct{}
	links    map[*link]struct{}
	accepted int
	closed   bool
	wg       sync.WaitGroup
}

// Start listens on a free port of 127.0.0.1 and forwards to target
// (host:port).
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, addr: ln.Addr().String(), ln: ln, thaw: make(chan struct{}),
		conns: map[net.Conn]struct{}{}, links: map[*link]struct{}{}}
	close(p.thaw)
	p.wg.Add(1)
	go p.serve(ln)
	return p, nil
}

// Addr is the host:port clients dial.
func (p *Proxy) Addr() string { return p.addr }

// Accepted counts the connections accepted so far.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// Freeze holds every byte sent either way on every connection, open or
// new, until Restore: the target seems alive (connections are accepted)
// and answers nothing.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.st == up {
		p.thaw = make(chan struct{})
	}
	p.st = frozen
}

// Refuse closes every connection and stops listening: a dial to Addr is
// refused until Restore.
func (p *Proxy) Refuse() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopListening() {
		for c := range p.conns {
			c.Close()
		}
	}
}

// stopListening turns the proxy to refused, with p.mu held: it reports
// false if it was already.
func (p *Proxy) stopListening() bool {
	if p.st == refused {
		return false
	}
	if p.st == frozen {
		close(p.thaw)
	}
	p.st = refused
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	return true
}

// RefuseAfterReplies stops listening, as Refuse does, but closes each open
// connection only once it carries no exchange: at once if the target's
// reply was the last thing forwarded on it, else once the target has
// answered (and has been quiet for quietFor), as a server shutting down
// gracefully does (net/http's Server.Shutdown). No request in flight is
// cut: the refusal alone, without a reply lost.
func (p *Proxy) RefuseAfterReplies() {
	p.mu.Lock()
	ok := p.stopListening()
	p.mu.Unlock()
	if !ok {
		return
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		tick := time.NewTicker(quietFor / 4)
		defer tick.Stop()
		for range tick.C {
			p.mu.Lock()
			if p.st != refused || p.closed {
				p.mu.Unlock()
				return
			}
			for l := range p.links {
				if l.answered(time.Now()) {
					l.c.Close()
					l.u.Close()
					delete(p.links, l)
				}
			}
			left := len(p.links)
			p.mu.Unlock()
			if left == 0 {
				return
			}
		}
	}()
}

// quietFor is how long a connection's target must have sent nothing more
// after its reply before RefuseAfterReplies closes it: a reply that comes
// in several writes is forwarded whole.
const quietFor = 20 * time.Millisecond

// link is a client's connection and the proxy's to the target, with when
// bytes were last forwarded each way (Unix nanoseconds).
type link struct {
	c, u               net.Conn
	toTarget, toClient atomic.Int64
}

// answered reports whether the link carries no exchange at now: the last
// bytes forwarded went to the client, at least quietFor ago, or none went
// either way.
func (l *link) answered(now time.Time) bool {
	in, out := l.toTarget.Load(), l.toClient.Load()
	return out >= in && now.UnixNano()-out >= int64(quietFor)
}

// Restore forwards again: a freeze ends with what it held sent on, a
// refusal with listening on the same Addr again.
func (p *Proxy) Restore() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch p.st {
	case frozen:
		close(p.thaw)
	case refused:
		ln, err := net.Listen("tcp", p.addr)
		if err != nil {
			return err
		}
		p.ln = ln
		p.wg.Add(1)
		go p.serve(ln)
	}
	p.st = up
	return nil
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	if p.st == frozen {
		close(p.thaw)
		p.st = up
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// gate returns when traffic may flow: at once unless frozen.
func (p *Proxy) gate() {
	p.mu.Lock()
	ch := p.thaw
	p.mu.Unlock()
	<-ch
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.st == refused {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *Proxy) serve(ln net.Listener) {
	defer p.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.accepted++
		p.mu.Unlock()
		if !p.track(c) {
			continue
		}
		p.wg.Add(1)
		go p.forward(c)
	}
}

// forward pipes c to a new connection to the target, once traffic may flow.
func (p *Proxy) forward(c net.Conn) {
	defer p.wg.Done()
	defer p.untrack(c)
	p.gate()
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	if !p.track(u) {
		return
	}
	defer p.untrack(u)
	l := &link{c: c, u: u}
	p.mu.Lock()
	p.links[l] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.links, l)
		p.mu.Unlock()
	}()
	done := make(chan struct{}, 2)
	// A request is stamped as it starts on to the target, a reply as it
	// has reached the client: the reply's stamp is then always the later
	// (the target answered what it received), however the two goroutines
	// are scheduled. Stamping the request after its write as well let a
	// write return, the reply pass, and the request's stamp land last,
	// which left an answered connection looking busy for good (1 in 20
	// runs of the RefuseAfterReplies test on a loaded machine).
	go func() { p.pipe(u, c, &l.toTarget, false); done <- struct{}{} }()
	go func() { p.pipe(c, u, &l.toClient, true); done <- struct{}{} }()
	<-done
	c.Close()
	u.Close()
	<-done
}

// pipe copies src to dst, holding each read while frozen, and stores in
// last when it last began a write to dst, and, if ended, when it ended one.
func (p *Proxy) pipe(dst, src net.Conn, last *atomic.Int64, ended bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.gate()
			last.Store(time.Now().UnixNano())
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
			if ended {
				last.Store(time.Now().UnixNano())
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return
			}
			if tc, ok := dst.(*net.TCPConn); ok {
				tc.CloseWrite()
			}
			return
		}
	}
}
