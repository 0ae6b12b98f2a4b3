package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
)

// `solve --not-before` starts no earlier than then and prints an outcome
// naming use_at and the lifetime left; `submit --use-at` gives the tasks
// that name none their use_at; bad values are refused naming the flag or
// the field.
func TestSolveAndSubmitScheduled(t *testing.T) {
	t.Parallel()
	ctx, natsURL, client, _ := scheduleCLISetup(t)

	notBefore := time.Now().Add(time.Second)
	r := captchaq(t, natsURL, "solve", "--json", "--method", "turnstile", "--param", "sitekey=k", "--param", "pageurl=https://a.example/",
		"--not-before", notBefore.UTC().Format(time.RFC3339Nano), "--use-at", "3s", "--timeout", "30s")
	require.Equal(t, 0, r.code, r.stderr)
	var out stream.Outcome
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
	require.Equal(t, stream.StatusSolved, out.Status)
	require.False(t, out.SolvedAt.Before(notBefore), "solved at %v, not before %v", out.SolvedAt, notBefore)
	require.False(t, out.UseAt.IsZero())
	require.Positive(t, out.LifetimeAtUseS)

	file := filepath.Join(t.TempDir(), "tasks.jsonl")
	require.NoError(t, os.WriteFile(file, []byte(`{"id":"s-1","method":"turnstile","params":{"sitekey":"k","pageurl":"https://a.example/"}}
{"id":"s-2","method":"turnstile","params":{"sitekey":"k","pageurl":"https://a.example/"},"use_at":"1s"}
`), 0o600))
	r = captchaq(t, natsURL, "submit", "--use-at", "2s", file)
	require.Equal(t, 0, r.code, r.stderr)
	o1, err := client.Wait(ctx, "s-1")
	require.NoError(t, err)
	o2, err := client.Wait(ctx, "s-2")
	require.NoError(t, err)
	require.InDelta(t, 1.0, o1.UseAt.Sub(o2.UseAt).Seconds(), 0.5, "the flag gives s-1 its use_at (2s); s-2 keeps its own (1s)")

	r = captchaq(t, natsURL, "solve", "--method", "turnstile", "--param", "sitekey=k", "--param", "pageurl=https://a.example/", "--use-at", "yesterday")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "-use-at")
	r = captchaq(t, natsURL, "solve", "--method", "turnstile", "--param", "sitekey=k", "--param", "pageurl=https://a.example/",
		"--use-at", "1m", "--not-before", "2m")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "not_before")
	require.NoError(t, os.WriteFile(file, []byte(`{"id":"s-3","method":"turnstile","params":{"sitekey":"k","pageurl":"https://a.example/"},"use_at":"2001-01-01T00:00:00Z"}
`), 0o600))
	r = captchaq(t, natsURL, "submit", file)
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "line 1 (id s-3): use_at 2001-01-01T00:00:00Z: already passed")
}

// scheduleCLISetup starts what the tests of the scheduling flags share: a
// listening server with the default topology and a client on it, the API
// emulator at a thousandth of real time, and a worker solving through it.
// ctx ends a minute on, or with the test.
func scheduleCLISetup(t *testing.T) (ctx context.Context, natsURL string, client *stream.Client, api *fakeapi.Server) {
	t.Helper()
	natsURL, _, client = listeningServer(t, stream.Topology{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	api, emu := emulatorURL(t, fakeapi.Config{TimeScale: 0.001})
	startWorker(t, ctx, natsURL, emu)
	return ctx, natsURL, client, api
}
