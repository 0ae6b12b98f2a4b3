package gateway_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/gateway"
	"github.com/captchaq/captchaq/stream/streamtest"
)

// threadsinfo answers for the caller's key: its share of the plan as
// threads, those its unfinished tasks hold, those free; plain and json=1
// (the three fields on top, and as request beside status 1). A key
// without a share has the plan's threads.
func TestThreadsInfo(t *testing.T) {
	t.Parallel()
	shared := alice
	shared.Share = 0.5
	b := setup(t, func(c *gateway.Config) {
		c.Keys = []gateway.Key{shared, bob}
		c.PlanThreads = 4
	}, streamtest.WithWorkers(0))
	type info struct {
		Status         int             `json:"status"`
		Request        json.RawMessage `json:"request"`
		Threads        int             `json:"threads"`
		WorkingThreads int             `json:"working_threads"`
		FreeThreads    int             `json:"free_threads"`
	}
	read := func(k gateway.Key, jsonOut string) info {
		var i info
		require.NoError(t, json.Unmarshal([]byte(b.call(t, "res.php", "key", k.Key, "action", "threadsinfo", "json", jsonOut)), &i))
		return i
	}
	require.Equal(t, info{Threads: 2, FreeThreads: 2}, read(shared, "0"))
	b.submit(t, shared)
	got := read(shared, "1")
	require.Equal(t, 1, got.Status)
	require.JSONEq(t, `{"threads":2,"working_threads":1,"free_threads":1}`, string(got.Request))
	require.Equal(t, []int{2, 1, 1}, []int{got.Threads, got.WorkingThreads, got.FreeThreads})
	require.Equal(t, info{Threads: 4, FreeThreads: 4}, read(bob, "0"), "bob has no share: the plan's threads")
	require.Equal(t, "ERROR_KEY_DOES_NOT_EXIST", b.call(t, "res.php", "key", "not-a-key-of-this-gateway", "action", "threadsinfo"))
}
