package provider_test

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/provider"
	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/streamtest"
)

// costlyProvider is a provider of the JSON task dialect that bills every
// createTask at price and answers getTaskResult ready at once, with the
// cost field (raw JSON) that costs gives the task's page, or none.
type costlyProvider struct {
	srv   *httptest.Server
	price float64

	mu      sync.Mutex
	created int
	pages   map[int64]string // taskId → websiteURL
	// frontFails makes a front answer 502 to every createTask after the
	// provider created (and billed) the task.
	frontFails bool
}

func startCostlyProvider(t *testing.T, price float64, costs map[string]string) *costlyProvider {
	t.Helper()
	p := &costlyProvider{price: price, pages: map[int64]string{}}
	mux := http.NewServeMux()
	// The shapes: Anti-Captcha's createTask and getTaskResult
	// (anti-captcha.com/apidoc/methods/createTask, …/getTaskResult: errorId,
	// taskId, status "ready", solution.gRecaptchaResponse, cost as a string).
	mux.HandleFunc("/createTask", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Task struct {
				WebsiteURL string `json:"websiteURL"`
			} `json:"task"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		p.mu.Lock()
		p.created++
		id := int64(1000 + p.created)
		p.pages[id] = req.Task.WebsiteURL
		front := p.frontFails
		p.mu.Unlock()
		if front {
			http.Error(w, "<html>502 Bad Gateway</html>", http.StatusBadGateway)
			return
		}
		fmt.Fprintf(w, `{"errorId":0,"taskId":%d}`, id)
	})
	mux.HandleFunc("/getTaskResult", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			TaskID int64 `json:"taskId"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		p.mu.Lock()
		page := p.pages[req.TaskID]
		p.mu.Unlock()
		cost := ""
		if c, ok := costs[page]; ok {
			cost = `,"cost":` + c
		}
		fmt.Fprintf(w, `{"errorId":0,"status":"ready","solution":{"gRecaptchaResponse":"03AGdBq2%d"}%s}`, req.TaskID, cost)
	})
	p.srv = httptest.NewServer(mux)
	t.Cleanup(p.srv.Close)
	return p
}

// bill is what the provider charged: each task it created at its price.
func (p *costlyProvider) bill() (int, float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.created, float64(p.created) * p.price
}

// TestBreakReportedCost: a JSON provider reports costs a service should
// not ("NaN", "Infinity", a negative one, one past float64, one that is no
// number) beside a good answer: each task is still solved, with the
// answer it paid for, at a finite cost of 0 or more (the stated price
// where the report is no cost), and stats' spend is a number.
func TestBreakReportedCost(t *testing.T) {
	t.Parallel()
	pages := map[int]string{1: `"NaN"`, 2: `"Infinity"`, 3: `"-0.002"`, 4: `"1e400"`, 5: `"abc"`, 6: `"0.002"`, 7: `0.002`}
	costs := map[string]string{}
	for i, c := range pages {
		costs[taskParams(i)["pageurl"]] = c
	}
	p := startCostlyProvider(t, 0.002, costs)
	t.Cleanup(func() { n, b := p.bill(); t.Logf("the provider created %d tasks, billed %.4f", n, b) })
	c, err := provider.NewTasksClient(provider.TasksConfig{BaseURL: p.srv.URL, APIKey: "a-key-0123456789", Scale: 0.001})
	require.NoError(t, err)
	billing := provider.Billing{Per1000: map[string]float64{"userrecaptcha": 2}}
	set, err := provider.New(provider.Config{Members: []provider.Member{{Client: c, Entry: provider.Entry{Name: "json",
		Dialect: provider.Tasks, BaseURL: p.srv.URL, KeyEnv: "K", Methods: []string{"userrecaptcha"}, Billing: billing,
		Role: provider.Primary}}}})
	require.NoError(t, err)
	env := streamtest.Start(t, streamtest.WithWorkers(0))
	env.StartWorker(stream.WorkerConfig{Solver: set, Threads: 4})

	var ids []string
	for i := 1; i <= len(pages); i++ {
		ids = append(ids, submit(t, env.Client, "crawler", i, 1)...)
	}
	for i, o := range waitAll(t, env.Client, ids) {
		cost := pages[i+1]
		require.Equal(t, stream.StatusSolved, o.Status, "cost %s: %s %s", cost, o.Error, o.Detail)
		require.False(t, math.IsNaN(o.Cost) || math.IsInf(o.Cost, 0) || o.Cost < 0, "cost %s: outcome cost %v", cost, o.Cost)
		if v, err := strconv.ParseFloat(strings.Trim(cost, `"`), 64); err == nil && v > 0 && !math.IsInf(v, 0) {
			require.Equal(t, provider.CostReported, o.CostBasis, "cost %s", cost)
			require.InDelta(t, v, o.Cost, 1e-12)
		} else {
			require.Equal(t, provider.CostPrice, o.CostBasis, "cost %s: the stated price stands", cost)
			require.InDelta(t, 0.002, o.Cost, 1e-12)
		}
	}
	created, bill := p.bill()
	require.Equal(t, len(pages), created, "one task created per task")
	st, err := env.Client.Stats(t.Context(), 0)
	require.NoError(t, err)
	spent := 0.0
	for _, r := range st.Spend {
		spent += r.Cost
	}
	t.Logf("bill %d tasks %.4f, stats %.4f", created, bill, spent)
	require.Equal(t, cents(bill), cents(spent), "stats' spend is the bill")
}

// TestBreakCreateTaskBehindAFailingFront: a JSON primary behind a front
// that answers 502 after the provider created (and billed) the task. The
// classic client takes such a 5xx as a reply lost, the captcha maybe paid
// (lostInPHP5xx, after the official 2captcha client, which takes any
// status but 200 as a network failure); the tasks client must too: the
// submission is not sent on to the fallback, which would be paid for the
// same task. Once every call fails (an outage), the next tasks go to the
// fallback.
func TestBreakCreateTaskBehindAFailingFront(t *testing.T) {
	t.Parallel()
	p := startCostlyProvider(t, 0.002, nil)
	p.frontFails = true
	c, err := provider.NewTasksClient(provider.TasksConfig{BaseURL: p.srv.URL, APIKey: "a-key-0123456789", Scale: 0.001})
	require.NoError(t, err)
	primary := provider.Member{Client: c, Entry: provider.Entry{Name: "json", Dialect: provider.Tasks, BaseURL: p.srv.URL,
		KeyEnv: "K", Methods: []string{"userrecaptcha"}, Billing: provider.Billing{Per1000: map[string]float64{"userrecaptcha": 2}},
		Role: provider.Primary}}
	spare := perSolve(t, "spare", provider.Fallback, 2, 5*time.Millisecond)
	set, err := provider.New(provider.Config{Members: []provider.Member{primary, spare.member}})
	require.NoError(t, err)

	_, err = set.Solve(t.Context(), solver.Request{Method: "userrecaptcha", Params: taskParams(1)})
	created, _ := p.bill()
	t.Logf("first task: %v; the provider created %d, the fallback accepted %d", err, created, spare.api.Stats().Submitted)
	require.True(t, solver.MayBePaid(err), "the 502 after createTask may have been paid: %v", err)
	require.Zero(t, spare.api.Stats().Submitted, "not sent on to the fallback: paid twice")

	ans, err := set.Solve(t.Context(), solver.Request{Method: "userrecaptcha", Params: taskParams(2)})
	require.NoError(t, err, "the primary failing every call is out: the next task goes to the fallback")
	require.Equal(t, "spare", ans.Provider)
}
