package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/gateway"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/broker"
	"github.com/captchaq/captchaq/stream/streamtest"
)

// testHooks allows the tests' callback receivers, on 127.0.0.1, which a
// gateway refuses by default.
var testHooks = []string{"127.0.0.1"}

var (
	alice = gateway.Key{Key: "alice-key-0123456789abcdef", Producer: "alice"}
	bob   = gateway.Key{Key: "bob-key-0123456789abcdef00", Producer: "bob"}
)

// bundle is a running captchaq with a gateway in front of it.
type bundle struct {
	env *streamtest.Env
	gw  *gateway.Gateway
	url string // the gateway's base URL
}

// setup starts captchaq (streamtest: embedded JetStream, the emulator,
// workers) and a gateway for alice and bob on 127.0.0.1; edit changes the
// gateway's Config.
func setup(t *testing.T, edit func(*gateway.Config), opts ...streamtest.Option) *bundle {
	t.Helper()
	env := streamtest.Start(t, opts...)
	cfg := gateway.Config{Conn: env.Connect(nats.Name("gateway")), Topology: env.Topology,
		Keys: []gateway.Key{alice, bob}, Now: env.Now, Pingback: gateway.Pingback{Allow: testHooks}}
	if edit != nil {
		edit(&cfg)
	}
	return serve(t, env, cfg)
}

func serve(t *testing.T, env *streamtest.Env, cfg gateway.Config) *bundle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gw, err := gateway.New(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(gw.Close)
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	return &bundle{env: env, gw: gw, url: srv.URL}
}

// call sends a GET to the gateway's op with the fields and returns the
// body.
func (b *bundle) call(t *testing.T, op string, kv ...string) string {
	t.Helper()
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Set(kv[i], kv[i+1])
	}
	resp, err := http.Get(b.url + "/" + op + "?" + v.Encode())
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	return string(body)
}

var turnstile = []string{"method", "turnstile", "sitekey", "0x4AAAAAAABkMYinukE8nzY", "pageurl", "https://shop.example/checkout"}

// submit sends a Turnstile task for key (plain text) and returns its id.
func (b *bundle) submit(t *testing.T, k gateway.Key) string {
	t.Helper()
	out := b.call(t, "in.php", append([]string{"key", k.Key}, turnstile...)...)
	require.True(t, strings.HasPrefix(out, "OK|"), out)
	return strings.TrimPrefix(out, "OK|")
}

// await polls res.php (plain text) until the answer is not
// CAPCHA_NOT_READY and returns it.
func (b *bundle) await(t *testing.T, k gateway.Key, id string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out := b.call(t, "res.php", "key", k.Key, "action", "get", "id", id)
		// ERROR: 1005 is the poll limit (300 in 3 s): a script waits and
		// polls again, as this one does.
		if out != "CAPCHA_NOT_READY" && out != "ERROR: 1005" {
			return out
		}
		require.True(t, time.Now().Before(deadline), "task %s not done after 30 s", id)
		time.Sleep(20 * time.Millisecond) // the caller's poll interval: 150 polls in 3 s, under the limit
	}
}

// The plain-text dialect end to end: the id is digits, the answer is the
// token the stream's outcome holds, under the caller's producer name.
func TestSubmitAndPollPlainText(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	id := b.submit(t, alice)
	require.Len(t, id, 18)
	require.Empty(t, strings.Trim(id, "0123456789"), "the id is a number")
	got := b.await(t, alice, id)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := b.env.Client.Wait(ctx, "alice-"+id)
	require.NoError(t, err)
	require.Equal(t, "OK|"+out.Text(), got)
	ti, err := b.env.Client.TaskOf(ctx, "alice-"+id)
	require.NoError(t, err)
	require.Equal(t, stream.TaskDone, ti.Status)
}

