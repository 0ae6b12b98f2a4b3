package httpguard_test

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/internal/httpguard"
)

func serve(t *testing.T, lim httpguard.Limits) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := httpguard.Server(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }), lim)
	go func() { _ = srv.Serve(httpguard.Listen(l, lim)) }()
	t.Cleanup(func() { srv.Close() })
	return l.Addr().String()
}

// get sends a request on c and returns the status line, or the error.
func get(c net.Conn) (string, error) {
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return "", err
	}
	return bufio.NewReader(c).ReadString('\n')
}

// A connection over the address's count is closed as soon as it is
// accepted; one within it is served.
func TestPerAddressCap(t *testing.T) {
	t.Parallel()
	addr := serve(t, httpguard.Limits{MaxConns: 10, MaxConnsPerAddr: 2, ReadHeaderTimeout: time.Minute})
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		held = append(held, c)
	}
	_, err := get(held[0])
	require.NoError(t, err, "the address's first connection is served")
	over, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer over.Close()
	_, err = get(over)
	require.Error(t, err, "the third connection of the address is closed")
	held[1].Close()
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return false
		}
		defer c.Close()
		line, err := get(c)
		return err == nil && line == "HTTP/1.1 200 OK\r\n"
	}, 10*time.Second, 10*time.Millisecond, "served again once one closes")
}

// At MaxConns the listener accepts nothing more: a further connection
// waits (in the kernel's backlog) and is served once one closes.
func TestListenerCap(t *testing.T) {
	t.Parallel()
	addr := serve(t, httpguard.Limits{MaxConns: 2, ReadHeaderTimeout: time.Minute})
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		_, err = get(c)
		require.NoError(t, err)
		held = append(held, c)
	}
	waiting, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer waiting.Close()
	answered := make(chan string, 1)
	go func() { line, _ := get(waiting); answered <- line }()
	select {
	case line := <-answered:
		t.Fatalf("a third connection was served at the cap: %q", line)
	case <-time.After(300 * time.Millisecond): // nothing may come: a bounded look
	}
	held[0].Close()
	select {
	case line := <-answered:
		require.Equal(t, "HTTP/1.1 200 OK\r\n", line)
	case <-time.After(10 * time.Second):
		t.Fatal("not served after a connection closed")
	}
}

// Headers that do not arrive within ReadHeaderTimeout end the connection.
func TestSlowHeadersCut(t *testing.T) {
	t.Parallel()
	addr := serve(t, httpguard.Limits{MaxConns: 2, ReadHeaderTimeout: 200 * time.Millisecond})
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	_, err = io.WriteString(c, "GET / HTTP/1.1\r\n")
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err = c.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF, "closed by the server, not by the test's deadline")
}

func TestBudget(t *testing.T) {
	t.Parallel()
	b := httpguard.NewBudget(1000) // 500 for HTTP
	gw, dash := httpguard.Gateway(), httpguard.Dashboard()
	b.Take("dashboard", &dash, discard())
	b.Take("gateway", &gw, discard())
	require.Equal(t, 64, dash.MaxConns)
	require.Equal(t, 436, gw.MaxConns, "what the dashboard left of half the descriptors")
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// Per-address bounds count an IPv6 client by its /64 (every address of
// which one subscriber may use), an IPv4 one by its address, however
// written.
func TestClientKeyGroupsIPv6By64(t *testing.T) {
	for host, want := range map[string]string{
		"203.0.113.9":             "203.0.113.9",
		"::ffff:203.0.113.9":      "203.0.113.9",
		"2001:db8:7:8::1":         "2001:db8:7:8::/64",
		"2001:db8:7:8:ffff::abcd": "2001:db8:7:8::/64",
		"fe80::1%eth0":            "fe80::/64",
		"not-an-address":          "not-an-address",
	} {
		require.Equal(t, want, httpguard.ClientKey(host), host)
	}
	require.NotEqual(t, httpguard.ClientKey("2001:db8:7:8::1"), httpguard.ClientKey("2001:db8:7:9::1"))
}
