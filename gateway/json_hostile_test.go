package gateway_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/gateway"
	"github.com/captchaq/captchaq/internal/dialect/createtask"
	"github.com/captchaq/captchaq/internal/logbuf"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/streamtest"
)

// A service that answers HTTP 500 pages, HTML, garbage and slow replies
// behind the workers: every JSON task ends ready in its type's solution
// shape or with ERROR_CAPTCHA_UNSOLVABLE (errorId 12) naming the code it
// died on, never a code about the workers' exchange; no captcha is paid
// twice; neither the callers' keys nor the tokens reach a log line of the
// gateway or of the workers.
func TestJSONServiceFaultsBehindTheWorkers(t *testing.T) {
	t.Parallel()
	var logs logbuf.Buffer
	t.Cleanup(func() {
		if t.Failed() {
			out := logs.String()
			t.Logf("the last of the workers' and gateway's log:\n%s", out[max(0, len(out)-4000):])
		}
	})
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	b := setup(t, func(c *gateway.Config) { c.Logger = log },
		streamtest.WithLogger(log),
		streamtest.WithFaults(fakeapi.Faults{HTTP500: 0.25, HTML: 0.15, Garbage: 0.15, Slow: 0.1, SlowDelay: 50 * time.Millisecond}))
	// Each task distinct, so that the emulator's count per task
	// (Stats.PerTask, by content) tells one task paid twice.
	tasks := func(round int) []map[string]any {
		page := "https://shop.example/" + strconv.Itoa(round)
		img := append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, 200)...)
		img[100] = byte(round)
		return []map[string]any{
			{"type": "RecaptchaV2TaskProxyless", "websiteURL": page, "websiteKey": "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-"},
			{"type": "AntiTurnstileTaskProxyLess", "websiteURL": page, "websiteKey": "0x4AAAAAAABkMYinukE8nzY"},
			{"type": "HCaptchaTaskProxyless", "websiteURL": page, "websiteKey": "a5f74b19-9e45-40e0-b45d-47ff91b7a6c2"},
			{"type": "ImageToTextTask", "body": base64.StdEncoding.EncodeToString(img)},
		}
	}
	field := []string{"gRecaptchaResponse", "token", "gRecaptchaResponse", "text"}
	var ids []int64
	var which []int
	for round := range 4 {
		for i, task := range tasks(round) {
			ids = append(ids, b.create(t, alice, task))
			which = append(which, i)
		}
	}
	var tokens []string
	for n, id := range ids {
		r := b.result(t, alice, id)
		if r.str("status") == createtask.StatusReady {
			sol, ok := r["solution"].(map[string]any)
			require.True(t, ok, "%v", r)
			tok, _ := sol[field[which[n]]].(string)
			require.NotEmpty(t, tok, "task %d: %v", id, r)
			tokens = append(tokens, tok)
			continue
		}
		require.Equal(t, createtask.CodeCaptchaUnsolvable, r.str("errorCode"), "%v", r)
		require.EqualValues(t, 12, r.num(t, "errorId"))
		require.NotEmpty(t, r.str("errorDescription"))
	}
	st := b.env.Emulator.Stats()
	for key, n := range st.PerTask {
		require.LessOrEqual(t, n, 1, "captcha %s paid %d times", key, n)
	}
	require.LessOrEqual(t, st.Submitted, len(ids), "more captchas paid than tasks")
	t.Logf("%d tasks, %d solved, %d paid, %d in.php calls", len(ids), len(tokens), st.Submitted, st.InCalls)
	out := logs.String()
	for _, secret := range append([]string{alice.Key, bob.Key}, tokens...) {
		if len(secret) > 12 {
			require.NotContains(t, out, secret)
		}
	}
}

// taskId null is a missing taskId, as an absent one is: "taskId:
// required", not "want a whole number, not number null".
func TestJSONTaskIDNullIsMissing(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, streamtest.WithWorkers(0))
	for _, path := range []string{"getTaskResult", "reportIncorrectRecaptcha"} {
		r := b.postJSON(t, path, `{"clientKey":"`+alice.Key+`","taskId":null}`)
		require.Equal(t, createtask.CodeNoSuchCaptchaID, r.str("errorCode"), path)
		require.Equal(t, "taskId: required", r.str("errorDescription"), path)
	}
}

