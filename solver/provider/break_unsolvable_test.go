package provider_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/provider"
	"github.com/captchaq/captchaq/stream/streamtest"
)

// unsolvingAntiCaptcha is a provider shaped as Anti-Captcha documents its
// JSON dialect, whose every task ends ERROR_CAPTCHA_UNSOLVABLE (errorId
// 12) and is charged all the same: "Captcha could not be solved by 5
// different workers", customers are charged for it, as the workers must
// be paid for their time (anti-captcha.com/apidoc/errors, identifier 12).
type unsolvingAntiCaptcha struct {
	srv     *httptest.Server
	mu      sync.Mutex
	created int
}

func startUnsolvingAntiCaptcha(t *testing.T) *unsolvingAntiCaptcha {
	t.Helper()
	p := &unsolvingAntiCaptcha{}
	mux := http.NewServeMux()
	mux.HandleFunc("/createTask", func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.created++
		id := 7654320 + p.created
		p.mu.Unlock()
		fmt.Fprintf(w, `{"errorId":0,"taskId":%d}`, id)
	})
	mux.HandleFunc("/getTaskResult", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"errorId":12,"errorCode":"ERROR_CAPTCHA_UNSOLVABLE","errorDescription":"Captcha could not be solved by 5 different workers"}`)
	})
	p.srv = httptest.NewServer(mux)
	t.Cleanup(p.srv.Close)
	return p
}

func (p *unsolvingAntiCaptcha) billed() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.created
}

// TestBreakUnsolvableChargedCountsAgainstTheBudget: on Anti-Captcha an
// unsolvable captcha is charged, not refunded, so its price stays in the
// day's spend: with a cap of 2.5 solves' price, two unsolvables are sent
// and paid, and the third task is refused BUDGET_EXCEEDED, unsent. The
// bill stays within the cap.
//
// Failed before: every ERROR_CAPTCHA_UNSOLVABLE gave its price back
// (2captcha's rule, applied to every provider): the ledger said nothing
// was spent while Anti-Captcha billed each, and the cap never held.
func TestBreakUnsolvableChargedCountsAgainstTheBudget(t *testing.T) {
	t.Parallel()
	p := startUnsolvingAntiCaptcha(t)
	const base = "http://api.anti-captcha.com"
	c, err := provider.NewTasksClient(provider.TasksConfig{BaseURL: base, APIKey: "a-key-0123456789", Scale: 0.001, HTTPClient: at(p.srv)})
	require.NoError(t, err)
	per1000 := 2.0
	env := streamtest.Start(t, streamtest.WithWorkers(0))
	set, err := provider.New(provider.Config{Ledger: ledger(t, env), Members: []provider.Member{{Client: c, Entry: provider.Entry{
		Name: "anti", Dialect: provider.Tasks, BaseURL: base, KeyEnv: "K", Methods: []string{"userrecaptcha"},
		Billing: provider.Billing{Per1000: map[string]float64{"userrecaptcha": per1000}}, Role: provider.Primary,
		BudgetPerDay: 2.5 * per1000 / 1000}}}})
	require.NoError(t, err)

	var codes []string
	for i := range 4 {
		_, err := set.Solve(t.Context(), solver.Request{Method: "userrecaptcha", Params: taskParams(i), Producer: "p"})
		codes = append(codes, solver.CodeOf(err))
	}
	t.Logf("codes %v; Anti-Captcha billed %d tasks, %.4f, against a cap of %.4f", codes, p.billed(), float64(p.billed())*per1000/1000, 2.5*per1000/1000)
	require.Equal(t, 2, p.billed(), "the cap holds the bill: two charged unsolvables, no third")
	require.Equal(t, []string{"ERROR_CAPTCHA_UNSOLVABLE", "ERROR_CAPTCHA_UNSOLVABLE", provider.CodeBudgetExceeded, provider.CodeBudgetExceeded}, codes)
}
