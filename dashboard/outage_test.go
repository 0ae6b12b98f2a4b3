package dashboard

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
)

// When a worker's solving service stops answering while it holds a
// captcha there, the page says so at its top, above everything else: a
// banner with how many workers report it, since when, and how many
// captchas the service holds; before the outage there is none.
func TestServiceDownBanner(t *testing.T) {
	_, nc, c := trialServer(t)
	ctx := testContext(t)

	// The emulator takes the captcha and never answers it before the test ends.
	hour := fakeapi.Range{Min: time.Hour, Median: time.Hour, Max: time.Hour}
	emu := fakeapi.New(fakeapi.Config{SolveTime: map[string]fakeapi.Range{fakeapi.KindTurnstile: hour}})
	api := httptest.NewServer(emu)
	sc, err := solver.NewClient(solver.Config{BaseURL: api.URL, APIKey: fakeapi.TestKey, Timing: solver.Timing{Scale: 0.1}})
	require.NoError(t, err)
	w, err := stream.NewWorker(ctx, nc, stream.WorkerConfig{Solver: sc, Threads: 1, Name: "outage-worker", IdleCheck: 50 * time.Millisecond,
		ShutdownGrace: 100 * time.Millisecond}) // its captcha never comes back: hand it back at the end
	require.NoError(t, err)
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	t.Cleanup(func() { stop(); <-done })

	web := httptest.NewUnstartedServer(nil)
	d, err := New(Config{Client: c, Refresh: 200 * time.Millisecond, Hosts: HostsOf(web.Listener.Addr().String())})
	require.NoError(t, err)
	web.Config.Handler = d
	web.Start()
	t.Cleanup(web.Close)

	_, err = c.Submit(ctx, turnstile("held-1", "https://shop.example/"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return emu.Stats().Submitted == 1 }, 20*time.Second, 10*time.Millisecond, "the service takes the captcha")

	br, problems := browser(t)
	require.NoError(t, chromedp.Do(br, chromedp.Navigate(web.URL), waitText(`#workers`, "outage-worker"), waitText(`#live`, "live")))
	hidden, err := chromedp.Run(br, chromedp.Evaluate[bool](`document.getElementById("outage").hidden`))
	require.NoError(t, err)
	require.True(t, hidden, "no banner while the service answers")

	closed := time.Now()
	api.Close() // the service goes away with the captcha
	require.NoError(t, chromedp.Do(br, void(chromedp.Poll[bool](`!document.getElementById("outage").hidden`, chromedp.WithPollingTimeout(30*time.Second)))))
	banner := text(t, br, `#outage`)
	t.Logf("the banner %v after the service went away: %s", time.Since(closed).Round(100*time.Millisecond), banner)
	require.Contains(t, banner, "Solving service unreachable for 1 of 1 worker(s) since ")
	require.Contains(t, banner, ": 1 captcha(s) held at the service")
	top, err := chromedp.Run(br, chromedp.Evaluate[bool](`document.getElementById("outage").getBoundingClientRect().bottom <= document.querySelector("main").getBoundingClientRect().top`))
	require.NoError(t, err)
	require.True(t, top, "the banner is above the page's sections")
	screenshot(t, br, "dashboard-service-down.png")
	require.Empty(t, problems(), "no console errors")
	require.Equal(t, 1, emu.Stats().Submitted, "paid once")
}