// capsolverReply reads a reply as CapSolver's official Go SDK declares it
// (github.com/capsolver/capsolver-go, types.go: capSolverResponse, TaskId
// string `json:"taskId,omitempty"`): CapSolver's taskId is a string
// (docs.capsolver.com/guide/api-createtask: "taskId": "37223a89-…").
type capsolverReply struct {
	ErrorID          int32  `json:"errorId"`
	ErrorCode        string `json:"errorCode"`
	ErrorDescription string `json:"errorDescription,omitempty"`
	Status           string `json:"status,omitempty"`
	Solution         *struct {
		GRecaptchaResponse string `json:"gRecaptchaResponse,omitempty"`
	} `json:"solution,omitempty"`
	TaskID string `json:"taskId,omitempty"`
}

// capsolverRequest is that SDK's request (types.go capSolverRequest): the
// key as "ClientKey", the id as a string, posted to CAPSOLVER_API_HOST +
// "/createTask" or "/getTaskResult" (request.go, constant.go).
type capsolverRequest struct {
	ClientKey string          `json:"ClientKey"`
	Task      *map[string]any `json:"task,omitempty"`
	TaskID    string          `json:"taskId,omitempty"`
}

// capsolverCall posts req as that SDK's request does and reads the reply
// into its response type; a reply it cannot read fails the test.
func (b *bundle) capsolverCall(t *testing.T, path string, req capsolverRequest) capsolverReply {
	t.Helper()
	body, err := json.Marshal(req)
	require.NoError(t, err)
	resp, err := http.Post(b.url+path, "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	var r capsolverReply
	require.NoError(t, json.Unmarshal(raw, &r), "capsolver-go cannot read %s", raw)
	return r
}

// carol's JSON clients are CapSolver's.
var carol = gateway.Key{Key: "carol-key-0123456789abcdef", Producer: "carol", Client: createtask.FamilyCapSolver}

// A key whose clients are CapSolver's (client "capsolver" in the key file)
// is answered as CapSolver's Go SDK reads it, along that SDK's Solve:
// createTask's taskId a string, the polls with that string find the task
// and end ready with its solution, and an error is errorId 1, the only
// one that SDK takes for an error (capsolver.go Solve: `if
// capRes.ErrorId == 1`), or it polls 45 times for nothing. Its callback
// names the task by the same string. The Anti-Captcha keys beside it still
// get numbers. Each task is paid once; a refused one not at all.
func TestJSONCapSolverGoSDKReadsTheTaskID(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *gateway.Config) { c.Keys = append(c.Keys, carol) })
	task := map[string]any{"type": "ReCaptchaV2TaskProxyLess", "websiteURL": "https://shop.example/",
		"websiteKey": "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-"}
	r := b.capsolverCall(t, "/createTask", capsolverRequest{ClientKey: carol.Key, Task: &task})
	require.Zero(t, r.ErrorID, "%+v", r)
	require.NotEmpty(t, r.TaskID, "%+v", r)
	require.NotEqual(t, createtask.StatusReady, r.Status)
	id := r.TaskID
	require.Eventually(t, func() bool {
		r = b.capsolverCall(t, "/getTaskResult", capsolverRequest{ClientKey: carol.Key, TaskID: id})
		require.NotEqual(t, int32(1), r.ErrorID, "%+v", r)
		return r.Status == createtask.StatusReady
	}, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, id, r.TaskID)
	require.NotNil(t, r.Solution)
	require.NotEmpty(t, r.Solution.GRecaptchaResponse)

	for _, tc := range []struct {
		path string
		req  capsolverRequest
		code string
	}{
		{"/getTaskResult", capsolverRequest{ClientKey: carol.Key, TaskID: "12345"}, createtask.CodeNoSuchCaptchaID},
		{"/getTaskResult", capsolverRequest{ClientKey: carol.Key}, createtask.CodeNoSuchCaptchaID},
		{"/createTask", capsolverRequest{ClientKey: carol.Key, Task: &map[string]any{"type": "ImageToTextTask", "body": "aGVsbG8="}},
			createtask.CodeImageTypeNotSupported},
		{"/createTask", capsolverRequest{ClientKey: carol.Key, Task: &map[string]any{"type": "NoSuchTask"}}, createtask.CodeTaskNotSupported},
	} {
		r := b.capsolverCall(t, tc.path, tc.req)
		require.Equal(t, int32(1), r.ErrorID, "%s %+v: %+v", tc.path, tc.req, r)
		require.Equal(t, tc.code, r.ErrorCode, "%s %+v", tc.path, tc.req)
		require.NotEmpty(t, r.ErrorDescription)
	}

	got := make(chan []byte, 1)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- body
	}))
	t.Cleanup(hook.Close)
	cr := b.postJSON(t, "createTask", map[string]any{"clientKey": carol.Key, "callbackUrl": hook.URL,
		"task": map[string]any{"type": "AntiTurnstileTaskProxyLess", "websiteURL": "https://shop.example/", "websiteKey": "0x4AAAAAAABkMYinukE8nzY"}})
	cbID := cr.str("taskId")
	require.NotEmpty(t, cbID, "%v", cr)
	select {
	case body := <-got:
		var cb capsolverReply
		require.NoError(t, json.Unmarshal(body, &cb), "capsolver-go cannot read the callback %s", body)
		require.Equal(t, cbID, cb.TaskID)
		require.Equal(t, createtask.StatusReady, cb.Status)
	case <-time.After(30 * time.Second):
		t.Fatal("no callback in 30 s")
	}

	b.create(t, alice, map[string]any{"type": "TurnstileTaskProxyless", "websiteURL": "https://shop.example/2", "websiteKey": "0x4AAAAAAABkMYinukE8nzY"})
	st := b.env.Emulator.Stats()
	require.LessOrEqual(t, st.Submitted, 3)
	for key, n := range st.PerTask {
		require.Equal(t, 1, n, "captcha %s paid %d times", key, n)
	}
}

