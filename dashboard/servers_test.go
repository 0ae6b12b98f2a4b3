package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
)

// The server page (#servers), as asynqmon's: the NATS server the dashboard
// reads (its version, the streams captchaq keeps there, the store, whether
// users are checked) above every worker seen, running or stopped, with its
// host, PID, threads and uptime. A stopped worker's threads count among
// none in use, on this page and in the overview. It fits at 1,400 and
// 1,024 px, has its own address, and pays for nothing.
func TestServerPage(t *testing.T) {
	b := setup(t)
	ctx := testContext(t)
	page, problems := browser(t)
	require.NoError(t, chromedp.Do(page, chromedp.Navigate("about:blank"))) // started now
	// A second worker that stops: its last heartbeat says so, for
	// HeartbeatTTL (15 s). It is run and stopped again before each view of
	// it below, so that each is read within its heartbeat's life however
	// slowly a loaded machine drives the browser (CI under the race
	// detector once took more than 15 s from the stop to the last view).
	stopAWorker := func() {
		nc, err := nats.Connect(b.url, nats.UserInfo("worker", passwords["worker"]))
		require.NoError(t, err)
		defer nc.Close()
		sc, err := solver.NewClient(solver.Config{BaseURL: "http://127.0.0.1:1", APIKey: fakeapi.TestKey})
		require.NoError(t, err)
		w, err := stream.NewWorker(ctx, nc, stream.WorkerConfig{Solver: sc, Threads: 2, Name: "gone-worker"})
		require.NoError(t, err)
		wctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- w.Run(wctx) }()
		require.Eventually(t, func() bool {
			ws, err := b.client.Workers(ctx)
			if err != nil {
				return false
			}
			for _, wi := range ws {
				if wi.Name == "gone-worker" && !wi.Stopped {
					return len(ws) == 2
				}
			}
			return false
		}, 20*time.Second, 10*time.Millisecond, "both workers' heartbeats")
		stop()
		require.NoError(t, <-done)
	}
	stopAWorker()

	// The API: both workers, the server and its two streams.
	resp, err := http.Get(b.web.URL + "/api/servers")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	var sp struct {
		Total  int                 `json:"total"`
		Items  []stream.WorkerInfo `json:"items"`
		Server stream.ServerInfo   `json:"server"`
	}
	require.NoError(t, json.Unmarshal(body, &sp))
	require.Equal(t, 2, sp.Total, string(body))
	require.Equal(t, server.VERSION, sp.Server.Version)
	require.True(t, sp.Server.AuthRequired)
	require.Len(t, sp.Server.Streams, 2)
	require.Equal(t, "CAPTCHA", sp.Server.Streams[0].Name)
	require.Equal(t, "CAPTCHA_TOKENS", sp.Server.Streams[1].Name)
	require.Nil(t, sp.Server.Store, "a server started without captchaq's store watch reports no store")

	// A view of the stopped worker must come within its heartbeat's life:
	// on a machine so loaded that it does not (CI's race preview, at load
	// 5-10 with chromium under it, once lost the overview below), the
	// worker is run and stopped again and the view taken again, up to three
	// times.
	viewStopped := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		for try := 1; ; try++ {
			stopAWorker()
			err := chromedp.Do(page, steps...)
			if err == nil {
				return
			}
			summary, _ := chromedp.Run(page, chromedp.Evaluate[string](`(document.getElementById("workers-summary") || {}).textContent || ""`))
			if try == 3 {
				require.NoError(t, err, "%s, in each of 3 tries (workers: %q)", what, summary)
			}
			t.Logf("%s, try %d: %v (workers: %q): again", what, try, err, summary)
		}
	}

	// The overview counts the running worker's threads alone, and links to
	// the server page.
	viewStopped("the overview", chromedp.Navigate(b.web.URL+"/"), chromedp.WaitVisible(`#live.on`),
		waitText(`#workers-summary`, "alive: 1, 0 of 4 threads in use; 1 stopped in the last 15s, not counted"),
		chromedp.Click(`#to-servers`), waitText(`#list tr[data-worker="dash-worker"]`, "running"))
	require.Equal(t, "servers", attr(t, page, `.tab.on`, "data-tab"))
	hash, err := chromedp.Run(page, chromedp.Evaluate[string](`location.hash`))
	require.NoError(t, err)
	require.Equal(t, "#servers", hash)

	for _, width := range []int64{1400, 1024} {
		viewStopped(fmt.Sprintf("the server page at %d px", width), chromedp.EmulateViewport(width, 900), chromedp.Navigate(b.web.URL+"/#servers"),
			waitText(`#list tr[data-worker="gone-worker"]`, "stopped"), waitText(`#list tr[data-worker="dash-worker"]`, "running"),
			waitText(`#server-info`, "nats-server "+server.VERSION))
		require.Equal(t, "servers", attr(t, page, `.tab.on`, "data-tab"))
		require.Contains(t, text(t, page, `#server-info`), "checked: changes need the admin's NATS user")
		require.Contains(t, text(t, page, `#server-info`), "not reported")
		require.Contains(t, text(t, page, `#streams tr[data-stream="CAPTCHA"]`), "24h0m")
		require.Contains(t, text(t, page, `#streams tr[data-stream="CAPTCHA_TOKENS"]`), "CAPTCHA_TOKENS")
		cells, err := chromedp.Run(page, chromedp.Evaluate[[]string](
			`[...document.querySelectorAll('#list tr[data-worker="gone-worker"] td')].map(c => c.textContent)`))
		require.NoError(t, err)
		require.Equal(t, []string{"gone-worker", "2", "-"}, []string{cells[0], cells[3], cells[4]}, "threads 2, none in use: %v", cells)
		require.Contains(t, text(t, page, `#count-servers`), "(2)")

		// Fits: no control out of sight, nothing wider than the list.
		outside, err := chromedp.Run(page, chromedp.Evaluate[[]string](controlsOutside))
		require.NoError(t, err)
		require.Empty(t, outside, "at %d px", width)
		over, err := chromedp.Run(page, chromedp.Evaluate[[]string](`[...document.querySelectorAll(".list, section")].filter(e => e.scrollWidth > e.clientWidth + 1).map(e => (e.id || e.className) + " " + e.scrollWidth + ">" + e.clientWidth)`))
		require.NoError(t, err)
		require.Empty(t, over, "at %d px, scrolled sideways", width)
		screenshot(t, page, fmt.Sprintf("dashboard-%dpx-servers.png", width))
	}

	require.Empty(t, problems(), "no console errors")
	require.Zero(t, b.api.Stats().Submitted, "nothing was paid")
}
