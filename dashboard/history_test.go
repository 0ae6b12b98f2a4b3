package dashboard

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream"
)

// The charts reach back beyond the last hour, as far as the stream keeps
// events and outcomes: 6 h and 24 h, in sixty steps each, chosen in the
// page and kept while snapshots arrive; a span it does not offer is refused
// naming those it does.
func TestHistoryBeyondAnHour(t *testing.T) {
	b := setup(t)
	deadAndSolved(t, b)

	c := newClient(t, b)
	var h []stream.HistoryPoint
	require.Equal(t, http.StatusOK, c.get("/api/history?span=24h", &h))
	require.Len(t, h, 61)
	require.Equal(t, 24*time.Minute, h[1].At.Sub(h[0].At), "a step of 24 minutes")
	require.WithinDuration(t, time.Now().Add(-24*time.Hour), h[0].At, time.Minute)
	solved, dead := 0, 0
	for _, p := range h {
		solved, dead = solved+p.Solved, dead+p.Dead
	}
	require.Equal(t, []int{1, 1}, []int{solved, dead}, "each ended task counted once")
	var refused map[string]string
	require.Equal(t, http.StatusBadRequest, c.get("/api/history?span=2h", &refused))
	require.Contains(t, refused["error"], `span "2h": want one of 1h, 6h, 24h`)

	page, problems := browser(t)
	startLabel := `[...document.querySelectorAll("#throughput text")].map(e => e.textContent).includes(%q)`
	require.NoError(t, chromedp.Do(page, chromedp.Navigate(b.web.URL), waitText(`#live`, "live"),
		void(chromedp.Poll[bool](sprintf(startLabel, "-60 min"), chromedp.WithPollingTimeout(10*time.Second))),
		pick("history-span", "24h"),
		void(chromedp.Poll[bool](sprintf(startLabel, "-24 h"), chromedp.WithPollingTimeout(10*time.Second)))))
	// Snapshots go on arriving (a new one every 200 ms): the chart stays at 24 h.
	live := text(t, page, `#live`)
	require.NoError(t, chromedp.Do(page, void(chromedp.Poll[bool](sprintf(`document.getElementById("live").textContent !== %q`, live), chromedp.WithPollingTimeout(10*time.Second)))))
	shown, err := chromedp.Run(page, chromedp.Evaluate[bool](sprintf(startLabel, "-24 h")))
	require.NoError(t, err)
	require.True(t, shown, "the 24 h chart is kept while snapshots arrive")
	addr, err := chromedp.Run(page, chromedp.Evaluate[string](`location.hash`))
	require.NoError(t, err)
	require.Equal(t, "#tasks?history=24h", addr, "the address names the span")
	require.NoError(t, chromedp.Do(page, chromedp.Reload(),
		void(chromedp.Poll[bool](sprintf(startLabel, "-24 h"), chromedp.WithPollingTimeout(10*time.Second)))))
	bars, err := chromedp.Run(page, chromedp.Evaluate[int](`document.querySelectorAll("#throughput rect").length`))
	require.NoError(t, err)
	require.Equal(t, 2, bars, "one bar of solved, one of dead")
	require.NoError(t, chromedp.Do(page, pick("history-span", "1h"),
		void(chromedp.Poll[bool](sprintf(startLabel, "-60 min"), chromedp.WithPollingTimeout(10*time.Second)))))
	require.Empty(t, problems(), "no console errors")
}

func sprintf(format string, a ...any) string { return fmt.Sprintf(format, a...) }