// A service that goes down (every reply an HTTP 500 page) after it took
// the JSON callers' captchas, and comes back: each task is answered ready
// in the end, and each captcha is paid once: the workers poll through the
// outage rather than submit again.
func TestJSONServiceOutageBehindTheWorkers(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, streamtest.WithSolveTime(300*time.Millisecond, 400*time.Millisecond))
	const n = 6
	var ids []int64
	for i := range n {
		ids = append(ids, b.create(t, alice, map[string]any{"type": "TurnstileTaskProxyless",
			"websiteURL": "https://shop.example/" + strconv.Itoa(i), "websiteKey": "0x4AAAAAAABkMYinukE8nzY"}))
	}
	em := b.env.Emulator
	require.Eventually(t, func() bool { return em.Stats().Submitted == n }, 10*time.Second, time.Millisecond)
	em.SetFaults(fakeapi.Faults{Outage: true})
	calls := em.Stats().ResCalls
	require.Eventually(t, func() bool { return em.Stats().ResCalls >= calls+2*n }, 20*time.Second, time.Millisecond)
	em.SetFaults(fakeapi.Faults{})
	for _, id := range ids {
		r := b.result(t, alice, id)
		require.Equal(t, createtask.StatusReady, r.str("status"), "%v", r)
	}
	st := em.Stats()
	require.Equal(t, n, st.Submitted)
	for key, paid := range st.PerTask {
		require.Equal(t, 1, paid, "captcha %s paid %d times", key, paid)
	}
}

