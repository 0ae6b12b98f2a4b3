package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
)

// A method added as one catalogue entry and its emulator fixture, end to
// end: Friendly Captcha (friendly_captcha, sitekey and pageurl) submitted
// by `captchaq submit --wait`, solved by a worker process on the emulator,
// its token in the outcome, paid once.
func TestNewMethodEndToEnd(t *testing.T) {
	t.Parallel()
	natsURL, _, _ := listeningServer(t, stream.Topology{})
	// Solved in the emulator's 10–30 ms, as the worker polls at 0.01 of
	// production timing.
	api, emu := emulatorURL(t, fakeapi.Config{SolveTime: map[string]fakeapi.Range{
		fakeapi.KindFriendly: {Min: 10 * time.Millisecond, Max: 30 * time.Millisecond}}})
	w := startProc(t, keyEnv, "worker", "--nats", natsURL, "--solver-url", emu, "--poll-scale", "0.01", "--threads", "2",
		"--name", "friendly-worker")
	w.waitLine("worker started", 30*time.Second)

	file := filepath.Join(t.TempDir(), "tasks.jsonl")
	require.NoError(t, os.WriteFile(file, []byte(
		`{"id":"fc1","method":"friendly_captcha","params":{"sitekey":"FCMST5VUMCBOCGQ9","pageurl":"https://shop.example/signup"}}`+"\n"), 0o600))
	r := captchaq(t, natsURL, "submit", "--wait", "--timeout", "1m", file)
	require.Zero(t, r.code, "solved: %s\n%s", r.stderr, r.stdout)

	var got *stream.Outcome
	for _, o := range jsonLines[stream.Outcome](t, r.stdout) {
		if o.ID == "fc1" && o.Status != "" {
			got = &o
		}
	}
	require.NotNil(t, got, r.stdout)
	require.Equal(t, stream.StatusSolved, got.Status)
	var token string
	require.NoError(t, json.Unmarshal(got.Solution, &token), "a token: %s", got.Solution)
	require.NotEmpty(t, token)

	st := api.Stats()
	require.Equal(t, 1, st.Submitted, "paid once")
	for task, n := range st.PerTask {
		require.Equal(t, 1, n, "task %s paid %d times", task, n)
	}
}
