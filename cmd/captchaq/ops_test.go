package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/captchaq/captchaq/internal/logbuf"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
)

// testStoreKey is the store key the tests give the shipped nats.conf.
const testStoreKey = "test-store-key-0123456789abcdef0123"

// The shipped nats.conf reads the roles' bcrypt hashes from the environment;
// they are set once for the test binary (parallel tests cannot t.Setenv).
var (
	roleEnvOnce   sync.Once
	rolePasswords = map[string]string{"producer": "producer-pw", "worker": "worker-pw", "admin": "admin-pw"}
)

func setRoleEnv() {
	roleEnvOnce.Do(func() {
		for user, pw := range rolePasswords {
			h, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.MinCost)
			if err != nil {
				panic(err)
			}
			os.Setenv("CAPTCHAQ_"+strings.ToUpper(user)+"_PASSWORD_HASH", string(h))
		}
		// The shipped nats.conf encrypts the store with this key.
		if err := os.Setenv("CAPTCHAQ_STORE_KEY", testStoreKey); err != nil {
			panic(err)
		}
	})
}

// shippedConfig writes a copy of the shipped nats.conf that listens on a
// random port into a new directory, and returns both.
func shippedConfig(t *testing.T) (dir, path string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "nats.conf"))
	require.NoError(t, err)
	conf := strings.Replace(string(b), "listen: 127.0.0.1:4222", "listen: 127.0.0.1:-1", 1)
	require.NotEqual(t, string(b), conf, "the shipped nats.conf no longer listens on 127.0.0.1:4222")
	dir = t.TempDir()
	path = filepath.Join(dir, "nats.conf")
	require.NoError(t, os.WriteFile(path, []byte(conf), 0o600))
	return dir, path
}

// startServer runs `captchaq server` with a copy of the shipped nats.conf on
// a random port and returns its client URL.
func startServer(t *testing.T) string {
	t.Helper()
	setRoleEnv()
	dir, path := shippedConfig(t)

	ctx, cancel := context.WithCancel(context.Background())
	var out logbuf.Buffer
	done := make(chan error, 1)
	go func() {
		done <- runServer(ctx, []string{"--config", path, "--store", filepath.Join(dir, "js"), "--admin-password", rolePasswords["admin"],
			"--log-level", "error"}, &out, io.Discard)
	}()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	re := regexp.MustCompile(`ready on (nats://\S+)`)
	var url string
	require.Eventually(t, func() bool {
		select {
		case err := <-done:
			t.Fatalf("server stopped: %v", err)
		default:
		}
		if m := re.FindStringSubmatch(out.String()); m != nil {
			url = m[1]
			return true
		}
		return false
	}, 20*time.Second, 10*time.Millisecond)
	return url
}

func as(user string) []string {
	return []string{"--user", user, "--password", rolePasswords[user]}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	return "127.0.0.1:" + strconv.Itoa(unusedPort(t))
}

func httpGet(t *testing.T, url string) (string, int) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return err.Error(), 0
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b), resp.StatusCode
}

