package provider_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/gateway"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/provider"
	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/streamtest"
)

// capSolver is a provider shaped as CapSolver documents its JSON dialect
// (docs.capsolver.com/guide/api-createtask, api-gettaskresult,
// api-feedback): taskId a string ("37223a89-06ed-442c-a0b8-22067b79c5b4"),
// sent back as a string; an image task (ImageToTextTask) answered by
// createTask itself, "status":"ready" with its solution ("Synchronous task
// response": "If the task type is image recognition … the task result
// will be returned directly"); a token task answered by getTaskResult.
// Every createTask is billed at price.
type capSolver struct {
	srv   *httptest.Server
	price float64

	mu        sync.Mutex
	created   int
	sync      map[string]bool // taskId → answered by createTask
	syncPolls int             // getTaskResult asked about a task createTask answered
	badIDs    int             // getTaskResult or feedbackTask sent a taskId that is no string CapSolver gave
	feedback  map[string]bool // taskId → invalid, by feedbackTask
}

func startCapSolver(t *testing.T, price float64) *capSolver {
	t.Helper()
	p := &capSolver{price: price, sync: map[string]bool{}, feedback: map[string]bool{}}
	// known reads a request's taskId: a string CapSolver gave.
	known := func(raw json.RawMessage) (string, bool) {
		var id string
		if json.Unmarshal(raw, &id) != nil {
			return "", false
		}
		_, ok := p.sync[id]
		return id, ok
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/createTask", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Task struct {
				Type string `json:"type"`
			} `json:"task"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		p.mu.Lock()
		p.created++
		id := fmt.Sprintf("37223a89-06ed-442c-a0b8-%012d", p.created)
		image := req.Task.Type == "ImageToTextTask"
		p.sync[id] = image
		p.mu.Unlock()
		if image {
			fmt.Fprintf(w, `{"errorId":0,"errorCode":"","errorDescription":"","status":"ready","solution":{"text":"44795sds"},"taskId":%q}`, id)
			return
		}
		fmt.Fprintf(w, `{"errorId":0,"errorCode":"","errorDescription":"","taskId":%q}`, id)
	})
	mux.HandleFunc("/getTaskResult", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			TaskID json.RawMessage `json:"taskId"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		p.mu.Lock()
		id, ok := known(req.TaskID)
		image := p.sync[id]
		if !ok {
			p.badIDs++
		}
		if image {
			p.syncPolls++
		}
		p.mu.Unlock()
		if !ok || image {
			// Not CapSolver's words: this test's own refusal of a poll
			// it should not get.
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"errorId":1,"errorCode":"ERROR_TEST_NO_SUCH_POLL","errorDescription":"not a task to poll"}`)
			return
		}
		fmt.Fprintf(w, `{"errorId":0,"taskId":%q,"status":"ready","solution":{"gRecaptchaResponse":"03AGdBq2-%s","userAgent":"Mozilla/5.0"}}`, id, id)
	})
	mux.HandleFunc("/feedbackTask", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			TaskID json.RawMessage `json:"taskId"`
			Result struct {
				Invalid bool `json:"invalid"`
			} `json:"result"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		p.mu.Lock()
		id, ok := known(req.TaskID)
		if ok {
			p.feedback[id] = req.Result.Invalid
		} else {
			p.badIDs++
		}
		p.mu.Unlock()
		if !ok {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"errorId":1,"errorCode":"ERROR_TEST_NO_SUCH_POLL","errorDescription":"not a task"}`)
			return
		}
		fmt.Fprint(w, `{"errorId":0,"message":"ok"}`)
	})
	p.srv = httptest.NewServer(mux)
	t.Cleanup(p.srv.Close)
	return p
}

// at is an HTTP client that sends every request to srv, whatever host its
// URL names: a client's base URL can then be a provider's own host, by
// which it knows the provider's ways (reports, refunds).
func at(srv *httptest.Server) *http.Client {
	addr := srv.Listener.Addr().String()
	var d net.Dialer
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return d.DialContext(ctx, network, addr)
	}}}
}

func (p *capSolver) counts() (created, syncPolls, badIDs int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.created, p.syncPolls, p.badIDs
}

// capSolverWorker is a worker whose one provider is a capSolver, at
// CapSolver's own host.
func capSolverWorker(t *testing.T) (*capSolver, *provider.Set, *streamtest.Env) {
	t.Helper()
	p := startCapSolver(t, 0.0008)
	const base = "http://api.capsolver.com"
	c, err := provider.NewTasksClient(provider.TasksConfig{BaseURL: base, APIKey: "a-key-0123456789", Scale: 0.001, HTTPClient: at(p.srv)})
	require.NoError(t, err)
	set, err := provider.New(provider.Config{Members: []provider.Member{{Client: c, Entry: provider.Entry{Name: "capsolver",
		Dialect: provider.Tasks, BaseURL: base, KeyEnv: "K", Methods: []string{"userrecaptcha", "base64"},
		Billing: provider.Billing{Per1000: map[string]float64{"userrecaptcha": 0.8, "base64": 0.8}}, Role: provider.Primary}}}})
	require.NoError(t, err)
	env := streamtest.Start(t, streamtest.WithWorkers(0))
	env.StartWorker(stream.WorkerConfig{Solver: set, Threads: 4})
	return p, set, env
}

// TestBreakCapSolverTaskIDs: a tasks provider that is CapSolver, as its
// docs show it: its string taskIds are polled and reported back as
// given, and an image task answered by createTask itself is taken from
// that reply. Each task is created (paid) once and solved, the outcome's
// cost is the price, stats' spend equals the bill, and a bad verdict
// reaches CapSolver's feedbackTask with the task's own id.
//
// Failed before: createTask's string taskId was read as a reply not
// understood (the task maybe paid), so every attempt paid CapSolver for a
// task it never polled, until the task died; the image's solution in
// createTask's reply was dropped.
func TestBreakCapSolverTaskIDs(t *testing.T) {
	t.Parallel()
	p, set, env := capSolverWorker(t)
	t.Cleanup(func() {
		created, syncPolls, badIDs := p.counts()
		t.Logf("CapSolver created %d tasks (%.4f billed) for 5; getTaskResult asked of a task createTask answered: %d; ids sent back wrong: %d",
			created, float64(created)*p.price, syncPolls, badIDs)
	})

	ids := submit(t, env.Client, "crawler", 1, 3)
	for i := range 2 {
		r, err := env.Client.Submit(t.Context(), stream.Task{ID: fmt.Sprintf("image-%d", i), Method: "base64",
			Params: stream.Params{"body": "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg" + fmt.Sprint(i) + "="}})
		require.NoError(t, err)
		ids = append(ids, r.ID)
	}
	outs := waitAll(t, env.Client, ids)
	created, syncPolls, badIDs := p.counts()
	for _, o := range outs {
		require.Equal(t, stream.StatusSolved, o.Status, "task %s: %s %s", o.ID, o.Error, o.Detail)
		require.Equal(t, "capsolver", o.Provider)
		require.Equal(t, provider.CostPrice, o.CostBasis)
		require.InDelta(t, p.price, o.Cost, 1e-12)
	}
	require.Equal(t, len(ids), created, "each task created, and paid, once")
	require.Zero(t, syncPolls, "an answer createTask gave is not asked for again")
	require.Zero(t, badIDs, "every taskId sent back as CapSolver gave it")
	st, err := env.Client.Stats(t.Context(), 0)
	require.NoError(t, err)
	spent := 0.0
	for _, r := range st.Spend {
		spent += r.Cost
	}
	require.Equal(t, cents(float64(created)*p.price*100), cents(spent*100), "stats' spend is the bill (in hundredths of a cent)")

	require.NoError(t, set.ReportOn(t.Context(), "capsolver", "userrecaptcha", outs[0].CaptchaID, false))
	p.mu.Lock()
	invalid, reported := p.feedback[outs[0].CaptchaID]
	n := len(p.feedback)
	p.mu.Unlock()
	require.True(t, reported && invalid, "feedbackTask got the bad verdict on task %s", outs[0].CaptchaID)
	require.Equal(t, 1, n, "one report, to that task")
}

// TestBreakCapSolverReportThroughTheGateway: a bad verdict on a task
// CapSolver solved, asked of the workers' report service as the gateway
// asks it (gateway.ServeReports), reaches CapSolver's feedbackTask with
// the task's string taskId, once. Failed before: the report service
// refused every captcha id but digits ("captcha_id: digits required").
func TestBreakCapSolverReportThroughTheGateway(t *testing.T) {
	t.Parallel()
	p, set, env := capSolverWorker(t)
	stop, err := gateway.ServeReports(t.Context(), env.Connect(), env.Topology, set, nil)
	require.NoError(t, err)
	t.Cleanup(stop)
	o := waitAll(t, env.Client, submit(t, env.Client, "crawler", 1, 1))[0]
	require.Equal(t, stream.StatusSolved, o.Status, "%s %s", o.Error, o.Detail)

	req, err := json.Marshal(map[string]any{"task": o.ID, "captcha_id": o.CaptchaID, "good": false})
	require.NoError(t, err)
	msg, err := env.Connect().Request(gateway.ReportSubject, req, 10*time.Second)
	require.NoError(t, err)
	require.Contains(t, string(msg.Data), "OK_REPORT_RECORDED")
	p.mu.Lock()
	invalid, reported := p.feedback[o.CaptchaID]
	n := len(p.feedback)
	p.mu.Unlock()
	require.True(t, reported && invalid, "feedbackTask got the bad verdict on task %s", o.CaptchaID)
	require.Equal(t, 1, n)
	created, _, _ := p.counts()
	require.Equal(t, 1, created, "one task paid, none for the report")
}

// TestBreakHugeTaskID: a taskId past 64 bits (no provider documents one,
// but the dialect's taskId is only a number) is polled back as the same
// number, and the task created once is solved. Failed before: the reply
// was read as not understood (maybe paid), and each attempt paid again.
func TestBreakHugeTaskID(t *testing.T) {
	t.Parallel()
	const id = "123456789012345678901234567890"
	var mu sync.Mutex
	created, wrong := 0, 0
	mux := http.NewServeMux()
	mux.HandleFunc("/createTask", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		created++
		mu.Unlock()
		fmt.Fprintf(w, `{"errorId":0,"taskId":%s}`, id)
	})
	mux.HandleFunc("/getTaskResult", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			TaskID json.RawMessage `json:"taskId"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		if string(req.TaskID) != id {
			mu.Lock()
			wrong++
			mu.Unlock()
			fmt.Fprint(w, `{"errorId":16,"errorCode":"ERROR_NO_SUCH_CAPCHA_ID","errorDescription":"no such task"}`)
			return
		}
		fmt.Fprint(w, `{"errorId":0,"status":"ready","solution":{"gRecaptchaResponse":"03AGdBq2-huge"}}`)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c, err := provider.NewTasksClient(provider.TasksConfig{BaseURL: srv.URL, APIKey: "a-key-0123456789", Scale: 0.001})
	require.NoError(t, err)
	ans, err := c.Solve(t.Context(), solver.Request{Method: "userrecaptcha", Params: taskParams(1)})
	require.NoError(t, err)
	require.Equal(t, id, ans.CaptchaID)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 1, created, "created, and paid, once")
	require.Zero(t, wrong, "polled with the id as given")
}
