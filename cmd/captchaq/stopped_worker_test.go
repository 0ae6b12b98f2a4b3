package main

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
)

// A worker stopped while a thread of its was at the service says so in its
// last heartbeat (Stopped, one of four threads in use), which stays listed
// until it expires: stats, stats --json and the dashboard's snapshot count
// neither it nor its threads among the workers alive, and `workers ls`
// shows it stopped with no thread in use. The solve it had begun is paid
// once.
func TestStoppedWorkerIsNotCountedAlive(t *testing.T) {
	t.Parallel()
	natsURL, _, client := listeningServer(t, stream.Topology{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	api, emu := emulatorURL(t, fakeapi.Config{SolveTime: map[string]fakeapi.Range{fakeapi.KindTurnstile: {Min: 3 * time.Second, Max: 3 * time.Second}}})

	// The worker that stops: four threads, the one task at the service.
	sc, err := solver.NewClient(solver.Config{BaseURL: emu, APIKey: fakeapi.TestKey, Timing: solver.Timing{Scale: 0.05}})
	require.NoError(t, err)
	stop := startWorkerWith(t, ctx, natsURL, emu, stream.WorkerConfig{Name: "stopping", Solver: sc, Threads: 4})

	r, err := client.Submit(ctx, stream.Task{ID: "held-1", Method: "turnstile", Params: stream.Params{"sitekey": "0x4AAAAAAAB", "pageurl": "https://shop.example/"}})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		st, err := client.Stats(ctx, time.Hour)
		return err == nil && st.Solving == 1
	}, 30*time.Second, 10*time.Millisecond, "the task never reached the service")
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	require.Eventually(t, func() bool {
		ws, err := client.Workers(ctx)
		return err == nil && len(ws) == 1 && ws[0].Stopped
	}, 10*time.Second, 10*time.Millisecond, "the stopped worker's last heartbeat")
	ws, err := client.Workers(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, ws[0].InUse, "the last heartbeat says a thread was still at the service")
	// Alone, it leaves no worker alive, and nothing said of one.
	res := captchaq(t, natsURL, "stats")
	require.Zero(t, res.code, res.stderr)
	require.Contains(t, res.stdout, "workers alive: 0 (1 stopped in the last 15s)\n")
	require.NotContains(t, res.stdout, "no worker alive has seen", "no plan hint from a stopped worker")
	// A worker alive beside it, two threads, none in use yet.
	startWorkerWith(t, ctx, natsURL, emu, stream.WorkerConfig{Name: "alive", Threads: 2})
	require.Eventually(t, func() bool {
		ws, err := client.Workers(ctx)
		return err == nil && len(ws) == 2
	}, 10*time.Second, 10*time.Millisecond, "the second worker's heartbeat")

	res = captchaq(t, natsURL, "stats")
	require.Zero(t, res.code, res.stderr)
	require.Contains(t, res.stdout, "workers alive: 1, 0 of 2 threads in use (1 stopped in the last 15s)\n")
	res = captchaq(t, natsURL, "stats", "--json")
	require.Zero(t, res.code, res.stderr)
	var st stream.Stats
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &st))
	snap := dashboardSnapshot(ctx, t, natsURL)
	for name, s := range map[string]stream.Stats{"stats --json": st, "the dashboard": snap.Stats} {
		require.Len(t, s.Workers, 2, name)
		require.Equal(t, 1, s.WorkersAlive, name)
		require.Equal(t, 2, s.Threads, name)
		require.Zero(t, s.ThreadsInUse, name)
	}
	res = captchaq(t, natsURL, "workers", "ls")
	require.Zero(t, res.code, res.stderr)
	require.Regexp(t, `(?m)^stopping\s+\S+\s+\d+\s+4\s+-\s+.*stopped$`, res.stdout)

	require.NoError(t, <-stopped)
	o, err := client.Wait(ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, stream.StatusSolved, o.Status, fmt.Sprintf("%+v", o))
	require.Equal(t, 1, api.Stats().Submitted, "the solve begun before the stop is paid once")
}
