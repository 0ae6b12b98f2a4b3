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

	"github.com/captchaq/captchaq/solver/fakeapi"
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

// A task the gateway forgot answers for the submission the gateway made:
// a later submission under its id (here a replay of its dead letter, solved)
// is not its answer.
func TestForgottenTaskAnswersItsOwnGeneration(t *testing.T) {
	t.Parallel()
	env := streamtest.Start(t, streamtest.WithFaults(fakeapi.Faults{Unsolvable: 1}), streamtest.WithMaxAttempts(1))
	k := Key{Key: "sweep-key-0123456789abcdef", Producer: "sweep"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g, err := New(ctx, Config{Conn: env.Connect(), Topology: env.Topology, Keys: []Key{k}, Now: env.Now})
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
	out := call("in.php", url.Values{"method": {"turnstile"}, "sitekey": {"0x4AAAAAAABkMYinukE8nzY"}, "pageurl": {"https://shop.example/"}})
	require.True(t, strings.HasPrefix(out, "OK|"), out)
	num := out[3:]
	get := url.Values{"action": {"get"}, "id": {num}}
	require.Eventually(t, func() bool { return call("res.php", get) == "ERROR_CAPTCHA_UNSOLVABLE" }, 20*time.Second, 10*time.Millisecond)

	env.Advance(keepDone + time.Minute)
	g.sweep()
	g.mu.Lock()
	_, forgot := g.past["sweep-"+num]
	g.mu.Unlock()
	require.True(t, forgot, "forgotten, its generation kept")

	env.Emulator.SetFaults(fakeapi.Faults{})
	r, err := env.Client.Replay(ctx, "sweep-"+num)
	require.NoError(t, err)
	solved, err := env.Client.WaitReceipt(ctx, r)
	require.NoError(t, err, "the later submission is solved")
	require.Equal(t, "ERROR_CAPTCHA_UNSOLVABLE", call("res.php", get), "not the later submission's token %s", solved.Text())
	require.Equal(t, 2, env.Emulator.Stats().Submitted, "the task and its replay, each paid once")
}
