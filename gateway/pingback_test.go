package gateway_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/gateway"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream/streamtest"
)

// callbacks is a pingback receiver that refuses its first fail calls.
type callbacks struct {
	mu    sync.Mutex
	fail  int
	calls []url.Values
	got   chan url.Values // each accepted call
}

func newCallbacks(t *testing.T, fail int) (*callbacks, string) {
	cb := &callbacks{fail: fail, got: make(chan url.Values, 16)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cb.mu.Lock()
		defer cb.mu.Unlock()
		if r.Method != http.MethodGet {
			http.Error(w, "GET only", http.StatusMethodNotAllowed)
			return
		}
		cb.calls = append(cb.calls, r.URL.Query())
		if len(cb.calls) <= cb.fail {
			http.Error(w, "not now", http.StatusServiceUnavailable)
			return
		}
		cb.got <- r.URL.Query()
	}))
	t.Cleanup(srv.Close)
	return cb, srv.URL + "/hook?source=captchaq"
}

// A pingback refused twice is sent again until it is taken, with the id
// and the token, keeping the URL's own query.
func TestPingbackRetries(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *gateway.Config) {
		c.Pingback = gateway.Pingback{Backoff: 5 * time.Millisecond, Allow: testHooks}
	})
	cb, hook := newCallbacks(t, 2)
	out := b.call(t, "in.php", append([]string{"key", alice.Key, "pingback", hook}, turnstile...)...)
	id := out[len("OK|"):]
	var q url.Values
	select {
	case q = <-cb.got:
	case <-time.After(30 * time.Second):
		t.Fatal("no pingback taken in 30 s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o, err := b.env.Client.Wait(ctx, "alice-"+id)
	require.NoError(t, err)
	require.Equal(t, id, q.Get("id"))
	require.Equal(t, o.Text(), q.Get("code"))
	require.Equal(t, "captchaq", q.Get("source"))
	cb.mu.Lock()
	require.Len(t, cb.calls, 3)
	cb.mu.Unlock()
}

// A task that dies is called back with the service's code.
func TestPingbackOfADeadTask(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, streamtest.WithFaults(fakeapi.Faults{Unsolvable: 1}), streamtest.WithMaxAttempts(1))
	cb, hook := newCallbacks(t, 0)
	out := b.call(t, "in.php", append([]string{"key", alice.Key, "pingback", hook}, turnstile...)...)
	select {
	case q := <-cb.got:
		require.Equal(t, out[len("OK|"):], q.Get("id"))
		require.Equal(t, "ERROR_CAPTCHA_UNSOLVABLE", q.Get("code"))
	case <-time.After(30 * time.Second):
		t.Fatal("no pingback in 30 s")
	}
	require.Equal(t, "ERROR_BAD_PARAMETERS", b.call(t, "in.php", append([]string{"key", alice.Key, "pingback", "ftp://x"}, turnstile...)...))
}
