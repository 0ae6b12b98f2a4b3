package faultproxy

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// held is a target whose every reply waits until release is closed;
// started receives once per request the target has begun.
func held(t *testing.T) (target *httptest.Server, started chan struct{}, release chan struct{}) {
	t.Helper()
	started, release = make(chan struct{}, 8), make(chan struct{})
	target = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-release
		_, _ = io.WriteString(w, "OK|answered")
	}))
	t.Cleanup(target.Close)
	return target, started, release
}

// A request in flight when the proxy refuses: Refuse cuts it (the client
// gets no reply), RefuseAfterReplies lets its reply through and refuses
// every new connection meanwhile and after.
func TestRefuseAfterRepliesLetsTheExchangeInFlightEnd(t *testing.T) {
	for _, c := range []struct {
		name     string
		refuse   func(*Proxy)
		answered bool
	}{
		{"Refuse", (*Proxy).Refuse, false},
		{"RefuseAfterReplies", (*Proxy).RefuseAfterReplies, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			target, started, release := held(t)
			p, err := Start(target.Listener.Addr().String())
			require.NoError(t, err)
			t.Cleanup(p.Close)
			type result struct {
				body string
				err  error
			}
			got := make(chan result, 1)
			go func() {
				resp, err := http.Post("http://"+p.Addr()+"/in.php", "text/plain", nil)
				if err != nil {
					got <- result{err: err}
					return
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				got <- result{string(b), err}
			}()
			<-started
			c.refuse(p)
			_, err = net.DialTimeout("tcp", p.Addr(), time.Second)
			require.Error(t, err, "a new connection while refusing")
			close(release)
			r := <-got
			if !c.answered {
				require.Error(t, r.err, "the exchange in flight is cut")
				return
			}
			require.NoError(t, r.err)
			require.Equal(t, "OK|answered", r.body)
			require.Eventually(t, func() bool {
				p.mu.Lock()
				defer p.mu.Unlock()
				return len(p.links) == 0
			}, 5*time.Second, 5*time.Millisecond, "the answered connection is closed")
			require.NoError(t, p.Restore())
			resp, err := http.Get("http://" + p.Addr() + "/res.php")
			require.NoError(t, err, "forwards again after Restore")
			resp.Body.Close()
		})
	}
}