// Two tasks with one callbackUrl: each callback says which task it is for
// (taskId, as CapSolver's getTaskResult reply carries it:
// docs.capsolver.com/guide/api-gettaskresult), as the classic pingback's
// id= does; otherwise a receiver cannot tell the two answers apart.
func TestJSONCallbackNamesItsTask(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	got := make(chan []byte, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- body
	}))
	t.Cleanup(srv.Close)
	want := map[int64]bool{}
	for i := range 2 {
		task := map[string]any{"type": "TurnstileTaskProxyless", "websiteURL": "https://shop.example/" + strconv.Itoa(i),
			"websiteKey": "0x4AAAAAAABkMYinukE8nzY"}
		r := b.postJSON(t, "createTask", map[string]any{"clientKey": alice.Key, "task": task, "callbackUrl": srv.URL + "/hook"})
		want[r.num(t, "taskId")] = true
	}
	ids := map[int64]bool{}
	for range 2 {
		var body []byte
		select {
		case body = <-got:
		case <-time.After(30 * time.Second):
			t.Fatal("no callback in 30 s")
		}
		var res struct {
			TaskID createtask.TaskID `json:"taskId"`
			Status string            `json:"status"`
		}
		require.NoError(t, createtask.Decode(body, &res))
		require.Equal(t, createtask.StatusReady, res.Status, string(body))
		ids[int64(res.TaskID)] = true
	}
	require.Len(t, ids, 2)
	for id := range ids {
		require.True(t, want[id], "callback for task %d, which is none of the caller's", id)
	}
}

// CapSolver takes a task's proxy as one string, "proxy", beside
// proxyType/proxyAddress/… (docs.capsolver.com/guide/api-how-to-use-proxy:
// "Use proxy parameter concatenation directly"). The gateway does not read
// that string; a task carrying it must be refused, naming it, not solved
// from another address than the caller's proxy (a token bound to the
// wrong IP), and nothing is submitted.
func TestJSONProxyAsOneStringIsNotDropped(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, streamtest.WithWorkers(0))
	task := map[string]any{"type": "ReCaptchaV2Task", "websiteURL": "https://shop.example/",
		"websiteKey": "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-", "proxy": "socks5:192.0.2.10:4780:user:pwd"}
	r := b.postJSON(t, "createTask", map[string]any{"clientKey": alice.Key, "task": task})
	require.Equal(t, createtask.CodeInvalidTaskData, r.str("errorCode"), "%v", r)
	require.Contains(t, r.str("errorDescription"), "task.proxy")
	require.NotContains(t, r.str("errorDescription"), "pwd", "the proxy's password is not echoed")
	tasks, err := b.env.Client.Tasks(t.Context(), stream.TaskFilter{})
	require.NoError(t, err)
	require.Empty(t, tasks)
}

// The queue out of reach: createTask answers ERROR_SERVICE_UNAVALIABLE
// (CapSolver's "retry later", errorId 1) at once, a task the gateway holds
// still answers from memory, and nothing is submitted behind the caller's
// back when the queue comes back.
func TestJSONQueueOutOfReach(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, streamtest.WithWorkers(0))
	id := b.create(t, alice, map[string]any{"type": "TurnstileTaskProxyless", "websiteURL": "https://shop.example/", "websiteKey": "0x4AAAAAAABkMYinukE8nzY"})
	b.env.Server.Shutdown()
	b.env.Server.WaitForShutdown()
	r := b.postJSON(t, "createTask", map[string]any{"clientKey": alice.Key, "task": map[string]any{"type": "TurnstileTaskProxyless",
		"websiteURL": "https://shop.example/2", "websiteKey": "0x4AAAAAAABkMYinukE8nzY"}})
	require.Equal(t, createtask.CodeServiceUnavailable, r.str("errorCode"), "%v", r)
	require.EqualValues(t, 1, r.num(t, "errorId"))
	r = b.postJSON(t, "getTaskResult", map[string]any{"clientKey": alice.Key, "taskId": id})
	require.Equal(t, createtask.StatusProcessing, r.str("status"), "%v", r)
	r = b.postJSON(t, "getTaskResult", map[string]any{"clientKey": alice.Key, "taskId": 1234567890123456})
	require.Equal(t, createtask.CodeServiceUnavailable, r.str("errorCode"), "an id the gateway does not hold, the queue out of reach: %v", r)
}

