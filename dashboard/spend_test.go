package dashboard

import (
	"cmp"
	"context"
	"fmt"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/solver/provider"
	"github.com/captchaq/captchaq/stream"
)

// The page's spend table shows what each provider was paid for each
// producer's solves, row for row the figures of `captchaq stats --json`
// (Stats.Spend), and those figures are the emulators' bills: a plan
// (CaptchaAI, nothing per solve) and a per-solve fallback (2captcha) that
// takes the tasks while the plan is down.
func TestSpendTableInBrowser(t *testing.T) {
	_, nc, c := trialServer(t)
	ctx := testContext(t)
	emulator := func(svc string, price map[string]float64) (*fakeapi.Server, provider.Member) {
		fast := fakeapi.Range{Min: 5 * time.Millisecond, Median: 8 * time.Millisecond, Max: 10 * time.Millisecond}
		emu := fakeapi.New(fakeapi.Config{Service: svc, Price: price, Balance: 100, BurstLimit: 1 << 20,
			SolveTime: map[string]fakeapi.Range{fakeapi.KindRecaptcha: fast}})
		api := httptest.NewServer(emu)
		t.Cleanup(api.Close)
		sc, err := solver.NewClient(solver.Config{BaseURL: api.URL, APIKey: fakeapi.TestKey, Service: solver.Service(svc),
			MinSubmitInterval: -1, SubmitBurst: -1, Timing: solver.Timing{Scale: 0.01}})
		require.NoError(t, err)
		return emu, provider.Member{Client: sc, Entry: provider.Entry{Dialect: provider.Classic, BaseURL: api.URL, KeyEnv: "K"}}
	}
	plan, pm := emulator(fakeapi.ServiceCaptchaAI, map[string]float64{"userrecaptcha": 0})
	pm.Entry.Name, pm.Entry.Role, pm.Entry.Billing = "captchaai", provider.Primary, provider.Billing{Threads: 5}
	spareBilling := provider.Billing{Per1000: map[string]float64{"userrecaptcha": 2.99}}
	spare, sm := emulator(fakeapi.Service2Captcha, spareBilling.Per1000)
	sm.Entry.Name, sm.Entry.Role, sm.Entry.Billing, sm.Entry.Service = "2captcha", provider.Fallback, spareBilling, fakeapi.Service2Captcha
	sm.Entry.Methods = []string{"userrecaptcha"}
	set, err := provider.New(provider.Config{Members: []provider.Member{pm, sm}})
	require.NoError(t, err)
	w, err := stream.NewWorker(ctx, nc, stream.WorkerConfig{Solver: set, Threads: 4, Name: "spend-worker", IdleCheck: 50 * time.Millisecond})
	require.NoError(t, err)
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	t.Cleanup(func() { stop(); <-done })

	checkout, err := stream.NewClient(ctx, nc, stream.ClientConfig{Name: "checkout"})
	require.NoError(t, err)
	solve := func(cl *stream.Client, from, n int) {
		for i := from; i < from+n; i++ {
			_, err := cl.Solve(ctx, stream.Task{ID: fmt.Sprintf("spend-%d", i), Method: "userrecaptcha",
				Params: stream.Params{"googlekey": "6Le-spend", "pageurl": fmt.Sprintf("https://shop.example/%d", i)}})
			require.NoError(t, err)
		}
	}
	solve(c, 0, 3)
	plan.SetFaults(fakeapi.Faults{Outage: true}) // the plan goes down: the fallback is paid
	solve(checkout, 3, 4)
	solve(c, 7, 2)

	web := httptest.NewUnstartedServer(nil)
	d, err := New(Config{Client: c, Refresh: 200 * time.Millisecond, Hosts: HostsOf(web.Listener.Addr().String())})
	require.NoError(t, err)
	web.Config.Handler = d
	web.Start()
	t.Cleanup(web.Close)

	st, err := c.Stats(ctx, time.Hour)
	require.NoError(t, err)
	var want []string
	var spent float64
	for _, r := range st.Spend {
		want = append(want, fmt.Sprintf("%s %s %d %d %s", r.Provider, cmp.Or(r.Producer, "(unnamed)"), r.Solves, r.PlanSolves, strconv.FormatFloat(r.Cost, 'f', -1, 64)))
		if r.Provider == "2captcha" {
			spent += r.Cost
		}
	}
	require.Len(t, want, 3, "captchaai for trial-test, 2captcha for checkout and trial-test: %v", want)
	ps, ss := plan.Stats(), spare.Stats()
	require.Equal(t, 9, ps.Submitted+ss.Submitted, "one captcha paid per task")
	require.Equal(t, 6, ss.Submitted, "the fallback took the six tasks of the outage")
	require.InDelta(t, ss.Spent, spent, 1e-9, "stats' spend is the fallback's bill")

	br, problems := browser(t)
	require.NoError(t, chromedp.Do(br, chromedp.Navigate(web.URL), waitText(`#live`, "live"), waitText(`#spend tbody`, "checkout")))
	rows, err := chromedp.Run(br, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#spend tbody tr")].map(r => [...r.cells].map(c => c.textContent).join(" "))`))
	require.NoError(t, err)
	require.Equal(t, want, rows[:len(want)], "the page's rows are stats' rows")
	require.Contains(t, strings.Join(rows, "\n"), "2captcha total 6 0 0.01794", "a total per provider")
	require.Empty(t, problems(), "no console errors")
	require.Equal(t, 6, spare.Stats().Submitted, "nothing paid twice")
}