// TestOperationsWalkthrough follows docs/operations.md: the server with the shipped
// nats.conf, a worker and a producer under their roles, then stats and
// /metrics.
func TestOperationsWalkthrough(t *testing.T) {
	t.Parallel()
	url := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	api := httptest.NewServer(fakeapi.New(fakeapi.Config{TimeScale: 0.001, Seed: 7,
		Faults: fakeapi.Faults{Rules: []fakeapi.Rule{{Param: "pageurl", Contains: "bad.example", Code: "ERROR_PAGEURL"}}}}))
	t.Cleanup(api.Close)
	keyFile := filepath.Join(t.TempDir(), "key")
	require.NoError(t, os.WriteFile(keyFile, []byte(fakeapi.TestKey), 0o600))

	maddr := freeAddr(t)
	wctx, stopWorker := context.WithCancel(ctx)
	wdone := make(chan error, 1)
	go func() {
		args := append([]string{"--nats", url, "--key-file", keyFile, "--solver-url", api.URL, "--metrics-addr", maddr, "--threads", "2",
			"--log-format", "json"}, as("worker")...)
		wdone <- runWorker(wctx, args, io.Discard, io.Discard)
	}()
	require.Eventually(t, func() bool {
		_, code := httpGet(t, "http://"+maddr+"/readyz")
		return code == http.StatusOK
	}, 10*time.Second, 20*time.Millisecond, "the worker becomes ready")

	tasks := filepath.Join(t.TempDir(), "tasks.jsonl")
	require.NoError(t, os.WriteFile(tasks, []byte(
		`{"id":"walk-1","method":"turnstile","params":{"sitekey":"0x4AAAAAAAB","pageurl":"https://bad.example/checkout"}}`+"\n"), 0o600))
	var out strings.Builder
	err := runSubmit(ctx, append(append([]string{"--nats", url, "--wait"}, as("producer")...), tasks), &out, io.Discard)
	var ee *exitError
	require.ErrorAs(t, err, &ee, "the task is dead: exit 1")
	require.Equal(t, 1, ee.code, "%v", err)
	require.Contains(t, out.String(), `"status":"dead"`)
	require.Contains(t, out.String(), `"error":"ERROR_PAGEURL"`)

	out.Reset()
	require.NoError(t, runStats(ctx, append([]string{"--nats", url, "--json"}, as("producer")...), &out, io.Discard))
	require.Contains(t, out.String(), `"dead":1`)
	require.Contains(t, out.String(), `"store":{`, "the shipped roles let a producer read the store's state")
	out.Reset()
	require.NoError(t, runStats(ctx, append([]string{"--nats", url}, as("admin")...), &out, io.Discard))
	require.Contains(t, out.String(), "dead permanent: 1")
	require.Contains(t, out.String(), "no limit")
	require.NotContains(t, out.String(), "10000")
	require.NotContains(t, out.String(), "no plan quota set")
	require.Contains(t, out.String(), "workers alive: 1, 0 of 2 threads in use")
	require.Contains(t, out.String(), "waiting to retry: 0")
	require.Regexp(t, `(?m)^store: room for \d+\.\d MiB more`, out.String())

	// The operator's verbs under the shipped roles: producers read and
	// cancel; only the admin pauses a lane.
	out.Reset()
	require.NoError(t, runWorkers(ctx, append([]string{"ls", "--nats", url}, as("producer")...), &out, io.Discard))
	require.Regexp(t, `(?m)^WORKER\s+HOST\s+PID\s+THREADS\s+IN USE\s+UP\s+LAST SEEN\s+STATE\n\S+\s+\S+\s+\d+\s+2\s+0\s+.*running$`, out.String())
	err = runLane(ctx, append([]string{"pause", "fast", "--nats", url}, as("producer")...), io.Discard, io.Discard)
	require.ErrorContains(t, err, `permission denied: user "producer" may not publish to "$JS.API.CONSUMER.PAUSE.CAPTCHA.workers-fast-high"`)
	err = runLane(ctx, append([]string{"pause", "fast", "--nats", url}, as("worker")...), io.Discard, io.Discard)
	require.ErrorContains(t, err, `permission denied: user "worker"`)
	out.Reset()
	require.NoError(t, runLane(ctx, append([]string{"pause", "fast", "--for", "1h", "--nats", url}, as("admin")...), &out, io.Discard))
	require.Contains(t, out.String(), "lane fast paused until ")
	require.NoError(t, os.WriteFile(tasks, []byte(
		`{"id":"walk-2","method":"turnstile","params":{"sitekey":"0x4AAAAAAAB","pageurl":"https://shop.example/checkout"}}`+"\n"), 0o600))
	require.NoError(t, runSubmit(ctx, append(append([]string{"--nats", url}, as("producer")...), tasks), io.Discard, io.Discard))
	out.Reset()
	require.NoError(t, runTask(ctx, append([]string{"ls", "--nats", url}, as("producer")...), &out, io.Discard))
	require.Regexp(t, `(?m)^walk-2\s+fast\s+normal\s+queued\s+turnstile\s+shop\.example\s+0\s`, out.String())
	out.Reset()
	require.NoError(t, runStats(ctx, append([]string{"--nats", url}, as("producer")...), &out, io.Discard))
	require.Regexp(t, `(?m)^fast\s+normal\s+1\s+0\s+0\s+no limit\s+\S+\s+paused until `, out.String())
	out.Reset()
	// A producer cancels only what it submitted with solve; anyone else's
	// task is the admin's to cancel.
	err = runTask(ctx, append([]string{"cancel", "walk-2", "--nats", url}, as("producer")...), &out, io.Discard)
	require.ErrorContains(t, err, `may not publish to "captcha.cancels.walk-2"`)
	out.Reset()
	require.NoError(t, runTask(ctx, append([]string{"cancel", "walk-2", "--nats", url}, as("admin")...), &out, io.Discard))
	require.Contains(t, out.String(), "task walk-2: canceled (was queued)")
	require.NoError(t, runLane(ctx, append([]string{"resume", "fast", "--nats", url}, as("admin")...), io.Discard, io.Discard))
	out.Reset()
	err = runSubmit(ctx, append(append([]string{"--nats", url, "--wait"}, as("producer")...), tasks), &out, io.Discard)
	require.ErrorAs(t, err, &ee, "canceled: exit 1")
	require.Contains(t, out.String(), `"reason":"canceled"`)
	require.Contains(t, out.String(), `"detail":"canceled by captchaq-task-cancel: operator"`)

	// The waiter saw the dead letter as it was stored; the worker counts it
	// when its write returns: scrape until it has.
	var body string
	require.Eventually(t, func() bool {
		var code int
		body, code = httpGet(t, "http://"+maddr+"/metrics")
		return code == http.StatusOK && strings.Contains(body, `captchaq_tasks_total{method="turnstile",outcome="dead"} 2`)
	}, 10*time.Second, 10*time.Millisecond, "the bad page and the canceled task")
	require.Contains(t, body, `captchaq_dead_letters_total{method="turnstile",reason="canceled"} 1`)
	require.Contains(t, body, `captchaq_api_calls_total{code="ERROR_PAGEURL",endpoint="in.php"} 1`)
	body, code := httpGet(t, "http://"+maddr+"/healthz")
	require.Equal(t, http.StatusOK, code, body)

	stopWorker()
	require.NoError(t, <-wdone)
}

