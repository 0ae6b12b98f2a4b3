package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream"
)

// A task that waits in a paused lane: `solve` and `submit --wait` say the
// lane is paused and how to resume it, while they wait and when they give
// up. solve said only "no worker took task … (is one running against this
// server?)", untrue of a server whose workers run and leave the lane alone
// as told, and submit --wait said nothing of the pause.
func TestWaitsInAPausedLaneSaySo(t *testing.T) {
	t.Parallel()
	natsURL, _, _ := listeningServer(t, stream.Topology{})
	r := captchaq(t, natsURL, "lane", "pause", "fast")
	require.Equal(t, 0, r.code, r.stderr)

	r = captchaq(t, natsURL, "solve", "--method", "turnstile", "--param", "sitekey=k", "--param", "pageurl=https://a.example/", "--timeout", "4s")
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stderr, "lane fast is paused", "solve: %s", r.stderr)
	require.Contains(t, r.stderr, "captchaq lane resume fast", "solve: %s", r.stderr)
	require.NotContains(t, r.stderr, "no worker took task", "solve: %s", r.stderr)

	tasks := filepath.Join(t.TempDir(), "tasks.jsonl")
	require.NoError(t, os.WriteFile(tasks, []byte(`{"id":"p1","method":"turnstile","params":{"sitekey":"k","pageurl":"https://a.example/"}}`+"\n"), 0o600))
	r = captchaq(t, natsURL, "submit", "--wait", "--timeout", "4s", tasks)
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stderr, "lane fast is paused", "submit --wait: %s", r.stderr)
}