// A task created through in.php with a method the JSON dialect has no type
// for (cloudflare_challenge), polled by getTaskResult once solved: the
// answer must not call the paid, solved task unsolvable (which a caller
// meets by submitting, and paying, again); it says the dialect does not
// carry that answer and where it is, and res.php gives it.
func TestJSONPollOfAClassicTaskWithoutAJSONType(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	out := b.call(t, "in.php", "key", alice.Key, "method", "cloudflare_challenge", "pageurl", "https://shop.example/",
		"proxy", "user:pass@192.0.2.10:8080", "proxytype", "HTTP")
	require.True(t, strings.HasPrefix(out, "OK|"), out)
	id := strings.TrimPrefix(out, "OK|")
	require.True(t, strings.HasPrefix(b.await(t, alice, id), "OK|"))
	n, err := strconv.ParseInt(id, 10, 64)
	require.NoError(t, err)
	r := b.postJSON(t, "getTaskResult", map[string]any{"clientKey": alice.Key, "taskId": n})
	require.NotEqual(t, createtask.CodeCaptchaUnsolvable, r.str("errorCode"), "%v", r)
	require.Equal(t, createtask.CodeTaskNotSupported, r.str("errorCode"), "%v", r)
	require.Contains(t, r.str("errorDescription"), "res.php")
	require.Equal(t, 1, b.env.Emulator.Stats().Submitted)
}

// Concurrent createTask calls from several client addresses with two keys,
// the keys' submission limit off: every call gets a JSON reply (a taskId,
// or a refusal the caller retries), no id is given twice across keys and
// addresses, and the stream holds exactly the tasks answered with an id.
// 10 000 calls under CAPTCHAQ_SOAK=1, 400 otherwise.
func TestJSONConcurrentCreateTaskFromSeveralAddresses(t *testing.T) {
	t.Parallel()
	n := 400
	if os.Getenv("CAPTCHAQ_SOAK") == "1" {
		n = 10_000
	}
	b := setup(t, func(c *gateway.Config) { c.Limits = gateway.Limits{Submits: -1} }, streamtest.WithWorkers(0))
	var clients []*http.Client
	for i := 2; i <= 5; i++ {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(i))}}
		clients = append(clients, &http.Client{Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 64}})
	}
	type res struct {
		key  string
		id   int64
		code string
		err  error
	}
	out := make(chan res, n)
	var wg sync.WaitGroup
	for i := range n {
		k := []gateway.Key{alice, bob}[i%2]
		wg.Go(func() {
			body := `{"clientKey":"` + k.Key + `","task":{"type":"TurnstileTaskProxyless","websiteURL":"https://shop.example/` +
				strconv.Itoa(i) + `","websiteKey":"0x4AAAAAAABkMYinukE8nzY"}}`
			resp, err := clients[i%len(clients)].Post(b.url+"/createTask", "application/json", strings.NewReader(body))
			if err != nil {
				out <- res{err: err}
				return
			}
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			var r createtask.CreateTaskResponse
			if err := createtask.Decode(raw, &r); err != nil || resp.StatusCode != http.StatusOK {
				out <- res{err: fmt.Errorf("status %d, %q: %v", resp.StatusCode, raw, err)}
				return
			}
			out <- res{key: k.Producer, id: int64(r.TaskID), code: r.ErrorCode}
		})
	}
	wg.Wait()
	close(out)
	ids := map[string]bool{}
	codes := map[string]int{}
	for r := range out {
		require.NoError(t, r.err)
		if r.code != "" {
			codes[r.code]++
			continue
		}
		id := r.key + "-" + strconv.FormatInt(r.id, 10)
		require.False(t, ids[id], "taskId %s given twice", id)
		ids[id] = true
	}
	for code := range codes {
		require.Contains(t, []string{createtask.CodeTooMuchRequests, createtask.CodeNoSlotAvailable}, code)
	}
	require.NotEmpty(t, ids)
	t.Logf("%d calls from 4 addresses: %d taskIds, refusals %v", n, len(ids), codes)
	tasks, err := b.env.Client.Tasks(t.Context(), stream.TaskFilter{})
	require.NoError(t, err)
	require.Len(t, tasks, len(ids), "the stream holds exactly the tasks answered with an id")
	for _, ti := range tasks {
		require.True(t, ids[ti.ID], "task %s in the stream was answered with no id", ti.ID)
	}
}

