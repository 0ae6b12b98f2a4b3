package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
)

// cliResult is what one run of the captchaq binary left behind.
type cliResult struct {
	stdout, stderr string
	code           int
}

// captchaq runs the test binary as captchaq against the NATS server at
// natsURL (through CAPTCHAQ_NATS, so arguments stay as a user types them).
func captchaq(t *testing.T, natsURL string, args ...string) cliResult {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	// The race detector sleeps 1 s before a clean exit by default: not here.
	cmd.Env = append(append(os.Environ(), childEnv...), "CAPTCHAQ_NATS="+natsURL)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	r := cliResult{stdout: out.String(), stderr: errOut.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else {
		require.NoError(t, err, "captchaq %s", strings.Join(args, " "))
	}
	return r
}

// jsonLines decodes each line of s into a T.
func jsonLines[T any](t *testing.T, s string) []T {
	t.Helper()
	var out []T
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		var v T
		require.NoError(t, json.Unmarshal(sc.Bytes(), &v), sc.Text())
		out = append(out, v)
	}
	return out
}

func letterIDs(ds []stream.DeadLetter) []string {
	ids := make([]string, len(ds))
	for i, d := range ds {
		ids[i] = d.ID
	}
	slices.Sort(ids)
	return ids
}

// traceSteps returns the STEP column of `captchaq trace`'s table.
func traceSteps(t *testing.T, table string) []string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(table), "\n")
	require.Greater(t, len(lines), 1, table)
	require.Regexp(t, `^TIME\s+STEP\s+ATTEMPT\s+WORKER/CLIENT\s+CODE\s+REASON\s+DELAY\s+DETAIL`, lines[0])
	var steps []string
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		require.GreaterOrEqual(t, len(f), 2, l)
		steps = append(steps, f[1])
	}
	return steps
}

// withoutReplayed drops the replay record, whose place among the new
// generation's steps depends on how fast a worker takes the task, and says
// where it was.
func withoutReplayed(steps []string) ([]string, int) {
	at := slices.Index(steps, "replayed")
	if at < 0 {
		return steps, -1
	}
	return slices.Delete(slices.Clone(steps), at, at+1), at
}

