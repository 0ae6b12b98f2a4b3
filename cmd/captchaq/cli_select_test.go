package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/broker"
)

// What dead purge and dead replay act on is what their command line
// names: a filter variable left exported in the shell (CAPTCHAQ_SINCE for
// an earlier `dead ls`) neither turns a purge without ids into a purge of
// everything it matches, nor changes what is listed; filters given with
// ids are refused, not ignored; and a refusal has one prefix.
func TestDeadVerbsActOnlyOnWhatTheCommandLineNames(t *testing.T) {
	t.Parallel()
	natsURL, _, _ := listeningServer(t, stream.Topology{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	api, emu := emulatorURL(t, fakeapi.Config{})
	nc, err := nats.Connect(natsURL)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	sc, err := solver.NewClient(solver.Config{BaseURL: emu, APIKey: fakeapi.TestKey, Timing: solver.Timing{Scale: 0.001}})
	require.NoError(t, err)
	w, err := stream.NewWorker(ctx, nc, stream.WorkerConfig{Solver: sc, Threads: 2, IdleCheck: 50 * time.Millisecond})
	require.NoError(t, err)
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	t.Cleanup(func() { stop(); <-done })

	file := filepath.Join(t.TempDir(), "t.jsonl")
	require.NoError(t, os.WriteFile(file, []byte(`{"id":"pf1","method":"turnstile","params":{"sitekey":"perm-fail","pageurl":"https://shop.example/"}}
{"id":"pf2","method":"turnstile","params":{"sitekey":"perm-fail","pageurl":"https://shop.example/"}}
`), 0o600))
	r := captchaq(t, natsURL, "submit", "--wait", file)
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stderr, "2 of 2 tasks not solved")
	letters := func() []string {
		r := captchaq(t, natsURL, "dead", "ls", "--json")
		require.Zero(t, r.code, r.stderr)
		return letterIDs(jsonLines[stream.DeadLetter](t, r.stdout))
	}
	require.Equal(t, []string{"pf1", "pf2"}, letters())

	// A filter from the environment selects nothing for purge.
	for _, env := range []string{"CAPTCHAQ_SINCE=1h", "CAPTCHAQ_METHOD=turnstile", "CAPTCHAQ_REASON=permanent"} {
		r = captchaqEnv(t, natsURL, []string{env}, "dead", "purge", "--yes")
		require.Equal(t, 2, r.code, "%s dead purge --yes: %s%s", env, r.stdout, r.stderr)
		require.Contains(t, r.stderr, "want task ids, --all, or a filter")
		require.NotContains(t, r.stdout, "purged")
		require.Equal(t, []string{"pf1", "pf2"}, letters(), "%s dead purge --yes deleted nothing", env)
	}
	// Nor narrows what --all names.
	r = captchaqEnv(t, natsURL, []string{"CAPTCHAQ_METHOD=base64"}, "dead", "purge", "--all", "--dry-run")
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, "would delete 2 dead letter(s)")
	// Nor stops a purge of the ids named.
	r = captchaqEnv(t, natsURL, []string{"CAPTCHAQ_METHOD=base64"}, "dead", "purge", "pf2", "--dry-run")
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, "would delete 1 dead letter(s)")

	// Filters typed with ids: refused, nothing queued.
	r = captchaq(t, natsURL, "dead", "replay", "pf1", "--method", "base64")
	require.Equal(t, 2, r.code, r.stdout+r.stderr)
	require.Equal(t, "captchaq dead replay: give ids, or --all and filters, not both\n", r.stderr)
	require.Empty(t, r.stdout)
	r = captchaq(t, natsURL, "dead", "show", "pf1")
	require.Zero(t, r.code, r.stderr)
	require.Regexp(t, `(?m)^replayed:\s+no$`, r.stdout)
	require.Equal(t, 2, api.Stats().InCalls, "nothing replayed")
	// A replay's filters from the environment do not make it refuse ids.
	r = captchaqEnv(t, natsURL, []string{"CAPTCHAQ_METHOD=base64"}, "dead", "replay", "pf1")
	require.Zero(t, r.code, r.stderr)
	require.Len(t, jsonLines[stream.Receipt](t, r.stdout), 1)

	// One bad id in the list: nothing is replayed (each replay is paid
	// for), nothing canceled.
	r = captchaq(t, natsURL, "dead", "replay", "pf2", "bad*id")
	require.Equal(t, 2, r.code, r.stdout+r.stderr)
	require.Equal(t, "captchaq dead replay: id \"bad*id\": only letters, digits, '_' and '-' are allowed; nothing replayed\n", r.stderr)
	require.Empty(t, r.stdout)
	r = captchaq(t, natsURL, "dead", "replay", "pf2", "nosuch")
	require.Equal(t, 1, r.code, r.stdout+r.stderr)
	require.Equal(t, "captchaq dead replay: task nosuch has no dead letter (captchaq task show nosuch says where it stands); nothing replayed\n", r.stderr)
	require.Empty(t, r.stdout)
	r = captchaq(t, natsURL, "dead", "show", "pf2")
	require.Zero(t, r.code, r.stderr)
	require.Regexp(t, `(?m)^replayed:\s+no$`, r.stdout)
	r = captchaq(t, natsURL, "task", "cancel", "pf2", "bad*id")
	require.Equal(t, 2, r.code, r.stdout+r.stderr)
	require.Empty(t, r.stdout)

	// Without --yes: one prefix.
	r = captchaq(t, natsURL, "dead", "purge", "pf2")
	require.Equal(t, 2, r.code, r.stderr)
	require.Equal(t, "captchaq dead purge: would delete 1 dead letter(s); add --yes to do it\n", r.stderr)

	// --help says which filters are typed.
	r = captchaq(t, natsURL, "dead", "purge", "--help")
	require.Zero(t, r.code, r.stderr)
	for _, f := range []string{"method", "reason", "since", "yes", "all"} {
		require.Contains(t, r.stdout, "--"+f+"  [no environment variable: type it]", "dead purge --%s", f)
	}
	r = captchaq(t, natsURL, "dead", "ls", "--help")
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, "--method  [CAPTCHAQ_METHOD]", "a listing's filters still come from the environment")
}

