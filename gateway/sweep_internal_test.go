package gateway

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream/streamtest"
)

// A task no worker takes stops counting against its key's share a minute
// after its deadline, and is then answered from the stream.
func TestSweepFreesTheShareOfAnExpiredTask(t *testing.T) {
	t.Parallel()
	env := streamtest.Start(t, streamtest.WithWorkers(0))
	k := Key{Key: "sweep-key-0123456789abcdef", Producer: "sweep", Share: 0.25}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g, err := New(ctx, Config{Conn: env.Connect(), Topology: env.Topology, Keys: []Key{k}, PlanThreads: 4, Now: env.Now})
	require.NoError(t, err)
	t.Cleanup(g.Close)
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	call := func(op string, v url.Values) string {
		v.Set("key", k.Key)
		resp, err := http.Get(srv.URL + "/" + op + "?" + v.Encode())
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return string(b)
	}
	task := url.Values{"method": {"turnstile"}, "sitekey": {"0x4AAAAAAABkMYinukE8nzY"}, "pageurl": {"https://shop.example/"}, "deadline": {"5"}}
	out := call("in.php", task)
	require.True(t, strings.HasPrefix(out, "OK|"), out)
	require.Equal(t, "ERROR_NO_SLOT_AVAILABLE", call("in.php", task))
	g.sweep()
	require.Equal(t, "ERROR_NO_SLOT_AVAILABLE", call("in.php", task), "before its deadline")
	env.Advance(2 * time.Minute)
	g.sweep()
	require.Equal(t, "CAPCHA_NOT_READY", call("res.php", url.Values{"action": {"get"}, "id": {out[3:]}}), "from the stream: still queued")
	require.True(t, strings.HasPrefix(call("in.php", url.Values{"method": {"turnstile"}, "sitekey": {"0x4AAAAAAABkMYinukE8nzY"}, "pageurl": {"https://shop.example/"}}), "OK|"))
}