// The CLI face of the retry paths: with a real server, a real worker process and the
// emulator rejecting some pages, an operator lists, inspects, replays,
// traces and purges dead letters with the captchaq binary, and every command
// says what happened through its output and exit code.
func TestCLIDeadLettersListShowReplayTracePurge(t *testing.T) {
	t.Parallel()
	natsURL, _, client := listeningServer(t, stream.Topology{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	api, emu := emulatorURL(t, fakeapi.Config{
		SolveTime: map[string]fakeapi.Range{fakeapi.KindTurnstile: {Min: 10 * time.Millisecond, Max: 20 * time.Millisecond}},
		Faults: fakeapi.Faults{Rules: []fakeapi.Rule{
			{Param: "pageurl", Contains: "bad.example", Code: "ERROR_PAGEURL"},
			{Param: "pageurl", Contains: "flaky.example", Code: "ERROR_CAPTCHA_UNSOLVABLE", OnPoll: true},
		}},
	})
	w := startProc(t, keyEnv, "worker", "--nats", natsURL, "--solver-url", emu, "--poll-scale", "0.01", "--threads", "4",
		"--max-attempts", "2", "--retry-initial", "10ms", "--retry-max", "20ms", "--name", "cli-worker")
	w.waitLine("worker started", 30*time.Second)

	// Four tasks through `submit --wait`: three end in the dead letter.
	file := filepath.Join(t.TempDir(), "tasks.jsonl")
	require.NoError(t, os.WriteFile(file, []byte(`{"id":"bad1","method":"turnstile","params":{"sitekey":"0x4AAAAAAAB","pageurl":"https://bad.example/account/secret-path?session=abc"}}
{"id":"bad2","method":"turnstile","params":{"sitekey":"0x4AAAAAAAB","pageurl":"https://bad.example/other"}}
{"id":"flaky1","method":"turnstile","params":{"sitekey":"0x4AAAAAAAB","pageurl":"https://flaky.example/form"}}
{"id":"good1","method":"turnstile","params":{"sitekey":"0x4AAAAAAAB","pageurl":"https://shop.example/checkout"}}
`), 0o600))
	r := captchaq(t, natsURL, "submit", "--wait", "--timeout", "1m", file)
	require.Equal(t, 1, r.code, "submit --wait exits 1 unless every task is solved: %s", r.stderr)
	require.Contains(t, r.stderr, "3 of 4 tasks not solved")
	status := map[string]stream.Status{}
	for _, o := range jsonLines[stream.Outcome](t, r.stdout) {
		if o.Status != "" {
			status[o.ID] = o.Status
		}
	}
	require.Equal(t, map[string]stream.Status{"bad1": stream.StatusDead, "bad2": stream.StatusDead, "flaky1": stream.StatusDead,
		"good1": stream.StatusSolved}, status)

	// dead ls: as JSON, by reason, as a table.
	r = captchaq(t, natsURL, "dead", "ls", "--json")
	require.Zero(t, r.code, r.stderr)
	all := jsonLines[stream.DeadLetter](t, r.stdout)
	require.Equal(t, []string{"bad1", "bad2", "flaky1"}, letterIDs(all))
	for _, d := range all {
		require.Equal(t, "null", string(d.Task), "ls lists; show prints the task")
		require.Nil(t, d.Replayed, d.ID)
		require.Equal(t, "turnstile", d.Method, d.ID)
		if d.ID == "flaky1" {
			require.Equal(t, retry.ReasonAttemptsExhausted, d.Reason)
			require.Equal(t, "ERROR_CAPTCHA_UNSOLVABLE", d.Error)
			require.Equal(t, 2, d.Attempts)
			require.Equal(t, "flaky.example", d.Host)
		} else {
			require.Equal(t, retry.ReasonPermanent, d.Reason, d.ID)
			require.Equal(t, "ERROR_PAGEURL", d.Error, d.ID)
			require.Equal(t, 1, d.Attempts, d.ID)
			require.Equal(t, "bad.example", d.Host, d.ID)
		}
	}
	r = captchaq(t, natsURL, "dead", "ls", "--reason", "permanent", "--json")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, []string{"bad1", "bad2"}, letterIDs(jsonLines[stream.DeadLetter](t, r.stdout)))
	r = captchaq(t, natsURL, "dead", "ls", "--reason", "bored")
	require.Equal(t, 2, r.code, "a bad filter is a usage error")
	require.Contains(t, r.stderr, `"bored"`)
	require.Contains(t, r.stderr, "attempts-exhausted", "the error lists the reasons")
	r = captchaq(t, natsURL, "dead", "ls")
	require.Zero(t, r.code, r.stderr)
	require.Regexp(t, `(?m)^ID\s+METHOD\s+HOST\s+REASON\s+ERROR\s+ATTEMPTS\s+DEAD AT\s+REPLAYED$`, r.stdout)
	require.Regexp(t, `(?m)^bad1\s+turnstile\s+bad\.example\s+permanent\s+ERROR_PAGEURL\s+1\s+\S+\s+no$`, r.stdout)
	require.Regexp(t, `(?m)^flaky1\s+turnstile\s+flaky\.example\s+attempts-exhausted\s+ERROR_CAPTCHA_UNSOLVABLE\s+2\s+\S+\s+no$`, r.stdout)
	require.NotContains(t, r.stdout, "secret-path", "listings show the page host, never the URL")

	// dead show: the text form names everything but the URL; JSON carries
	// the task for a replay.
	r = captchaq(t, natsURL, "dead", "show", "bad1")
	require.Zero(t, r.code, r.stderr)
	for _, want := range []string{`id:\s+bad1`, `method:\s+turnstile`, `host:\s+bad\.example`, `reason:\s+permanent`,
		`error:\s+ERROR_PAGEURL`, `detail:\s+pageurl parameter is missing in your request\.`, `attempts:\s+1`, `subject:\s+captcha\.tasks\.fast\.normal\.bad1`, `replayed:\s+no`, `dead letter:\s+\d+ \(task message \d+\)`} {
		require.Regexp(t, "(?m)^"+want+"$", r.stdout)
	}
	require.NotContains(t, r.stdout, "secret-path")
	r = captchaq(t, natsURL, "dead", "show", "--json", "bad1")
	require.Zero(t, r.code, r.stderr)
	shown := jsonLines[stream.DeadLetter](t, r.stdout)
	require.Len(t, shown, 1)
	task, err := stream.ParseTask(shown[0].Task)
	require.NoError(t, err)
	require.Equal(t, "https://bad.example/account/secret-path?session=abc", task.Params["pageurl"])
	r = captchaq(t, natsURL, "dead", "show", "good1")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "good1 has no dead letter")
	r = captchaq(t, natsURL, "dead", "show")
	require.Equal(t, 2, r.code)

	// The pages are fixed. dead replay ID: once; a second time it fails and
	// enqueues nothing.
	api.SetFaults(fakeapi.Faults{})
	r = captchaq(t, natsURL, "dead", "replay", "bad1")
	require.Zero(t, r.code, r.stderr)
	replayed := jsonLines[stream.Receipt](t, r.stdout)
	require.Len(t, replayed, 1)
	require.Equal(t, "bad1", replayed[0].ID)
	out, err := client.Wait(ctx, "bad1")
	require.NoError(t, err, "the replayed task is solved")
	require.Equal(t, 1, out.Attempts)
	r = captchaq(t, natsURL, "dead", "replay", "bad1")
	require.Equal(t, 1, r.code, "replaying a replayed letter fails")
	require.Contains(t, r.stderr, "already replayed")
	require.Empty(t, r.stdout)
	r = captchaq(t, natsURL, "dead", "replay")
	require.Equal(t, 2, r.code, "replay wants ids or --all")
	r = captchaq(t, natsURL, "dead", "replay", "--all", "bad2")
	require.Equal(t, 2, r.code, "ids or --all, not both")

	// dead replay --all without --yes lists and replays nothing; --dry-run
	// says so; permanent letters are left out unless --reason names them.
	r = captchaq(t, natsURL, "dead", "replay", "--all")
	require.Equal(t, 2, r.code, r.stderr)
	require.Contains(t, r.stderr, "would replay 1 dead letter(s), each paid for again; add --yes to do it")
	require.Regexp(t, `(?m)^flaky1\s+turnstile\s+attempts-exhausted\s`, r.stdout)
	require.NotRegexp(t, `(?m)^bad2\s`, r.stdout, "a permanent letter would die again")
	require.Contains(t, r.stdout, "left out 1 permanent letter(s), which would die again: name --reason to replay them")
	r = captchaq(t, natsURL, "dead", "replay", "--all", "--dry-run")
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, "would replay 1 dead letter(s)")
	r = captchaq(t, natsURL, "dead", "replay", "--dry-run", "flaky1")
	require.Equal(t, 2, r.code, "--dry-run goes with --all")
	r = captchaq(t, natsURL, "dead", "ls", "--pending", "--json")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, []string{"bad2", "flaky1"}, letterIDs(jsonLines[stream.DeadLetter](t, r.stdout)), "nothing was replayed")

	// dead replay --all --reason --yes: only the letters of that reason not
	// yet replayed; a second run finds none.
	r = captchaq(t, natsURL, "dead", "replay", "--all", "--reason", "attempts-exhausted", "--yes")
	require.Zero(t, r.code, r.stderr)
	replayed = jsonLines[stream.Receipt](t, r.stdout)
	require.Len(t, replayed, 1)
	require.Equal(t, "flaky1", replayed[0].ID)
	_, err = client.Wait(ctx, "flaky1")
	require.NoError(t, err)
	r = captchaq(t, natsURL, "dead", "replay", "--all", "--reason", "attempts-exhausted", "--yes")
	require.Zero(t, r.code, r.stderr)
	require.Empty(t, r.stdout, "nothing left to replay")

	r = captchaq(t, natsURL, "dead", "ls", "--pending", "--json")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, []string{"bad2"}, letterIDs(jsonLines[stream.DeadLetter](t, r.stdout)))
	r = captchaq(t, natsURL, "dead", "show", "bad1")
	require.Zero(t, r.code, r.stderr)
	require.Regexp(t, `(?m)^replayed:\s+\S+ \(task message \d+\)$`, r.stdout)

	// trace: the whole life of a task, both generations.
	r = captchaq(t, natsURL, "trace", "bad1")
	require.Zero(t, r.code, r.stderr)
	steps, at := withoutReplayed(traceSteps(t, r.stdout))
	// The replay's captcha is accepted (in.php refused the first for its page).
	require.Equal(t, []string{"submitted", "attempt", "dead", "dead-letter", "outcome", "submitted", "attempt", "accepted", "outcome"}, steps, r.stdout)
	require.Greater(t, at, 4, "the replay follows the first outcome:\n%s", r.stdout)
	require.Regexp(t, `(?m)\sdead\s+1\s+cli-worker\s+ERROR_PAGEURL\s+permanent\s`, r.stdout)
	require.NotContains(t, r.stdout, "secret-path", "trace shows the page host, never the URL")
	r = captchaq(t, natsURL, "trace", "flaky1")
	require.Zero(t, r.code, r.stderr)
	steps, _ = withoutReplayed(traceSteps(t, r.stdout))
	require.Equal(t, []string{"submitted", "attempt", "accepted", "retry", "attempt", "accepted", "dead", "dead-letter", "outcome",
		"submitted", "attempt", "accepted", "outcome"}, steps, r.stdout)
	require.Regexp(t, `(?m)\sretry\s.*captcha \d+: ERROR_CAPTCHA_UNSOLVABLE`, r.stdout, "the retry names the captcha and its fate")
	require.Regexp(t, `(?m)\sretry\s+1\s+cli-worker\s+ERROR_CAPTCHA_UNSOLVABLE\s+\d+ms\s`, r.stdout, "the retry shows its code and delay")
	r = captchaq(t, natsURL, "trace", "--json", "flaky1")
	require.Zero(t, r.code, r.stderr)
	entries := jsonLines[stream.TraceEntry](t, r.stdout)
	require.Len(t, entries, 14)
	gens := map[uint64]bool{}
	for _, e := range entries {
		gens[e.Gen] = true
		if e.Kind == "retry" { // --retry-initial 10ms, with the default ±25% jitter
			require.GreaterOrEqual(t, e.Delay, 7*time.Millisecond, "%+v", e)
			require.LessOrEqual(t, e.Delay, 13*time.Millisecond, "%+v", e)
		}
	}
	require.Len(t, gens, 2, "two generations: the task and its replay")
	r = captchaq(t, natsURL, "trace", "nosuch")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "no task nosuch in the stream")

	// dead purge: acts on exactly what it names (ids, or --all and the
	// filters), lists without deleting on --dry-run or without --yes.
	r = captchaq(t, natsURL, "dead", "purge", "--yes")
	require.Equal(t, 2, r.code, "purge names what it deletes: %s", r.stderr)
	require.Contains(t, r.stderr, "want task ids, --all, or a filter")
	r = captchaq(t, natsURL, "dead", "purge", "--all")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "would delete 3 dead letter(s); add --yes")
	r = captchaq(t, natsURL, "dead", "purge", "--all", "--dry-run")
	require.Zero(t, r.code, r.stderr)
	require.Regexp(t, `(?m)^bad2\s+turnstile\s+permanent\s`, r.stdout, "the dry run lists what would go")
	require.Contains(t, r.stdout, "would delete 3 dead letter(s)")
	r = captchaq(t, natsURL, "dead", "purge", "bad2", "nosuch", "--yes")
	require.Equal(t, 1, r.code, "an id without a dead letter deletes nothing")
	require.Contains(t, r.stderr, "nosuch")
	r = captchaq(t, natsURL, "dead", "ls", "--json")
	require.Len(t, jsonLines[stream.DeadLetter](t, r.stdout), 3, "nothing deleted without --yes, on a dry run, or with an unknown id")
	r = captchaq(t, natsURL, "dead", "purge", "bad2", "--yes")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "purged 1 dead letter(s)\n", r.stdout)
	r = captchaq(t, natsURL, "dead", "ls", "--json")
	require.Equal(t, []string{"bad1", "flaky1"}, letterIDs(jsonLines[stream.DeadLetter](t, r.stdout)), "purge ID deletes that id's letter only")
	r = captchaq(t, natsURL, "dead", "purge", "bad1", "--all", "--yes")
	require.Equal(t, 2, r.code, "ids or --all, not both")
	r = captchaq(t, natsURL, "dead", "purge", "--reason", "permanent", "--yes")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "purged 1 dead letter(s)\n", r.stdout)
	r = captchaq(t, natsURL, "dead", "ls", "--json")
	require.Equal(t, []string{"flaky1"}, letterIDs(jsonLines[stream.DeadLetter](t, r.stdout)))
	r = captchaq(t, natsURL, "dead", "purge", "--all", "--yes")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "purged 1 dead letter(s)\n", r.stdout)
	r = captchaq(t, natsURL, "dead", "ls", "--json")
	require.Zero(t, r.code, r.stderr)
	require.Empty(t, r.stdout)
	r = captchaq(t, natsURL, "trace", "bad2")
	require.Zero(t, r.code, "the audit trail outlives the dead letter: %s", r.stderr)
	require.Contains(t, traceSteps(t, r.stdout), "dead")

	// results: every outcome of every generation, oldest first.
	r = captchaq(t, natsURL, "results")
	require.Zero(t, r.code, r.stderr)
	got := map[string][]stream.Status{}
	for _, o := range jsonLines[stream.Outcome](t, r.stdout) {
		got[o.ID] = append(got[o.ID], o.Status)
		if o.Status == stream.StatusSolved {
			require.NotEmpty(t, o.Solution, o.ID)
		} else {
			require.True(t, retry.Reason(o.Reason).Valid(), "%s: reason %q", o.ID, o.Reason)
		}
	}
	require.Equal(t, map[string][]stream.Status{
		"good1":  {stream.StatusSolved},
		"bad1":   {stream.StatusDead, stream.StatusSolved},
		"bad2":   {stream.StatusDead},
		"flaky1": {stream.StatusDead, stream.StatusSolved},
	}, got)
	require.Equal(t, 3, api.Stats().Solved, "good1 and the two replays")
}

// The synopses say `dead show ID [--json]` and `trace ID [flags]`: flags
// after the id count, connection flags included (the flag package alone
// would stop at the id and quietly talk to localhost:4222).
func TestCLIFlagsAfterTaskID(t *testing.T) {
	t.Parallel()
	natsURL, _, client := listeningServer(t, stream.Topology{})
	_, err := client.Submit(context.Background(), stream.Task{ID: "after", Method: "turnstile",
		Params: stream.Params{"sitekey": "0x4AAAAAAAB", "pageurl": "https://shop.example/"}})
	require.NoError(t, err)
	r := captchaq(t, natsURL, "trace", "after", "--json")
	require.Zero(t, r.code, r.stderr)
	require.NotEmpty(t, jsonLines[stream.TraceEntry](t, r.stdout))
	r = captchaq(t, "nats://127.0.0.1:1", "trace", "after", "--nats", natsURL)
	require.Zero(t, r.code, "--nats after the id is taken: %s", r.stderr)
}
