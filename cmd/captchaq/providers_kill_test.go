package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
)

// A worker with a providers file SIGKILLed while each of its two providers
// solves captchas of its tasks (the plan's accepted before it went down,
// the fallback's during the outage), then a next worker: every task is
// solved, each emulator's bill is one captcha per task it names and none
// is paid on both, and stats' spend per provider is each emulator's bill
// to the cent.
//
// The next worker starts while the plan is still down: it resumes the
// plan's captchas there, through the outage, and submits none of them to
// the fallback.
func TestWorkerKilledBetweenTwoProvidersPaysOnce(t *testing.T) {
	t.Parallel()
	const n = 8
	solve := map[string]fakeapi.Range{solver.KindTurnstile: {Min: 3 * time.Second, Median: 3 * time.Second, Max: 3 * time.Second}}
	tp := startTwoProviders(t, solve, 50)
	client, plan, spare := tp.client, tp.plan, tp.spare
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	worker := func(name string) *proc { return tp.worker(name, "--poll-scale", "0.1", "--threads", itoa(n)) }
	first := worker("two-providers-killed")
	tasks := checkoutTasks("two-providers", n)
	receipts, err := client.SubmitAll(ctx, tasks[:n/2])
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		st := plan.Stats()
		return st.Submitted == n/2 && len(st.ResCallsPerCaptcha) == n/2
	}, 30*time.Second, time.Millisecond, "the plan accepted and polled the first half")
	plan.SetFaults(fakeapi.Faults{Outage: true})
	more, err := client.SubmitAll(ctx, tasks[n/2:])
	require.NoError(t, err)
	receipts = append(receipts, more...)
	require.Eventually(t, func() bool {
		st := spare.Stats()
		return st.Submitted == n/2 && len(st.ResCallsPerCaptcha) == n/2
	}, 30*time.Second, time.Millisecond, "the fallback accepted and polled the second half")
	first.kill()

	worker("two-providers-next")
	require.Eventually(t, func() bool {
		for _, tk := range tasks[:n/2] {
			tr, err := client.Trace(ctx, tk.ID)
			if err != nil {
				return false
			}
			resumed := false
			for _, e := range tr {
				resumed = resumed || e.Kind == string(stream.EventAccepted) && e.Provider == "plan" &&
					strings.Contains(e.Detail, "resumed by two-providers-next")
			}
			if !resumed {
				return false
			}
		}
		return true
	}, time.Minute, 50*time.Millisecond, "the next worker never resumed the plan's captchas on the plan")
	require.Equal(t, n/2, spare.Stats().Submitted, "nothing of the plan's sent to the fallback")
	plan.SetFaults(fakeapi.Faults{})
	byProvider := map[string]int{}
	require.NoError(t, client.WaitAll(ctx, receipts, func(o stream.Outcome, err error) {
		require.NoError(t, err)
		require.Equal(t, stream.StatusSolved, o.Status, "%+v", o)
		byProvider[o.Provider]++
	}))
	ps, ss := plan.Stats(), spare.Stats()
	t.Logf("plan accepted %d, spare accepted %d billed %.5f", ps.Submitted, ss.Submitted, ss.Spent)
	require.Equal(t, map[string]int{"plan": ps.Submitted, "spare": ss.Submitted}, byProvider, "each outcome names who was paid")
	require.Equal(t, n, ps.Submitted+ss.Submitted, "one captcha paid per task")
	require.Empty(t, ps.Repeated())
	require.Empty(t, ss.Repeated())
	for key := range ps.PerTask {
		require.NotContains(t, ss.PerTask, key, "a task paid on both providers")
	}
	st, err := client.Stats(ctx, 0)
	require.NoError(t, err)
	spend := map[string]float64{}
	for _, r := range st.Spend {
		spend[r.Provider] += r.Cost
	}
	require.Equal(t, int64(ss.Spent*100+0.5), int64(spend["spare"]*100+0.5), "stats' spend is the fallback's bill")
	require.InDelta(t, ss.Spent, spend["spare"], 1e-6)
	require.Zero(t, spend["plan"])
}

