package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
)

// argsTaken is how many arguments each command line takes; -1: any number
// (ids). A command missing here fails the test: every command must say.
var argsTaken = map[string]int{
	"server": 0, "init": 0, "worker": 0, "stats": 0, "fakeapi": 0, "balance": 0, "dashboard": 0, "passwd": 0, "gateway": 0,
	"results": 0, "solve": 0, "workers ls": 0, "task ls": 0, "dead ls": 0,
	"dead show": 1, "trace": 1, "task show": 1, "lane pause": 1, "lane resume": 1, "run": 1, "submit": 1,
	"report":      2,
	"dead replay": -1, "dead purge": -1, "task cancel": -1,
}

// Every command refuses an argument it does not take, with one line that
// names it, before it connects to anything or reads anything.
func TestEveryCommandRefusesStrayArguments(t *testing.T) {
	// Nothing listens on port 1: a command that went on would fail to
	// connect (exit 1), or wait for its server.
	t.Setenv("CAPTCHAQ_NATS", "nats://127.0.0.1:1")
	lines := commandLines()
	names := make([]string, 0, len(lines))
	for n := range lines {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		n, ok := argsTaken[name]
		require.True(t, ok, "captchaq %s: say in argsTaken how many arguments it takes", name)
		if n < 0 {
			continue
		}
		args := strings.Fields(name)
		for i := range n {
			args = append(args, "arg"+itoa(i))
		}
		args = append(args, "extra-arg")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var out, errOut strings.Builder
		code := realMain(ctx, args, &out, &errOut)
		cancel()
		require.Equal(t, 2, code, "captchaq %s: %s", strings.Join(args, " "), errOut.String())
		require.Equal(t, 1, strings.Count(errOut.String(), "\n"), "one line: %q", errOut.String())
		require.Contains(t, errOut.String(), `"extra-arg"`, "captchaq %s names the argument", strings.Join(args, " "))
		require.True(t, strings.HasPrefix(errOut.String(), "captchaq "+name+": "), "%q", errOut.String())
		require.NotContains(t, errOut.String(), ": "+args[0]+":", "one prefix")
		require.Empty(t, out.String())
	}
}

// An empty answer to a question about one task, and an empty task file,
// say so and exit non-zero.
func TestEmptyAnswersSaySo(t *testing.T) {
	t.Parallel()
	natsURL, _, _ := listeningServer(t, stream.Topology{})
	r := captchaq(t, natsURL, "results", "--id", "nosuch")
	require.Equal(t, 1, r.code, r.stderr)
	require.Equal(t, "captchaq results: no outcome of task nosuch: an unknown id, one that is not finished yet (captchaq task show nosuch), or older than the stream keeps\n", r.stderr)
	require.Empty(t, r.stdout)
	r = captchaq(t, natsURL, "submit", "-") // standard input: /dev/null
	require.Equal(t, 2, r.code, r.stderr)
	require.Equal(t, "captchaq submit: no task in standard input: want one JSON object per line\n", r.stderr)
}

// `captchaq server` with the shipped nats.conf and an environment that
// lacks one of its variables says which, what it is for, and how to run
// without: not the config parser's "variable reference … can not be found".
func TestServerSaysWhichVariableToSet(t *testing.T) {
	t.Parallel()
	dir, conf := shippedConfig(t)
	cmd := exec.Command(os.Args[0], "server", "--config", conf, "--store", filepath.Join(dir, "js"))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CAPTCHAQ_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, childEnv...)
	out, err := cmd.CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "captchaq server: "+conf+" reads CAPTCHAQ_")
	require.Contains(t, string(out), "from the environment, and it is not set")
	require.Contains(t, string(out), "--config ''")
	require.NotContains(t, string(out), "can not be found")
	require.Equal(t, 1, strings.Count(string(out), "\n"), string(out))
}

// stats suggests a plan size only from the windows of workers alive, and
// only from windows learned from refusals: a worker against a service that
// never refuses writes none, and stats says the plan was never reached.
func TestStatsPlanOnlyFromLiveWorkersThatSawRefusals(t *testing.T) {
	t.Parallel()
	natsURL, js, client := listeningServer(t, stream.Topology{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	api, emu := emulatorURL(t, fakeapi.Config{TimeScale: 0.001})
	w := startProc(t, keyEnv, "worker", "--nats", natsURL, "--solver-url", emu, "--poll-scale", "0.001", "--threads", "2",
		"--name", "live-w", "--share-timings", "100ms")
	w.waitLine("worker started", 30*time.Second)
	_, err := client.Submit(ctx, stream.Task{ID: "p1", Method: "turnstile", Params: stream.Params{"sitekey": "0x4AAAAAAAB", "pageurl": "https://shop.example/"}})
	require.NoError(t, err)
	_, err = client.Wait(ctx, "p1")
	require.NoError(t, err)
	require.Zero(t, api.Stats().Codes["ERROR_ZERO_BALANCE"], "the emulator refused nothing")
	// The workers' plan windows, as they store them in the timings bucket:
	// {"<worker>":{"limit":N,"at":T}} under one key.
	kv, err := js.KeyValue(ctx, stream.TimingsBucket)
	require.NoError(t, err)
	const windowsKey = "plan_windows"
	// Fifteen sharing intervals pass: still no window, for want of a
	// refusal (a worker that shared its window would have at the first).
	require.Never(t, func() bool {
		_, err := kv.Get(ctx, windowsKey)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return false
		}
		require.NoError(t, err)
		return true
	}, 1500*time.Millisecond, 50*time.Millisecond, "no refusal seen: no window shared")
	r := captchaq(t, natsURL, "stats")
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, "plan never reached")
	require.NotContains(t, r.stdout, "--plan-threads")

	// A window of a worker that is gone counts for nothing.
	windows, _ := json.Marshal(map[string]any{"live-w": map[string]any{"limit": 7, "at": time.Now()},
		"gone-w": map[string]any{"limit": 350, "at": time.Now()}})
	_, err = kv.Put(ctx, windowsKey, windows)
	require.NoError(t, err)
	r = captchaq(t, natsURL, "stats")
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, "captchaq init --plan-threads 7\n", r.stdout)
}