// A browser's JSON call: the gateway answers the preflight of a JSON
// dialect's POST as allowed from anywhere, so the reply itself must carry
// Access-Control-Allow-Origin too, or the browser, having been told yes,
// still withholds the reply from the page (each reply, refusals included).
func TestJSONRepliesKeepThePreflightsPromise(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, streamtest.WithWorkers(0))
	req, err := http.NewRequest(http.MethodOptions, b.url+"/getBalance", nil)
	require.NoError(t, err)
	req.Header.Set("Origin", "https://shop.example")
	req.Header.Set("Access-Control-Request-Method", "POST")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, "*", resp.Header.Get("Access-Control-Allow-Origin"), "the preflight allows any origin")
	for _, body := range []string{`{"clientKey":"` + alice.Key + `"}`, `{"clientKey":"no-such-key-0000000000"}`} {
		req, err := http.NewRequest(http.MethodPost, b.url+"/getBalance", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Origin", "https://shop.example")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, "*", resp.Header.Get("Access-Control-Allow-Origin"), body)
	}
}

// CapSolver's official Python SDK reads createTask's status before it
// polls (github.com/capsolver/capsolver-python, src/capsolver/capsolver.py
// solve: `if r['status']=="ready": return r['solution']`), as CapSolver
// answers createTask with a status, "null or ready"
// (docs.capsolver.com/guide/api-createtask): a reply without the field
// raises KeyError in that SDK before the task is ever polled, though it
// was submitted (and will be paid). The reply carries status null, which
// no other client reads.
func TestJSONCreateTaskReplyHasAStatus(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, streamtest.WithWorkers(0))
	r := b.postJSON(t, "createTask", map[string]any{"clientKey": alice.Key, "task": map[string]any{"type": "ReCaptchaV2TaskProxyLess",
		"websiteURL": "https://shop.example/", "websiteKey": "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-"}})
	require.EqualValues(t, 0, r.num(t, "errorId"), "%v", r)
	status, ok := r["status"]
	require.True(t, ok, "createTask's reply has no status: %v", r)
	require.NotEqual(t, createtask.StatusReady, status)
}

// CaptchaSharp (github.com/openbullet/CaptchaSharp), whose
// CustomAntiCaptchaService the issue names, reads createTask's taskId into
// a C# int (CaptchaSharp/Models/AntiCaptcha/Responses/
// TaskCreationAntiCaptchaResponse.cs: `public int TaskId`), 32 bits, as
// Anti-Captcha's own example ids fit (taskId 7654321,
// anti-captcha.com/apidoc/methods/createTask), and polls with it
// (Requests/GetTaskResultAntiCaptchaRequest.cs: `public int TaskId`). Every
// id the gateway gives fits, and the poll with it finds its task; no id is
// given twice.
func TestJSONTaskIDFitsA32BitClient(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, streamtest.WithWorkers(0))
	seen := map[int32]bool{}
	for i := range 20 {
		r := b.postJSON(t, "createTask", map[string]any{"clientKey": alice.Key, "task": map[string]any{"type": "TurnstileTaskProxyless",
			"websiteURL": "https://shop.example/" + strconv.Itoa(i), "websiteKey": "0x4AAAAAAABkMYinukE8nzY"}})
		var reply struct {
			TaskID int32 `json:"taskId"`
		}
		require.NoError(t, json.Unmarshal([]byte(mustJSON(t, r)), &reply), "a 32-bit client cannot read %v", r["taskId"])
		require.Positive(t, reply.TaskID)
		require.False(t, seen[reply.TaskID], "taskId %d given twice", reply.TaskID)
		seen[reply.TaskID] = true
		poll := b.postJSON(t, "getTaskResult", map[string]any{"clientKey": alice.Key, "taskId": reply.TaskID})
		require.Equal(t, createtask.StatusProcessing, poll.str("status"), "%v", poll)
	}
}