// providersBed is a broker (url, client) and a providers file (file) for
// worker processes, the keys it names in env.
type providersBed struct {
	t      *testing.T
	url    string
	client *stream.Client
	file   string
	env    []string
	flags  []string // every worker's
}

// startProviders starts a broker of top and writes a providers file of
// entries (each a provider's JSON object) whose keys, each
// fakeapi.TestKey, are in the variables keyEnvs; flags are every
// worker's.
func startProviders(t *testing.T, top stream.Topology, keyEnvs []string, flags []string, entries ...string) *providersBed {
	t.Helper()
	pb := &providersBed{t: t, flags: flags}
	pb.url, _, pb.client = listeningServer(t, top)
	for _, k := range keyEnvs {
		pb.env = append(pb.env, k+"="+fakeapi.TestKey)
	}
	pb.file = filepath.Join(t.TempDir(), "providers.json")
	require.NoError(t, os.WriteFile(pb.file, []byte(`{"providers": [`+strings.Join(entries, ",\n")+`]}`), 0o600))
	return pb
}

// worker starts a worker process on pb's providers, named name, with
// flags, and waits until it started.
func (pb *providersBed) worker(name string, flags ...string) *proc {
	pb.t.Helper()
	args := append([]string{"worker", "--nats", pb.url, "--providers", pb.file}, pb.flags...)
	w := startProc(pb.t, pb.env, append(append(args, "--name", name), flags...)...)
	w.waitLine("worker started", 30*time.Second)
	return w
}

// twoProviders is a providersBed naming a thread plan's emulator (plan,
// nothing billed) and a per-solve fallback's (spare: 2captcha's API,
// turnstile at 1.45 the thousand).
type twoProviders struct {
	*providersBed
	plan, spare *fakeapi.Server
}

// startTwoProviders starts a twoProviders solving turnstile in solve, the
// plan of planThreads threads, under an ack wait of 2 s.
func startTwoProviders(t *testing.T, solve map[string]fakeapi.Range, planThreads int) *twoProviders {
	t.Helper()
	tp := &twoProviders{}
	// A price stated for the test, the same in the file and the emulator.
	price := map[string]float64{"turnstile": 1.45}
	var planURL, spareURL string
	tp.plan, planURL = emulatorURL(t, fakeapi.Config{SolveTime: solve, Price: map[string]float64{"turnstile": 0}, Seed: 1})
	tp.spare, spareURL = emulatorURL(t, fakeapi.Config{SolveTime: solve, Price: price, Seed: 2, Service: fakeapi.Service2Captcha})
	tp.providersBed = startProviders(t, stream.Topology{AckWait: 2 * time.Second}, []string{"PLAN_KEY", "SPARE_KEY"}, []string{"--ack-wait", "2s"},
		fmt.Sprintf(`{"name": "plan", "dialect": "classic", "base_url": %q, "service": "captchaai", "key_env": "PLAN_KEY",
  "billing": {"threads": %d}, "role": "primary"}`, planURL, planThreads),
		fmt.Sprintf(`{"name": "spare", "dialect": "classic", "base_url": %q, "service": "2captcha", "key_env": "SPARE_KEY",
  "methods": ["turnstile"], "billing": {"per_1000": {"turnstile": 1.45}}, "role": "fallback"}`, spareURL))
	return tp
}

// checkoutTasks are n turnstile tasks, prefix-0 on, each on a page of its own.
func checkoutTasks(prefix string, n int) []stream.Task {
	tasks := make([]stream.Task, n)
	for i := range tasks {
		tasks[i] = stream.Task{ID: fmt.Sprintf("%s-%d", prefix, i), Method: "turnstile",
			Params: stream.Params{"sitekey": "0x4AAAAAAAB", "pageurl": fmt.Sprintf("https://shop.example/checkout/%d", i)}}
	}
	return tasks
}

