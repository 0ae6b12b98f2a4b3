// Package httpguard bounds what each of captchaq's HTTP listeners (the
// gateway, the dashboard, the metrics endpoint) may hold: connections in
// all and per client address, how long a request may take to arrive and a
// connection may idle; and it raises the process's descriptor limit and
// shares it out, so that HTTP clients, however many and however slow,
// never take the descriptors the broker's own clients need.
package httpguard

import (
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// Limits are one listener's bounds. Zero fields are not bounded.
type Limits struct {
	// MaxConns is how many connections the listener holds at once. At
	// it, Accept waits: further connections wait in the kernel's listen
	// backlog, holding no descriptor of the process, until one closes.
	MaxConns int
	// MaxConnsPerAddr is how many of them one client address may hold; a
	// connection over it is closed as soon as it is accepted.
	MaxConnsPerAddr int
	// ReadHeaderTimeout bounds the arrival of a request's headers;
	// ReadTimeout of the whole request, body included; WriteTimeout the
	// handling and the reply; IdleTimeout the wait for the next request
	// on a kept-alive connection.
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers.
	MaxHeaderBytes int
}

// Gateway are the gateway's limits: 1,024 connections, 64 per address;
// headers within 5 s, a whole request (an image of 1024 KB base64-encoded
// is its largest) within 60 s, the answer within 30 s (in.php waits at
// most 10 s for the broker, res.php as long for the stream), 60 s idle;
// headers of 64 KB at most.
func Gateway() Limits {
	return Limits{MaxConns: 1024, MaxConnsPerAddr: 64, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: time.Minute,
		WriteTimeout: 30 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 64 << 10}
}

// Dashboard are the dashboard's limits: 64 connections, 16 per address,
// headers within 5 s, a request within 10 s, 60 s idle, 64 KB of
// headers; no write timeout, since its event streams stay open.
func Dashboard() Limits {
	return Limits{MaxConns: 64, MaxConnsPerAddr: 16, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		IdleTimeout: time.Minute, MaxHeaderBytes: 64 << 10}
}

// Metrics are the metrics endpoint's limits: 32 connections, 8 per
// address, headers within 5 s, a request within 10 s, the answer within
// 30 s, 60 s idle, 64 KB of headers.
func Metrics() Limits {
	return Limits{MaxConns: 32, MaxConnsPerAddr: 8, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 64 << 10}
}

// Callbacks are the limits of a worker's listener for the service's
// callbacks (`worker --pingback-listen`): 256 connections, any number
// from one address (the service calls back from a few), headers within
// 5 s, a request within 10 s, the answer within 10 s, 60 s idle, 64 KB
// of headers.
func Callbacks() Limits {
	return Limits{MaxConns: 256, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 10 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 64 << 10}
}

// Server is an http.Server for h with lim's timeouts; serve it on
// Listen's listener.
func Server(h http.Handler, lim Limits) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: lim.ReadHeaderTimeout, ReadTimeout: lim.ReadTimeout,
		WriteTimeout: lim.WriteTimeout, IdleTimeout: lim.IdleTimeout, MaxHeaderBytes: lim.MaxHeaderBytes}
}

// Listen wraps l so that it holds at most lim.MaxConns connections, and at
// most lim.MaxConnsPerAddr from one client address.
func Listen(l net.Listener, lim Limits) net.Listener {
	g := &listener{Listener: l, lim: lim, byAddr: map[string]int{}, closed: make(chan struct{})}
	if lim.MaxConns > 0 {
		g.slots = make(chan struct{}, lim.MaxConns)
	}
	return g
}

type listener struct {
	net.Listener
	lim    Limits
	slots  chan struct{}
	closed chan struct{}
	close  sync.Once

	mu     sync.Mutex
	byAddr map[string]int
}

func (l *listener) Accept() (net.Conn, error) {
	for {
		if l.slots != nil {
			select {
			case l.slots <- struct{}{}:
			case <-l.closed:
				return nil, net.ErrClosed
			}
		}
		c, err := l.Listener.Accept()
		if err != nil {
			l.release()
			return nil, err
		}
		addr := hostOf(c.RemoteAddr())
		l.mu.Lock()
		over := l.lim.MaxConnsPerAddr > 0 && l.byAddr[addr] >= l.lim.MaxConnsPerAddr
		if !over {
			l.byAddr[addr]++
		}
		l.mu.Unlock()
		if over {
			c.Close()
			l.release()
			continue
		}
		return &conn{Conn: c, done: func() {
			l.mu.Lock()
			if l.byAddr[addr]--; l.byAddr[addr] <= 0 {
				delete(l.byAddr, addr)
			}
			l.mu.Unlock()
			l.release()
		}}, nil
	}
}

// Close closes the listener, and ends an Accept waiting for a slot.
func (l *listener) Close() error {
	l.close.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

func (l *listener) release() {
	if l.slots != nil {
		<-l.slots
	}
}

func hostOf(a net.Addr) string {
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return ClientKey(host)
}

// ClientKey is what per-address bounds count a client address host under:
// an IPv4 address (an IPv4-mapped IPv6 one unmapped) as itself, an IPv6
// address as its /64, the network one subscriber is given and chooses
// every address of (RFC 6177), so that rotating addresses within it
// passes no bound; anything else as it is.
func ClientKey(host string) string {
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	if ip = ip.Unmap(); ip.Is4() {
		return ip.String()
	}
	return netip.PrefixFrom(ip.WithZone(""), 64).Masked().String()
}

// conn gives its listener's counts back once, when closed.
type conn struct {
	net.Conn
	once sync.Once
	done func()
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.done)
	return err
}

// Budget shares the process's descriptors among its HTTP listeners: all
// together hold at most half of them, and the other half stays for the
// broker's clients (nats-server's max_connections in the shipped
// nats.conf is 4,096), its store's files and the connections captchaq
// makes itself. It is safe for concurrent use.
type Budget struct {
	mu   sync.Mutex
	left int
}

// NewBudget is the budget of a process whose descriptor limit is nofile.
func NewBudget(nofile uint64) *Budget {
	return &Budget{left: int(min(nofile/2, 1<<30))}
}

// Take lowers lim.MaxConns to what is left of the budget (at least 8) and
// takes it; it logs what it lowered.
func (b *Budget) Take(name string, lim *Limits, log *slog.Logger) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if lim.MaxConns <= 0 || lim.MaxConns > b.left {
		was := lim.MaxConns
		lim.MaxConns = max(8, b.left)
		log.Warn("HTTP connections lowered to fit the descriptor limit", slog.String("listener", name),
			slog.Int("was", was), slog.Int("max_conns", lim.MaxConns))
	}
	lim.MaxConnsPerAddr = min(lim.MaxConnsPerAddr, lim.MaxConns)
	b.left = max(0, b.left-lim.MaxConns)
}