// TestPermissionViolationIsOneLine: a refused operation fails at once with
// one line that names the subject and the user, not after a timeout.
func TestPermissionViolationIsOneLine(t *testing.T) {
	t.Parallel()
	url := startServer(t)
	ctx := context.Background()

	start := time.Now()
	err := runInit(ctx, append([]string{"--nats", url}, as("producer")...), io.Discard, io.Discard)
	require.Error(t, err)
	require.Less(t, time.Since(start), 3*time.Second, "no request timeout")
	require.NotContains(t, err.Error(), "\n")
	// The stream is up to date, so init sends no update; the first thing a
	// producer may not do is create the workers' consumers.
	require.Regexp(t, `^permission denied: user "producer" may not publish to "\$JS\.API\.CONSUMER\.CREATE\.CAPTCHA\.workers-`, err.Error())
	var pe *PermissionError
	require.ErrorAs(t, err, &pe)

	// Workers publish onto task subjects (they move waiting tasks back), but
	// may not change the topology.
	err = runInit(ctx, append([]string{"--nats", url, "--plan-threads", "5"}, as("worker")...), io.Discard, io.Discard)
	require.Error(t, err)
	require.NotContains(t, err.Error(), "\n")
	require.Regexp(t, `^permission denied: user "worker" may not publish to "\$JS\.API\.`, err.Error())

	var out strings.Builder
	require.NoError(t, runInit(ctx, append([]string{"--nats", url, "--plan-threads", "5"}, as("admin")...), &out, io.Discard))
	require.Contains(t, out.String(), "ready on")
}

func TestConnectErrorsSayWhy(t *testing.T) {
	t.Parallel()
	url := startServer(t)
	ctx := context.Background()
	err := runStats(ctx, []string{"--nats", url}, io.Discard, io.Discard)
	require.ErrorContains(t, err, "the server requires credentials: set --user and --password (CAPTCHAQ_USER, CAPTCHAQ_PASSWORD)")
	err = runStats(ctx, []string{"--nats", url, "--user", "producer", "--password", "not-the-pw-1"}, io.Discard, io.Discard)
	require.ErrorContains(t, err, `authentication failed for user "producer"`)
	require.NotContains(t, err.Error(), "not-the-pw-1", "never the password")

	err = runStats(ctx, []string{"--nats", strings.Replace(url, "nats://", "nats://producer:secret@", 1)}, io.Discard, io.Discard)
	if err != nil {
		require.NotContains(t, err.Error(), "secret")
	}
}

