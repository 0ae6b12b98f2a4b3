package gateway_test

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/gateway"
	"github.com/captchaq/captchaq/stream/streamtest"
)

// heapLive is the live heap after a collection, in bytes.
func heapLive() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// rss is the process's resident set, in bytes (0 where /proc is not).
func rss() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if kb, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var n uint64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(kb), "kB")), &n)
			return n << 10
		}
	}
	return 0
}

// 500 callers without a valid key each start an in.php upload of 1.5 MB
// (an urlencoded base64 image whose key field would come last) and stall
// before its last byte. The gateway's live heap stays bounded (under
// 100 MB more than before): it reads at most Admission.UnauthenticatedPerAddress bodies
// from one address and Admission.Unauthenticated before their key is
// known, and answers the rest at once, unread. A caller whose key is in
// the query is served meanwhile.
func TestSlowUnauthenticatedUploadsBoundMemory(t *testing.T) {
	b := setup(t, nil, streamtest.WithWorkers(0))
	u, err := url.Parse(b.url)
	require.NoError(t, err)
	const n, size = 500, 1500 << 10
	body := append([]byte("method=base64&body="), bytes.Repeat([]byte("A"), size)...)
	body = append(body, "&key=not-a-key-of-the-gateway"...)
	head := fmt.Sprintf("POST /in.php HTTP/1.1\r\nHost: %s\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: %d\r\n\r\n", u.Host, len(body))

	heap0, rss0 := heapLive(), rss()
	var (
		mu       sync.Mutex
		answered = map[string]int{}
		conns    []net.Conn
	)
	for range n {
		c, err := net.Dial("tcp", u.Host)
		require.NoError(t, err)
		conns = append(conns, c)
		go func() {
			// Everything but the last byte, then the answer, if any
			// comes before the test hangs up.
			if _, err := c.Write([]byte(head)); err == nil {
				_, _ = c.Write(body[:len(body)-1])
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err == nil {
				var buf bytes.Buffer
				_, _ = buf.ReadFrom(resp.Body)
				resp.Body.Close()
				mu.Lock()
				answered[buf.String()]++
				mu.Unlock()
			}
		}()
	}
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	// The uploads over the address's count are answered unread; the
	// others stall, read by the gateway but for their last byte.
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return answered["MAX_USER_TURN"] == n-gateway.DefaultPerAddress
	}, time.Minute, 10*time.Millisecond, "uploads over the address's count are answered unread")
	// The gateway may still be reading what the kernel took: the peak of
	// its live heap over the next 2 s.
	var heap1, rss1 uint64
	for range 10 {
		heap1, rss1 = max(heap1, heapLive()), max(rss1, rss())
		time.Sleep(200 * time.Millisecond) // sampling, not waiting for an event
	}
	t.Logf("%d stalled uploads of %d KB: live heap %d MB -> %d MB, RSS %d MB -> %d MB; answered unread: %v",
		n, len(body)>>10, heap0>>20, heap1>>20, rss0>>20, rss1>>20, answered)
	require.Less(t, int64(heap1)-int64(heap0), int64(100<<20), "the gateway holds the stalled uploads' bodies")

	// A caller with its key in the query is served meanwhile (its key's
	// limits bound it, not its address's count); one without waits.
	require.Equal(t, "100", b.call(t, "res.php", "key", alice.Key, "action", "getbalance"))
	require.Equal(t, "ERROR: 1005", b.post(t, "res.php", "key", alice.Key, "action", "getbalance"),
		"the address is at its count of requests whose key is not known")
	for _, c := range conns {
		c.Close()
	}
	require.Eventually(t, func() bool {
		return b.post(t, "res.php", "key", alice.Key, "action", "getbalance") == "100"
	}, 10*time.Second, 10*time.Millisecond, "served again once they hang up")
}

// A key in the query that the gateway does not know is answered before the
// body is read; a body that names an unknown key is cut there. An address
// that keeps sending unknown keys is banned (IP_BANNED) for a while, and
// answered so whatever key it sends; other addresses are not.
func TestUnknownKeysAnsweredUnreadAndBanned(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *gateway.Config) { c.Admission = gateway.Admission{BadKeys: 3} }, streamtest.WithWorkers(0))
	for range 4 { // 3 within the window, the 4th bans
		require.Equal(t, "ERROR_KEY_DOES_NOT_EXIST", b.post(t, "in.php?key=wrong-key-0123456789", "method", "base64", "body", "AAAA"))
	}
	require.Equal(t, "IP_BANNED", b.call(t, "res.php", "key", alice.Key, "action", "getbalance"))
}

// A JSON body that does not parse is answered in JSON: the caller speaks
// JSON.
func TestBadJSONBodyAnsweredInJSON(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, streamtest.WithWorkers(0))
	resp, err := http.Post(b.url+"/in.php", "application/json", strings.NewReader(`{"key": "`+alice.Key+`", "json": 1, "method": `))
	require.NoError(t, err)
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, err = buf.ReadFrom(resp.Body)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(buf.String(), `{"status":0,"request":"ERROR_BAD_PARAMETERS"`), buf.String())
}
