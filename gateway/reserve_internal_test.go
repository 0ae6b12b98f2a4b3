package gateway

import (
	"context"
	"crypto/sha256"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/internal/dialect/classic"
	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/streamtest"
)

// draws returns a draw that gives nums in turn, then the last for ever.
func draws(nums ...string) func() string {
	i := 0
	return func() string {
		n := nums[min(i, len(nums)-1)]
		i++
		return n
	}
}

// A narrow id (the JSON dialect's, 31 bits) is not given again while the
// stream keeps a task of the key under it: not by the gateway that gave
// it, and not by one started later on the same stream (a restart), which
// holds nothing in memory. An id met every draw ends in a refusal the
// caller retries, with nothing submitted.
func TestNarrowIDsAreNotGivenTwice(t *testing.T) {
	t.Parallel()
	env := streamtest.Start(t, streamtest.WithWorkers(0))
	k := Key{Key: "narrow-key-0123456789abcdef", Producer: "narrow"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := func() (*Gateway, *caller) {
		g, err := New(ctx, Config{Conn: env.Connect(), Topology: env.Topology, Keys: []Key{k}, Now: env.Now})
		require.NoError(t, err)
		t.Cleanup(g.Close)
		return g, g.callers[sha256.Sum256([]byte(k.Key))]
	}
	task := stream.Task{Method: "turnstile", Params: stream.Params{"sitekey": "0x4AAAAAAABkMYinukE8nzY", "pageurl": "https://shop.example/"}}
	submit := func(g *Gateway, c *caller, draw func() string) (string, string) {
		num, code, _ := g.enqueue(ctx, c, submission{task: task, draw: draw, narrow: true})
		return num, code
	}

	g, c := start()
	num, code := submit(g, c, draws("7"))
	require.Empty(t, code)
	require.Equal(t, "7", num)
	num, code = submit(g, c, draws("7", "8"))
	require.Empty(t, code)
	require.Equal(t, "8", num, "7 is held in memory")

	g2, c2 := start()
	num, code = submit(g2, c2, draws("7", "8", "9"))
	require.Empty(t, code)
	require.Equal(t, "9", num, "a restarted gateway: 7 and 8 are in the stream")
	_, code = submit(g2, c2, draws("7"))
	require.Equal(t, classic.CodeServerError, code)

	tasks, err := env.Client.Tasks(ctx, stream.TaskFilter{})
	require.NoError(t, err)
	require.Len(t, tasks, 3)
	g2.mu.Lock()
	defer g2.mu.Unlock()
	require.Equal(t, 1, c2.inFlight, "the refused submission holds no slot")
}