func TestPasswdGenerates(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	require.NoError(t, runPasswd(context.Background(), []string{"--generate", "--cost", "4"}, &out, io.Discard))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 2)
	require.NoError(t, bcrypt.CompareHashAndPassword([]byte(lines[1]), []byte(lines[0])))
	require.True(t, strings.HasPrefix(lines[1], "$2a$"))
	var ee *exitError
	require.True(t, errors.As(runPasswd(context.Background(), []string{"--cost", "99"}, io.Discard, io.Discard), &ee))
	require.Equal(t, 2, ee.code)
}

// A password in a URL never reaches an error, with or without a scheme:
// nats.go takes "user:pw@host:port" as readily as "nats://user:pw@host:port".
func TestURLPasswordsNeverPrinted(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, u := range []string{"admin:s3cretPW@127.0.0.1:1", "nats://admin:s3cretPW@127.0.0.1:1", "127.0.0.1:1,admin:s3cretPW@127.0.0.1:2", "a:b:s3cretPW@x@127.0.0.1:1"} {
		var stderr strings.Builder
		err := runStats(ctx, []string{"--nats", u}, io.Discard, &stderr)
		require.Error(t, err, u)
		require.NotContains(t, err.Error()+stderr.String(), "s3cretPW", u)
		require.Contains(t, err.Error(), "127.0.0.1", "the error still says where: %s", u)
	}
	require.Equal(t, "admin:REDACTED@127.0.0.1:1", redactURLs("admin:s3cretPW@127.0.0.1:1"))
	require.Equal(t, "127.0.0.1:4222", redactURLs("127.0.0.1:4222"))
}

// `captchaq server` with the shipped nats.conf encrypts its store with
// CAPTCHAQ_STORE_KEY and never logs the key, even at debug level; started
// again with another key it refuses, naming the stream and neither key,
// and leaves the store as it was for the right key. Not parallel: it sets
// the environment.
func TestServerStoreKeyEncryptsAndIsNeverLogged(t *testing.T) {
	setRoleEnv()
	dir, path := shippedConfig(t)
	store := filepath.Join(dir, "js")
	key := "first-server-store-key-0123456789abcdef"
	t.Setenv("CAPTCHAQ_STORE_KEY", key)
	serve := func() (stdout, stderr string, err error) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var out, errOut logbuf.Buffer
		done := make(chan error, 1)
		go func() {
			done <- runServer(ctx, []string{"--config", path, "--store", store, "--admin-password", rolePasswords["admin"], "--log-level", "debug"}, &out, &errOut)
		}()
		for {
			select {
			case err := <-done:
				return out.String(), errOut.String(), err
			case <-time.After(10 * time.Millisecond):
				if strings.Contains(out.String(), "ready on") {
					cancel()
					err := <-done
					return out.String(), errOut.String(), err
				}
			}
		}
	}
	stdout, stderr, err := serve()
	require.NoError(t, err, stderr)
	require.Contains(t, stderr, "Encryption", "nats-server's start-up notices, which name the store's cipher, are in the log")
	require.NotContains(t, stdout+stderr, key)
	require.NotContains(t, stderr, "not encrypted at rest")

	t.Setenv("CAPTCHAQ_STORE_KEY", "other-server-store-key-0123456789abcdef")
	stdout, stderr, err = serve()
	require.ErrorContains(t, err, "stream CAPTCHA")
	require.ErrorContains(t, err, "could not open")
	for _, k := range []string{key, "other-server-store-key"} {
		require.NotContains(t, err.Error()+stdout+stderr, k)
	}

	t.Setenv("CAPTCHAQ_STORE_KEY", key)
	_, stderr, err = serve()
	require.NoError(t, err, "the right key opens the store again: %s", stderr)
}

