// Package tcpproxy holds Proxy, a TCP forwarder on a local port that tests
// put between a client and a service to make the service look gone
// (connections refused) and come back on the same address.
package tcpproxy

import (
	"fmt"
	"io"
	"net"
	"sync"
)

// Proxy forwards the TCP connections it accepts on Addr to a target.
type Proxy struct {
	// Addr is where it listens (127.0.0.1:port), the same before and after
	// a Refuse.
	Addr   string
	target string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

// New listens on a free port of 127.0.0.1 and forwards to target
// (host:port).
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("tcpproxy: listen: %w", err)
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, conns: map[net.Conn]bool{}}
	p.serve(ln)
	return p, nil
}

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns[c], p.conns[up] = true, true
			p.mu.Unlock()
			p.wg.Add(2)
			pipe := func(dst, src net.Conn) {
				defer p.wg.Done()
				_, _ = io.Copy(dst, src)
				dst.Close()
				src.Close()
			}
			go pipe(up, c)
			go pipe(c, up)
		}
	}()
}

// Refuse closes the listener, so that connections to Addr are refused,
// and cuts every open connection.
func (p *Proxy) Refuse() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// Listen takes connections on Addr again.
func (p *Proxy) Listen() error {
	ln, err := net.Listen("tcp", p.Addr)
	if err != nil {
		return fmt.Errorf("tcpproxy: listen again on %s: %w", p.Addr, err)
	}
	p.serve(ln)
	return nil
}

// Close refuses and waits for the forwarding goroutines to end.
func (p *Proxy) Close() {
	p.Refuse()
	p.wg.Wait()
}