// An error names the command once ("captchaq trace: …", not "captchaq
// trace: trace nosuch: …"), and the lack of a dead letter is not said as
// the lack of the task when the task exists.
func TestErrorsSayTheCommandOnce(t *testing.T) {
	t.Parallel()
	natsURL, _, client := listeningServer(t, stream.Topology{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A task that waits (no worker): it exists, and is not dead.
	_, err := client.Submit(ctx, stream.Task{ID: "waits", Method: "turnstile", Params: stream.Params{"sitekey": "0x4AAAAAAAB", "pageurl": "https://shop.example/"}})
	require.NoError(t, err)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"trace", "nosuch"}, 1, "captchaq trace: no task nosuch in the stream: an unknown id, or older than the stream keeps\n"},
		{[]string{"lane", "pause", "bogus"}, 2, `captchaq lane pause: lane "bogus": want fast or slow` + "\n"},
		{[]string{"lane", "resume", "bogus"}, 2, `captchaq lane resume: lane "bogus": want fast or slow` + "\n"},
		{[]string{"dead", "show", "waits"}, 1, "captchaq dead show: task waits has no dead letter (captchaq task show waits says where it stands)\n"},
		{[]string{"dead", "replay", "waits"}, 1, "captchaq dead replay: task waits has no dead letter (captchaq task show waits says where it stands); nothing replayed\n"},
		{[]string{"dead", "show", "nosuch"}, 1, "captchaq dead show: task nosuch has no dead letter (captchaq task show nosuch says where it stands)\n"},
	} {
		r := captchaq(t, natsURL, c.args...)
		require.Equal(t, c.code, r.code, "%v: %s", c.args, r.stderr)
		require.Equal(t, c.want, r.stderr, "%v", c.args)
		require.Empty(t, r.stdout, "%v", c.args)
	}
}