// json=1: the id and the answer in the service's JSON shapes, header_acao
// honoured.
func TestSubmitAndPollJSON(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	resp, err := http.PostForm(b.url+"/in.php", url.Values{"key": {alice.Key}, "method": {"geetest"}, "gt": {"022397c99c9f646f6477822485f30404"},
		"challenge": {"a66f31a53a6e1d0f7aa0d4b41bd57ac1"}, "pageurl": {"https://shop.example/login"}, "json": {"1"}, "header_acao": {"1"}})
	require.NoError(t, err)
	var in struct {
		Status  int    `json:"status"`
		Request string `json:"request"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&in))
	resp.Body.Close()
	require.Equal(t, "*", resp.Header.Get("Access-Control-Allow-Origin"))
	req, err := http.NewRequest(http.MethodOptions, b.url+"/in.php", nil)
	require.NoError(t, err)
	req.Header.Set("Origin", "https://shop.example")
	req.Header.Set("Access-Control-Request-Method", "POST")
	req.Header.Set("Access-Control-Request-Headers", "content-type")
	pre, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	pre.Body.Close()
	require.Equal(t, http.StatusNoContent, pre.StatusCode, "a browser's preflight of the SDK's JSON POST")
	require.Equal(t, "*", pre.Header.Get("Access-Control-Allow-Origin"))
	require.Contains(t, pre.Header.Get("Access-Control-Allow-Headers"), "Content-Type")
	require.Equal(t, 1, in.Status, in.Request)
	var res struct {
		Status  int             `json:"status"`
		Request json.RawMessage `json:"request"`
	}
	for {
		require.NoError(t, json.Unmarshal([]byte(b.call(t, "res.php", "key", alice.Key, "action", "get", "id", in.Request, "json", "1")), &res))
		if string(res.Request) != `"CAPCHA_NOT_READY"` {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	require.Equal(t, 1, res.Status, string(res.Request))
	var gt map[string]string
	require.NoError(t, json.Unmarshal(res.Request, &gt), "GeeTest's answer is an object")
	require.NotEmpty(t, gt["geetest_validate"])
}

// A task that dies answers the service's own code, so callers' handling of
// ERROR_CAPTCHA_UNSOLVABLE keeps working.
func TestDeadTaskAnswersTheServiceCode(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, streamtest.WithFaults(fakeapi.Faults{Unsolvable: 1}), streamtest.WithMaxAttempts(1))
	id := b.submit(t, alice)
	require.Equal(t, "ERROR_CAPTCHA_UNSOLVABLE", b.await(t, alice, id))
	var res struct {
		Status    int    `json:"status"`
		Request   string `json:"request"`
		ErrorText string `json:"error_text"`
	}
	require.NoError(t, json.Unmarshal([]byte(b.call(t, "res.php", "key", alice.Key, "action", "get", "id", id, "json", "1")), &res))
	require.Equal(t, 0, res.Status)
	require.Equal(t, "ERROR_CAPTCHA_UNSOLVABLE", res.Request)
}

// A wrong key gets the service's ERROR_KEY_DOES_NOT_EXIST on both
// endpoints, and nothing is submitted.
func TestWrongKey(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	require.Equal(t, "ERROR_KEY_DOES_NOT_EXIST", b.call(t, "in.php", append([]string{"key", "not-a-key-of-this-gateway"}, turnstile...)...))
	require.Equal(t, "ERROR_KEY_DOES_NOT_EXIST", b.call(t, "in.php", turnstile...))
	require.Equal(t, "ERROR_KEY_DOES_NOT_EXIST", b.call(t, "res.php", "key", "not-a-key-of-this-gateway", "action", "get", "id", "123"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tasks, err := b.env.Client.Tasks(ctx, stream.TaskFilter{})
	require.NoError(t, err)
	require.Empty(t, tasks)
}

// One caller cannot read another's task: the id is refused as the service
// refuses an id that is not the account's.
func TestPollOfAnotherCallersIDIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	id := b.submit(t, alice)
	require.Equal(t, "ERROR_WRONG_CAPTCHA_ID", b.call(t, "res.php", "key", bob.Key, "action", "get", "id", id))
	require.True(t, strings.HasPrefix(b.await(t, alice, id), "OK|"))
	require.Equal(t, "ERROR_WRONG_CAPTCHA_ID", b.call(t, "res.php", "key", bob.Key, "action", "get", "id", id), "not after it is solved either")
	require.Equal(t, "ERROR_WRONG_ID_FORMAT", b.call(t, "res.php", "key", bob.Key, "action", "get", "id", "alice-"+id))
}

// A flood of in.php gets MAX_USER_TURN, and the caller stays banned for the
// ban time; another caller is not affected.
func TestInPHPFloodIsRateLimited(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *gateway.Config) {
		c.Limits = gateway.Limits{Submits: 5, SubmitWindow: time.Minute, BanTime: time.Minute}
	})
	for range 5 {
		b.submit(t, alice)
	}
	require.Equal(t, "MAX_USER_TURN", b.call(t, "in.php", append([]string{"key", alice.Key}, turnstile...)...))
	require.Equal(t, "MAX_USER_TURN", b.call(t, "in.php", append([]string{"key", alice.Key}, turnstile...)...), "banned")
	b.submit(t, bob)
}

// Polling too often gets the service's code for too many res.php calls.
func TestResPHPFloodIsRateLimited(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *gateway.Config) { c.Limits = gateway.Limits{Polls: 3, PollWindow: time.Minute} })
	for range 3 {
		b.call(t, "res.php", "key", alice.Key, "action", "get", "id", "123456789012345678")
	}
	require.Equal(t, "ERROR: 1005", b.call(t, "res.php", "key", alice.Key, "action", "get", "id", "123456789012345678"))
}

// A key's share of the plan bounds its unfinished tasks: over it, in.php
// answers ERROR_NO_SLOT_AVAILABLE and getbalance 0; once workers finish
// them, the key submits again.
func TestShareOfThePlan(t *testing.T) {
	t.Parallel()
	share := alice
	share.Share = 0.5
	b := setup(t, func(c *gateway.Config) { c.Keys = []gateway.Key{share, bob}; c.PlanThreads = 4 }, streamtest.WithWorkers(0))
	ids := []string{b.submit(t, share), b.submit(t, share)}
	require.Equal(t, "ERROR_NO_SLOT_AVAILABLE", b.call(t, "in.php", append([]string{"key", share.Key}, turnstile...)...))
	require.Equal(t, "0", b.call(t, "res.php", "key", share.Key, "action", "getbalance"))
	require.Equal(t, "4", b.call(t, "res.php", "key", bob.Key, "action", "getbalance"), "no share: the plan's threads")
	b.submit(t, bob)
	b.env.StartWorker(stream.WorkerConfig{})
	for _, id := range ids {
		require.True(t, strings.HasPrefix(b.await(t, share, id), "OK|"))
	}
	require.Equal(t, "2", b.call(t, "res.php", "key", share.Key, "action", "getbalance"))
	b.submit(t, share)
}

// A full stream answers ERROR_NO_SLOT_AVAILABLE, the code callers wait on
// and retry, and the caller's earlier tasks are untouched.
func TestFullStreamAnswersTryLater(t *testing.T) {
	t.Parallel()
	top := stream.Topology{MaxBytes: 16 << 10}
	ns, err := broker.Start(broker.Config{StoreDir: t.TempDir(), LazySync: true})
	require.NoError(t, err)
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = stream.EnsureTopology(ctx, js.Conn(), top, true)
	require.NoError(t, err)
	gw, err := gateway.New(ctx, gateway.Config{Conn: nc, Topology: top, Keys: []gateway.Key{alice}, Limits: gateway.Limits{Submits: -1}})
	require.NoError(t, err)
	t.Cleanup(gw.Close)
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	b := &bundle{gw: gw, url: srv.URL}
	var accepted []string
	for {
		out := b.call(t, "in.php", append([]string{"key", alice.Key}, turnstile...)...)
		if out == "ERROR_NO_SLOT_AVAILABLE" {
			break
		}
		require.True(t, strings.HasPrefix(out, "OK|"), out)
		accepted = append(accepted, strings.TrimPrefix(out, "OK|"))
		require.Less(t, len(accepted), 100, "a 16 KB stream never filled")
	}
	require.NotEmpty(t, accepted)
	for _, id := range accepted {
		require.Equal(t, "CAPCHA_NOT_READY", b.call(t, "res.php", "key", alice.Key, "action", "get", "id", id), "queued, no worker")
	}
}

// A gateway that did not submit the task (restarted, or another instance)
// answers from the stream.
func TestAnotherGatewayAnswersFromTheStream(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	id := b.submit(t, alice)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := b.env.Client.Wait(ctx, "alice-"+id)
	require.NoError(t, err)
	other := serve(t, b.env, gateway.Config{Conn: b.env.Connect(), Topology: b.env.Topology, Keys: []gateway.Key{alice, bob}, Now: b.env.Now})
	require.Equal(t, "OK|"+out.Text(), other.call(t, "res.php", "key", alice.Key, "action", "get", "id", id))
	require.Equal(t, "ERROR_WRONG_CAPTCHA_ID", other.call(t, "res.php", "key", alice.Key, "action", "get", "id", "123456789012345678"))
}

// Bad input gets the service's code for it and words naming the field.
func TestBadParameters(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	require.Equal(t, "ERROR_PAGEURL", b.call(t, "in.php", "key", alice.Key, "method", "turnstile", "sitekey", "0x4AAAAAAABkMYinukE8nzY"))
	require.Equal(t, "ERROR_GOOGLEKEY", b.call(t, "in.php", "key", alice.Key, "method", "userrecaptcha", "pageurl", "https://shop.example/"))
	require.Equal(t, "ERROR_BAD_PARAMETERS", b.call(t, "in.php", "key", alice.Key, "method", "nosuchmethod"))
	require.Equal(t, "ERROR_ZERO_CAPTCHA_FILESIZE", b.call(t, "in.php", "key", alice.Key, "method", "base64"))
	require.Equal(t, "ERROR_IMAGE_TYPE_NOT_SUPPORTED", b.call(t, "in.php", "key", alice.Key, "method", "base64", "body", "aGVsbG8gd29ybGQ="))
	var res struct {
		Request   string `json:"request"`
		ErrorText string `json:"error_text"`
	}
	require.NoError(t, json.Unmarshal([]byte(b.call(t, "in.php", "key", alice.Key, "method", "turnstile", "json", "1", "sitekey", "0x4AAAAAAABkMYinukE8nzY")), &res))
	require.Equal(t, "ERROR_PAGEURL", res.Request)
	require.Contains(t, res.ErrorText, "pageurl")
	require.Equal(t, "ERROR_EMPTY_ACTION", b.call(t, "res.php", "key", alice.Key))
	require.Equal(t, "ERROR_BAD_PARAMETERS", b.call(t, "in.php", append([]string{"key", alice.Key, "priority", "urgent"}, turnstile...)...))
	// A proxy's codes as the emulator answers them (fakeapi's checkProxy):
	// a type it does not take is a bad proxy, an address it cannot read a
	// bad format.
	require.Equal(t, "ERROR_BAD_PROXY", b.call(t, "in.php", append([]string{"key", alice.Key, "proxy", "10.0.0.1:3128", "proxytype", "FTP"}, turnstile...)...))
	require.Equal(t, "ERROR_PROXY_FORMAT", b.call(t, "in.php", append([]string{"key", alice.Key, "proxy", "10.0.0.1", "proxytype", "HTTP"}, turnstile...)...))
}

// Priority and deadline parameters reach the task; ids= polls several.
func TestPriorityDeadlineAndSeveralIDs(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, streamtest.WithWorkers(0))
	out := b.call(t, "in.php", append([]string{"key", alice.Key, "priority", "high", "deadline", "60"}, turnstile...)...)
	id := strings.TrimPrefix(out, "OK|")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ti, err := b.env.Client.TaskOf(ctx, "alice-"+id)
	require.NoError(t, err)
	require.Equal(t, stream.PriorityHigh, ti.Priority)
	require.Equal(t, "CAPCHA_NOT_READY|ERROR_WRONG_CAPTCHA_ID", b.call(t, "res.php", "key", alice.Key, "action", "get", "ids", id+",123456789012345678"))
	require.Equal(t, "ERROR_REPORT_NOT_RECORDED", b.call(t, "res.php", "key", alice.Key, "action", "reportbad", "id", id))
}

// pythonPath is Debian's python3 with python3-requests, or the test skips
// (fails under CI=true: .ci/run installs it).
func pythonPath(t *testing.T) string {
	t.Helper()
	const py = "/usr/bin/python3"
	err := exec.Command(py, "-c", "import requests").Run()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s with python3-requests is required in CI (.ci/run installs it): %v", py, err)
		}
		t.Skipf("no %s with requests (apt-get install python3-requests): %v", py, err)
	}
	return py
}

// runPython runs a script of testdata/python against the gateway as key k,
// with the guide's 5-s pauses scaled down, and returns its last line of
// output and its exit code.
func (b *bundle) runPython(t *testing.T, script string, k gateway.Key, env ...string) (string, int) {
	t.Helper()
	py := pythonPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, filepath.Join("testdata", "python", script))
	cmd.Env = append(os.Environ(), append([]string{"CAPTCHAQ_GATEWAY=" + b.url, "CAPTCHAAI_API_KEY=" + k.Key,
		"POLL_INTERVAL=0.05", "FIRST_WAIT=0.05", "MAX_TIMEOUT=30"}, env...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], code
}

// A script written as CaptchaAI's guides write them (requests, in.php
// json=1, res.php every POLL_INTERVAL s) gets its token through captchaq
// by changing the base URL and the key.
func TestPythonGuideScript(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	line, code := b.runPython(t, "solve.py", alice)
	require.Equal(t, 0, code, line)
	id, token, ok := strings.Cut(line, " ")
	require.True(t, ok, line)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := b.env.Client.Wait(ctx, "alice-"+id)
	require.NoError(t, err)
	require.Equal(t, out.Text(), token)

	line, code = b.runPython(t, "solve.py", gateway.Key{Key: "wrong-key-0123456789abcdef"})
	require.Equal(t, 2, code)
	require.Equal(t, "ERROR_KEY_DOES_NOT_EXIST", line)
}

// The guide's script sees ERROR_CAPTCHA_UNSOLVABLE for a task that dies.
func TestPythonGuideScriptDeadTask(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, streamtest.WithFaults(fakeapi.Faults{Unsolvable: 1}), streamtest.WithMaxAttempts(2))
	line, code := b.runPython(t, "solve.py", alice)
	require.Equal(t, 2, code, line)
	require.Equal(t, "ERROR_CAPTCHA_UNSOLVABLE", line)
}

// A pingback comes once the outcome is stored: the script's callback
// handler gets id and code, and res.php then gives the same token.
func TestPythonPingback(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	line, code := b.runPython(t, "pingback.py", bob)
	require.Equal(t, 0, code, line)
	id, token, ok := strings.Cut(line, " ")
	require.True(t, ok, line)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := b.env.Client.Wait(ctx, "bob-"+id)
	require.NoError(t, err)
	require.Equal(t, out.Text(), token)
}