// passwd at a terminal reads the password without echoing it, twice. The
// terminal is script(1)'s pseudo-terminal (util-linux, on every Debian).
func TestPasswdAtATerminalDoesNotEcho(t *testing.T) {
	t.Parallel()
	script, err := exec.LookPath("script")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("script(1) (util-linux) is missing")
		}
		t.Skip("script(1) is missing: no pseudo-terminal to test with")
	}
	cmd := exec.Command(script, "-q", "-e", "-c", os.Args[0]+" passwd --cost 4", "/dev/null")
	cmd.Env = append(os.Environ(), childEnv...)
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	outR, outW := io.Pipe()
	cmd.Stdout, cmd.Stderr = outW, outW
	require.NoError(t, cmd.Start())
	lines := make(chan string, 16)
	var all strings.Builder
	go func() {
		buf := make([]byte, 256)
		for {
			n, err := outR.Read(buf)
			if n > 0 {
				all.Write(buf[:n])
				lines <- all.String()
			}
			if err != nil {
				close(lines)
				return
			}
		}
	}()
	waitFor := func(s string) string {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			select {
			case got, ok := <-lines:
				require.True(t, ok, "output ended before %q", s)
				if strings.Contains(got, s) {
					return got
				}
			case <-deadline:
				t.Fatalf("no %q", s)
			}
		}
	}
	waitFor("Password: ")
	_, err = io.WriteString(in, "n0tEch0ed\n")
	require.NoError(t, err)
	waitFor("Again: ")
	_, err = io.WriteString(in, "n0tEch0ed\n")
	require.NoError(t, err)
	got := waitFor("$2a$04$")
	require.NoError(t, cmd.Wait())
	outW.Close()
	require.NotContains(t, got, "n0tEch0ed", "the password is not echoed")
	hash := strings.TrimSpace(got[strings.Index(got, "$2a$"):])
	require.NoError(t, bcrypt.CompareHashAndPassword([]byte(hash), []byte("n0tEch0ed")))
}

// A producer may submit tasks but not record replays: its `dead replay` is
// refused before anything is queued or paid for, and the letter still reads
// as not replayed. The admin's replay queues it and records it.
func TestProducerReplayRefusedBeforeQueueing(t *testing.T) {
	t.Parallel()
	url := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	api, emu := emulatorURL(t, fakeapi.Config{TimeScale: 0.001})
	nc, err := nats.Connect(url, nats.UserInfo("worker", rolePasswords["worker"]))
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
	require.NoError(t, os.WriteFile(file, []byte(`{"id":"pf1","method":"turnstile","params":{"sitekey":"perm-fail","pageurl":"https://shop.example/"}}`+"\n"), 0o600))
	r := captchaq(t, url, append([]string{"submit", "--wait", file}, as("producer")...)...)
	require.Equal(t, 1, r.code, r.stderr)
	require.Equal(t, 1, api.Stats().InCalls)

	start := time.Now()
	r = captchaq(t, url, append([]string{"dead", "replay", "pf1"}, as("producer")...)...)
	require.Equal(t, 1, r.code, r.stderr)
	require.Less(t, time.Since(start), 10*time.Second, "refused at once, not after a timeout")
	require.Contains(t, r.stderr, `permission denied: user "producer" may not publish to "captcha.replays.pf1"`)
	require.Contains(t, r.stderr, "nothing queued")
	require.Equal(t, 1, strings.Count(r.stderr, "\n"), r.stderr)
	require.Empty(t, r.stdout)
	r = captchaq(t, url, append([]string{"dead", "show", "pf1"}, as("admin")...)...)
	require.Zero(t, r.code, r.stderr)
	require.Regexp(t, `(?m)^replayed:\s+no$`, r.stdout, "a refused replay records nothing")
	r = captchaq(t, url, append([]string{"task", "ls", "--json"}, as("admin")...)...)
	require.Zero(t, r.code, r.stderr)
	require.Empty(t, r.stdout, "a refused replay queues nothing")

	// Nor may a producer purge: refused, and no "purged 0" on stdout.
	r = captchaq(t, url, append([]string{"dead", "purge", "pf1", "--yes"}, as("producer")...)...)
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stderr, `permission denied: user "producer" may not publish to "$JS.API.STREAM.MSG.DELETE.CAPTCHA"`)
	require.Equal(t, 1, strings.Count(r.stderr, "\n"), r.stderr)
	require.Empty(t, r.stdout)

	r = captchaq(t, url, append([]string{"dead", "replay", "pf1"}, as("admin")...)...)
	require.Zero(t, r.code, r.stderr)
	receipts := jsonLines[stream.Receipt](t, r.stdout)
	require.Len(t, receipts, 1)
	require.Eventually(t, func() bool { return api.Stats().InCalls == 2 }, 30*time.Second, 20*time.Millisecond, "the replay is taken and sent")
	r = captchaq(t, url, append([]string{"dead", "ls", "--json"}, as("admin")...)...)
	require.Zero(t, r.code, r.stderr)
	letters := jsonLines[stream.DeadLetter](t, r.stdout)
	require.NotEmpty(t, letters)
	require.NotNil(t, letters[0].Replayed, "the first letter reads as replayed")
	require.Equal(t, receipts[0].Seq, letters[0].Replayed.TaskSeq)
}