// `results --id "$ID"` with an empty variable is refused: read as no
// filter it printed every outcome, and a script taking the first solution
// would use another task's token.
func TestResultsRefusesAnEmptyID(t *testing.T) {
	t.Parallel()
	natsURL, _, _ := listeningServer(t, stream.Topology{})
	r := captchaq(t, natsURL, "results", "--id", "")
	require.Equal(t, 2, r.code, r.stdout+r.stderr)
	require.Equal(t, "captchaq results: --id: id: empty\n", r.stderr)
	r = captchaqEnv(t, natsURL, []string{"CAPTCHAQ_ID="}, "results")
	require.Equal(t, 2, r.code, r.stdout+r.stderr)
	// A negative --since is refused by dead ls as by results.
	r = captchaq(t, natsURL, "dead", "ls", "--since", "-1h")
	require.Equal(t, 2, r.code, r.stdout+r.stderr)
	require.Equal(t, "captchaq dead ls: --since -1h0m0s: want a positive duration\n", r.stderr)
}

// A producer that reaches a server without the stream (captchaq server not
// started yet, or another NATS server) is told that, not only that it may
// not create streams.
func TestProducerToldTheStreamIsMissing(t *testing.T) {
	t.Parallel()
	setRoleEnv()
	dir, conf := shippedConfig(t)
	ns, err := broker.Start(broker.Config{ConfigFile: conf, StoreDir: filepath.Join(dir, "js"), Port: -1, LazySync: true})
	require.NoError(t, err)
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	file := filepath.Join(t.TempDir(), "t.jsonl")
	require.NoError(t, os.WriteFile(file, []byte(`{"method":"turnstile","params":{"sitekey":"0x4AAAAAAAB","pageurl":"https://shop.example/"}}`+"\n"), 0o600))
	r := captchaq(t, ns.ClientURL(), append([]string{"submit", file}, as("producer")...)...)
	require.Equal(t, 1, r.code, r.stderr)
	require.NotContains(t, r.stderr, "permission denied", "a producer creates nothing and asks nothing it may not")
	require.Contains(t, r.stderr, "stream CAPTCHA not found in the JetStream reached without a domain; an admin creates it there (`captchaq init`, or `captchaq server`)")
	require.Equal(t, 1, strings.Count(r.stderr, "\n"), r.stderr)
}

// lane pause warns when waiting tasks of the lane reach their deadline
// before the pause ends (or, paused until resumed, says when the first
// does): they would end dead with DEADLINE_PASSED while the lane says they
// queue.
func TestLanePauseWarnsOfDeadlines(t *testing.T) {
	t.Parallel()
	natsURL, _, _ := listeningServer(t, stream.Topology{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc, err := nats.Connect(natsURL)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	c, err := stream.NewClient(ctx, nc, stream.ClientConfig{})
	require.NoError(t, err)
	// No worker runs: the tasks wait in the slow lane (hCaptcha).
	soon := time.Now().Add(5 * time.Minute)
	for i, dl := range []time.Time{soon, soon.Add(time.Minute), time.Now().Add(time.Hour)} {
		_, err := c.Submit(ctx, stream.Task{ID: "dl" + string(rune('a'+i)), Method: "hcaptcha",
			Params: map[string]string{"sitekey": "k", "pageurl": "https://shop.example/"}, Deadline: dl})
		require.NoError(t, err)
	}
	r := captchaq(t, natsURL, "lane", "pause", "slow", "--for", "20m")
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, "lane slow paused until ")
	require.Contains(t, r.stderr, "warning: 2 of 3 waiting tasks of lane slow reach their deadline before the pause ends (the first at ")
	require.Contains(t, r.stderr, "they will end dead with DEADLINE_PASSED unless the lane is resumed before")

	r = captchaq(t, natsURL, "lane", "pause", "slow")
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stderr, "warning: 3 of 3 waiting tasks of lane slow have deadlines; the first passes at ")

	r = captchaq(t, natsURL, "lane", "pause", "fast", "--for", "20m")
	require.Zero(t, r.code, r.stderr)
	require.Empty(t, r.stderr, "no task waits in the fast lane")
}