// `captchaq fakeapi --price` bills what a providers file states, so that
// the walkthrough's bill at exit can be set against `captchaq stats`; a
// price that is no price is refused, naming it.
func TestFakeAPIPriceBillsAsStated(t *testing.T) {
	t.Parallel()
	p := startProc(t, nil, "fakeapi", "--addr", "127.0.0.1:0", "--service", "2captcha", "--price", "turnstile=1.45,base64=1")
	p.waitLine("fakeapi listening on", 30*time.Second)
	m := regexp.MustCompile(`listening on (http://\S+)`).FindStringSubmatch(p.output())
	require.Len(t, m, 2, p.output())
	for _, site := range []string{"0x4AAAAAAAB", "0x4AAAAAAAC"} {
		resp, err := http.PostForm(m[1]+"/in.php", url.Values{"key": {fakeapi.TestKey}, "method": {"turnstile"},
			"sitekey": {site}, "pageurl": {"https://shop.example/"}})
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.True(t, strings.HasPrefix(string(b), "OK|"), "%s", b)
	}
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
	p.wait(30 * time.Second)
	require.Contains(t, p.output(), "fakeapi: 2 captchas accepted, 0 refunded as unsolvable; 0.00290 spent, balance 99.99710 (at --price turnstile=1.45,base64=1)")

	for _, bad := range []string{"turnstile", "turnstile=NaN", "turnstile=-1", "=1"} {
		r := captchaq(t, "", "fakeapi", "--price", bad)
		require.Equal(t, 2, r.code, "--price %s: %s", bad, r.stderr)
		require.Contains(t, r.stderr, "--price")
	}
}

// `run --providers` checks each provider's key before the first task, as
// `worker --providers` does: a fallback that refuses its key says so at
// the start, by name and code, not in the middle of the primary's outage,
// and never with the key.
func TestRunWithProvidersChecksEachKey(t *testing.T) {
	plan, planURL := emulatorURL(t, fakeapi.Config{TimeScale: 0.01})
	_, spareURL := emulatorURL(t, fakeapi.Config{TimeScale: 0.01, Service: fakeapi.Service2Captcha})
	dir := t.TempDir()
	file := filepath.Join(dir, "providers.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"providers": [
 {"name": "plan", "dialect": "classic", "base_url": "`+planURL+`", "service": "captchaai", "key_env": "PLAN_KEY", "billing": {"threads": 5}, "role": "primary"},
 {"name": "spare", "dialect": "classic", "base_url": "`+spareURL+`", "service": "2captcha", "key_env": "SPARE_KEY",
  "methods": ["userrecaptcha"], "billing": {"per_1000": {"userrecaptcha": 2.99}}, "role": "fallback"}]}`), 0o600))
	tasks := filepath.Join(dir, "tasks.jsonl")
	require.NoError(t, os.WriteFile(tasks, []byte(`{"id": "k-1", "method": "userrecaptcha", "params": {"googlekey": "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-", "pageurl": "https://shop.example/1"}}`+"\n"), 0o600))
	const wrong = "fedcba9876543210fedcba9876543210"
	t.Setenv("PLAN_KEY", fakeapi.TestKey)
	t.Setenv("SPARE_KEY", wrong)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errOut strings.Builder
	code := realMain(ctx, []string{"run", "--providers", file, "--poll-scale", "0.01", "--json", tasks}, &out, &errOut)
	require.Zero(t, code, errOut.String())
	require.Equal(t, 1, plan.Stats().Submitted)
	require.Regexp(t, `provider=spare.*ERROR_KEY_DOES_NOT_EXIST|ERROR_KEY_DOES_NOT_EXIST.*provider=spare`, errOut.String())
	require.NotContains(t, errOut.String()+out.String(), wrong, "the key in the output")
	require.NotContains(t, errOut.String()+out.String(), fakeapi.TestKey, "the key in the output")
}
