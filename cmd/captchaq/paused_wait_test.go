package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver/fakeapi"
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

// `dead replay --wait` into a paused lane, with a worker alive, says the
// lane is paused while it waits: it waited in silence.
func TestReplayWaitInAPausedLaneSaysSo(t *testing.T) {
	t.Parallel()
	natsURL, _, _ := listeningServer(t, stream.Topology{})
	api, emu := emulatorURL(t, fakeapi.Config{Faults: fakeapi.Faults{Rules: []fakeapi.Rule{{Param: "pageurl", Contains: "bad.example", Code: "ERROR_PAGEURL"}}}})
	w := startProc(t, keyEnv, "worker", "--nats", natsURL, "--solver-url", emu, "--poll-scale", "0.01", "--name", "paused-worker")
	w.waitLine("worker started", 30*time.Second)
	tasks := filepath.Join(t.TempDir(), "tasks.jsonl")
	require.NoError(t, os.WriteFile(tasks, []byte(`{"id":"bad1","method":"turnstile","params":{"sitekey":"0x4AAAAAAAB","pageurl":"https://bad.example/"}}`+"\n"), 0o600))
	r := captchaq(t, natsURL, "submit", "--wait", "--timeout", "1m", tasks)
	require.Equal(t, 1, r.code, r.stderr)
	paid := api.Stats().Submitted
	r = captchaq(t, natsURL, "lane", "pause", "fast")
	require.Equal(t, 0, r.code, r.stderr)

	p := startProc(t, []string{"CAPTCHAQ_NATS=" + natsURL}, "dead", "replay", "--wait", "bad1")
	p.waitLine("lane fast is paused", 30*time.Second)
	require.Equal(t, paid, api.Stats().Submitted, "the replay waits unpaid in the paused lane")
}
