package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/gateway"
	"github.com/captchaq/captchaq/internal/dialect/createtask"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/streamtest"
)

// Bodies of every wrong type and size, unknown task types and missing
// fields are each answered with the dialect's code and a description
// naming what is wrong, status 200 as the services answer; nothing is
// submitted, and the gateway goes on serving.
func TestJSONRefusesBadBodies(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, streamtest.WithWorkers(0))
	key := `"clientKey":"` + alice.Key + `"`
	turnstileTask := `{"type":"TurnstileTaskProxyless","websiteURL":"https://shop.example/","websiteKey":"0x4AAAAAAABkMYinukE8nzY"}`
	cases := []struct {
		path, body, code, says string
	}{
		{"createTask", ``, "ERROR_KEY_DOES_NOT_EXIST", "not JSON"},
		{"createTask", `not json`, "ERROR_KEY_DOES_NOT_EXIST", "not JSON"},
		{"createTask", `[1,2,3]`, "ERROR_KEY_DOES_NOT_EXIST", "want a JSON object"},
		{"createTask", `"a string"`, "ERROR_KEY_DOES_NOT_EXIST", "want a JSON object"},
		{"createTask", `null`, "ERROR_KEY_DOES_NOT_EXIST", "no such gateway key"},
		{"createTask", `{"clientKey":12345}`, "ERROR_KEY_DOES_NOT_EXIST", "clientKey: want a string"},
		{"createTask", `{"clientKey":{"a":1}}`, "ERROR_KEY_DOES_NOT_EXIST", "clientKey: want a string"},
		{"createTask", `{` + key + `}`, "ERROR_TASK_ABSENT", "task: required"},
		{"createTask", `{` + key + `,"task":null}`, "ERROR_TASK_ABSENT", "task: required"},
		{"createTask", `{` + key + `,"task":"RecaptchaV2TaskProxyless"}`, "ERROR_INVALID_TASK_DATA", "want a JSON object"},
		{"createTask", `{` + key + `,"task":[]}`, "ERROR_INVALID_TASK_DATA", "want a JSON object"},
		{"createTask", `{` + key + `,"task":{}}`, "ERROR_TASK_NOT_SUPPORTED", "task.type: required"},
		{"createTask", `{` + key + `,"task":{"type":42}}`, "ERROR_INVALID_TASK_DATA", "type: want a string"},
		{"createTask", `{` + key + `,"task":{"type":"FunCaptchaTaskProxyless","websiteURL":"https://shop.example/"}}`, "ERROR_TASK_NOT_SUPPORTED", "FunCaptchaTaskProxyless"},
		{"createTask", `{` + key + `,"task":{"type":"` + strings.Repeat("X", 5000) + `"}}`, "ERROR_TASK_NOT_SUPPORTED", "not a type captchaq serves"},
		{"createTask", `{` + key + `,"task":{"type":"TurnstileTaskProxyless","websiteKey":"0x4AAAAAAABkMYinukE8nzY"}}`, "ERROR_INVALID_TASK_DATA", "task.websiteURL: required"},
		{"createTask", `{` + key + `,"task":{"type":"TurnstileTaskProxyless","websiteURL":7,"websiteKey":"k"}}`, "ERROR_INVALID_TASK_DATA", "websiteURL: want a string"},
		{"createTask", `{` + key + `,"task":{"type":"TurnstileTaskProxyless","websiteURL":"ftp://x/","websiteKey":"k"}}`, "ERROR_INVALID_TASK_DATA", "task.websiteURL: must be an absolute http or https URL"},
		{"createTask", `{` + key + `,"task":{"type":"GeeTestTaskProxyless","websiteURL":"https://shop.example/","gt":"022397c99c9f646f6477822485f30404"}}`, "ERROR_INVALID_TASK_DATA", "task.challenge: required"},
		{"createTask", `{` + key + `,"task":{"type":"GeeTestTaskProxyless","websiteURL":"https://shop.example/","gt":"g","version":5}}`, "ERROR_INVALID_TASK_DATA", "want 3 or 4"},
		{"createTask", `{` + key + `,"task":{"type":"RecaptchaV2TaskProxyless","websiteURL":"https://shop.example/","websiteKey":"k","isInvisible":"maybe"}}`, "ERROR_INVALID_TASK_DATA", "isInvisible: want true or false"},
		{"createTask", `{` + key + `,"task":{"type":"RecaptchaV2Task","websiteURL":"https://shop.example/","websiteKey":"k","proxyType":"http","proxyAddress":"1.2.3.4","proxyPort":99999}}`, "ERROR_INVALID_TASK_DATA", "proxyPort"},
		{"createTask", `{` + key + `,"task":{"type":"ImageToTextTask","body":"!!!not base64!!!"}}`, "ERROR_IMAGE_TYPE_NOT_SUPPORTED", "task.body: must be base64-encoded"},
		{"createTask", `{` + key + `,"task":{"type":"ImageToTextTask","body":""}}`, "ERROR_INVALID_TASK_DATA", "task.body: required"},
		{"createTask", `{` + key + `,"task":` + turnstileTask + `,"callbackUrl":"javascript:alert(1)"}`, "ERROR_INVALID_TASK_DATA", "callbackUrl: want an http or https URL"},
		{"createTask", `{` + key + `,"task":` + turnstileTask + `,"callbackUrl":7}`, "ERROR_INVALID_TASK_DATA", "callbackUrl: want a string"},
		{"createTask", `{` + key + `,"task":` + turnstileTask + `} trailing`, "ERROR_KEY_DOES_NOT_EXIST", "not JSON"},
		{"getTaskResult", `{` + key + `}`, "ERROR_NO_SUCH_CAPCHA_ID", "taskId: required"},
		{"getTaskResult", `{` + key + `,"taskId":"abc"}`, "ERROR_NO_SUCH_CAPCHA_ID", "taskId: want a whole number"},
		{"getTaskResult", `{` + key + `,"taskId":-5}`, "ERROR_NO_SUCH_CAPCHA_ID", "taskId: want a whole number"},
		{"getTaskResult", `{` + key + `,"taskId":1.5}`, "ERROR_NO_SUCH_CAPCHA_ID", "taskId: want a whole number"},
		{"getTaskResult", `{` + key + `,"taskId":99999999999999999999999}`, "ERROR_NO_SUCH_CAPCHA_ID", "taskId: want a whole number"},
		{"getTaskResult", `{` + key + `,"taskId":1234567890123456}`, "ERROR_NO_SUCH_CAPCHA_ID", "no task of this key"},
		{"getTaskResult", `{` + key + `,"taskId":"1234567890123456"}`, "ERROR_NO_SUCH_CAPCHA_ID", "no task of this key"},
		{"feedbackTask", `{` + key + `,"taskId":1234567890123456}`, "ERROR_INVALID_TASK_DATA", "result: required"},
		{"reportIncorrectRecaptcha", `{` + key + `,"taskId":1234567890123456}`, "ERROR_NO_SUCH_CAPCHA_ID", ""},
	}
	for _, c := range cases {
		r := b.postJSON(t, c.path, c.body)
		require.Equal(t, c.code, r.str("errorCode"), "%s %.80s: %v", c.path, c.body, r)
		require.EqualValues(t, createtask.ErrorID(c.code), r.num(t, "errorId"), "%s %.80s", c.path, c.body)
		require.Contains(t, r.str("errorDescription"), c.says, "%s %.80s", c.path, c.body)
	}
	// A body over the bound: an image too big, the rest of it unread.
	big := `{` + key + `,"task":{"type":"ImageToTextTask","body":"` + strings.Repeat("A", 3*solver.MaxImageSize) + `"}}`
	r := b.postJSON(t, "createTask", big)
	require.Equal(t, "ERROR_TOO_BIG_CAPTCHA_FILESIZE", r.str("errorCode"))
	// Not a POST: refused by status, as a path the dialect does not take.
	resp, err := http.Get(b.url + "/createTask?clientKey=" + alice.Key)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	resp, err = http.Post(b.url+"/getQueueStats", "application/json", strings.NewReader(`{}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.Zero(t, b.env.Emulator.Stats().Submitted)
	// Still serving.
	b.create(t, alice, map[string]any{"type": "TurnstileTaskProxyless", "websiteURL": "https://shop.example/", "websiteKey": "0x4AAAAAAABkMYinukE8nzY"})
}

// A taskId of another key is unknown to the caller, on getTaskResult and
// on the report calls, as res.php answers an id of someone else's; the
// other key's task is not reported.
func TestJSONTaskIDOfAnotherKey(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	reportsServed(t, b.env)
	id := b.create(t, alice, map[string]any{"type": "RecaptchaV2TaskProxyless", "websiteURL": "https://shop.example/", "websiteKey": "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-"})
	require.Equal(t, createtask.StatusReady, b.result(t, alice, id).str("status"))
	for _, path := range []string{"getTaskResult", "reportIncorrectRecaptcha", "reportCorrectRecaptcha", "reportIncorrect"} {
		r := b.postJSON(t, path, map[string]any{"clientKey": bob.Key, "taskId": id})
		require.Equal(t, "ERROR_NO_SUCH_CAPCHA_ID", r.str("errorCode"), path)
		require.EqualValues(t, 16, r.num(t, "errorId"), path)
	}
	r := b.postJSON(t, "feedbackTask", map[string]any{"clientKey": bob.Key, "taskId": id, "result": map[string]bool{"invalid": true}})
	require.Equal(t, "ERROR_NO_SUCH_CAPCHA_ID", r.str("errorCode"))
	st := b.env.Emulator.Stats()
	require.Zero(t, st.ReportsGood+st.ReportsBad, "bob reported nothing of alice's")
	// The id answers through res.php as well, for its own key only.
	require.Contains(t, b.call(t, "res.php", "key", alice.Key, "action", "get", "id", jsonID(id)), "OK|")
	require.Equal(t, "ERROR_WRONG_CAPTCHA_ID", b.call(t, "res.php", "key", bob.Key, "action", "get", "id", jsonID(id)))
}

func jsonID(id int64) string { b, _ := json.Marshal(id); return string(b) }

// The report calls of every provider reach the service through a worker:
// Anti-Captcha's and CapMonster's reportIncorrect*/reportCorrectRecaptcha,
// 2captcha's reportIncorrect/reportCorrect, CapSolver's feedbackTask, each
// answered as its provider answers a report taken; a second report of the
// same task is the service's refusal.
func TestJSONReports(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	reportsServed(t, b.env)
	task := map[string]any{"type": "RecaptchaV2TaskProxyless", "websiteURL": "https://shop.example/", "websiteKey": "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-"}
	cases := []struct {
		path string
		body map[string]any
		good bool
	}{
		{"reportIncorrectRecaptcha", nil, false},
		{"reportCorrectRecaptcha", nil, true},
		{"reportIncorrectImageCaptcha", nil, false},
		{"reportIncorrectTokenCaptcha", nil, false},
		{"reportIncorrect", nil, false},
		{"reportCorrect", nil, true},
		{"feedbackTask", map[string]any{"result": map[string]any{"invalid": true, "code": 1001, "message": "invalid token"}}, false},
		{"feedbackTask", map[string]any{"result": map[string]any{"invalid": false}}, true},
	}
	good, bad := 0, 0
	for _, c := range cases {
		id := b.create(t, alice, task)
		require.Equal(t, createtask.StatusReady, b.result(t, alice, id).str("status"))
		body := map[string]any{"clientKey": alice.Key, "taskId": id}
		for k, v := range c.body {
			body[k] = v
		}
		if c.path == "feedbackTask" {
			body["taskId"] = jsonID(id) // CapSolver's taskId is a string
		}
		r := b.postJSON(t, c.path, body)
		require.EqualValues(t, 0, r.num(t, "errorId"), "%s: %v", c.path, r)
		if c.path == "feedbackTask" {
			require.NotEmpty(t, r.str("message"))
		} else {
			require.Equal(t, "success", r.str("status"), c.path)
		}
		if c.good {
			good++
		} else {
			bad++
		}
		st := b.env.Emulator.Stats()
		require.Equal(t, []int{good, bad}, []int{st.ReportsGood, st.ReportsBad}, c.path)
		again := b.postJSON(t, c.path, body)
		require.Equal(t, "ERROR_REPORT_NOT_RECORDED", again.str("errorCode"), "%s twice: %v", c.path, again)
	}
	require.Equal(t, len(cases), b.env.Emulator.Stats().Submitted)
}

// callbackUrl is held to the classic pingback's address rules (loopback
// refused unless allowed, nothing submitted), and an allowed one gets a
// POST of what getTaskResult answers once the task is done.
func TestJSONCallbackURL(t *testing.T) {
	t.Parallel()
	strict := setup(t, func(c *gateway.Config) { c.Pingback = gateway.Pingback{} }, streamtest.WithWorkers(0))
	task := map[string]any{"type": "TurnstileTaskProxyless", "websiteURL": "https://shop.example/", "websiteKey": "0x4AAAAAAABkMYinukE8nzY"}
	for _, hook := range []string{"http://127.0.0.1:9/hook", "http://10.1.2.3/hook", "http://[::1]/hook", "http://169.254.169.254/latest"} {
		r := strict.postJSON(t, "createTask", map[string]any{"clientKey": alice.Key, "task": task, "callbackUrl": hook})
		require.Equal(t, "ERROR_INVALID_TASK_DATA", r.str("errorCode"), hook)
		require.Contains(t, r.str("errorDescription"), "callbackUrl", hook)
	}
	require.Zero(t, strict.env.Emulator.Stats().Submitted)

	b := setup(t, nil)
	got := make(chan []byte, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "want a JSON POST", http.StatusBadRequest)
			return
		}
		got <- body
	}))
	t.Cleanup(srv.Close)
	r := b.postJSON(t, "createTask", map[string]any{"clientKey": alice.Key, "task": task, "callbackUrl": srv.URL + "/hook"})
	require.EqualValues(t, 0, r.num(t, "errorId"), "%v", r)
	var body []byte
	select {
	case body = <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("no callback in 30 s")
	}
	var res createtask.TaskResult
	require.NoError(t, createtask.Decode(body, &res))
	require.Equal(t, createtask.StatusReady, res.Status, string(body))
	polled := b.postJSON(t, "getTaskResult", map[string]any{"clientKey": alice.Key, "taskId": r.num(t, "taskId")})
	require.JSONEq(t, string(res.Solution), mustJSON(t, polled["solution"]), "the callback carries what a poll answers")
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// Many concurrent createTask calls from one address, with the key's
// submission limit off: each gets a JSON reply, a taskId or the code of a
// refusal the caller retries (too many requests from the address at once),
// no id is given twice, and the stream holds exactly the tasks answered
// with an id. 10 000 calls under CAPTCHAQ_SOAK=1, 400 otherwise.
func TestJSONConcurrentCreateTask(t *testing.T) {
	t.Parallel()
	n := 400
	if os.Getenv("CAPTCHAQ_SOAK") == "1" {
		n = 10_000
	}
	b := setup(t, func(c *gateway.Config) { c.Limits = gateway.Limits{Submits: -1} }, streamtest.WithWorkers(0))
	body := `{"clientKey":"` + alice.Key + `","task":{"type":"TurnstileTaskProxyless","websiteURL":"https://shop.example/","websiteKey":"0x4AAAAAAABkMYinukE8nzY"}}`
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	type res struct {
		id   int64
		code string
		err  error
	}
	out := make(chan res, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			resp, err := client.Post(b.url+"/createTask", "application/json", strings.NewReader(body))
			if err != nil {
				out <- res{err: err}
				return
			}
			defer resp.Body.Close()
			var r createtask.CreateTaskResponse
			raw, _ := io.ReadAll(resp.Body)
			if err := createtask.Decode(raw, &r); err != nil || resp.StatusCode != http.StatusOK {
				out <- res{err: fmt.Errorf("status %d, %q: %v", resp.StatusCode, raw, err)}
				return
			}
			out <- res{id: int64(r.TaskID), code: r.ErrorCode}
		})
	}
	wg.Wait()
	close(out)
	ids := map[int64]bool{}
	codes := map[string]int{}
	for r := range out {
		require.NoError(t, r.err)
		if r.code != "" {
			codes[r.code]++
			continue
		}
		require.False(t, ids[r.id], "taskId %d given twice", r.id)
		ids[r.id] = true
	}
	for code := range codes {
		require.Contains(t, []string{createtask.CodeTooMuchRequests, createtask.CodeNoSlotAvailable}, code)
	}
	require.NotEmpty(t, ids)
	t.Logf("%d calls: %d taskIds, refusals %v", n, len(ids), codes)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tasks, err := b.env.Client.Tasks(ctx, stream.TaskFilter{})
	require.NoError(t, err)
	require.Len(t, tasks, len(ids), "the stream holds exactly the tasks answered with an id")
}

// Malformed JSON bodies name no key, so they guess none: they do not count
// toward the address's ban for unknown keys, and the address's valid key
// is served after them (before, 4 malformed bodies banned it).
func TestJSONMalformedBodiesDoNotBanTheAddress(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *gateway.Config) { c.Admission = gateway.Admission{BadKeys: 3} }, streamtest.WithWorkers(0))
	for _, body := range []string{`not json`, `{"clientKey":`, `[1]`, `{"clientKey":"` + alice.Key + `"} trailing`, `"x"`} {
		require.Equal(t, "ERROR_KEY_DOES_NOT_EXIST", b.postJSON(t, "getBalance", body).str("errorCode"), body)
	}
	r := b.postJSON(t, "getBalance", `{"clientKey":"`+alice.Key+`"}`)
	require.EqualValues(t, 0, r.num(t, "errorId"), "the address's valid key is served: %v", r)
}
