package dashboard

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// A time ahead of the page's clock (the browser's clock behind the
// server's or a worker's) on the page's next day names its date: shown as
// a time of day it would read as the same time yesterday, the one moment
// in the last 24 hours that time names. On the page's own day it stays a
// time, so that a clock a few seconds behind does not turn every fresh
// task into a date.
func TestATimeAheadOfThePageAcrossMidnightNamesItsDate(t *testing.T) {
	b := setup(t)
	start := time.Now()
	scaleFixture(t, b, 30)
	now := time.Now()
	t.Logf("the fixture took %s", now.Sub(start).Round(time.Millisecond))
	today := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.Local)
	for _, c := range []struct {
		name   string
		ahead  time.Duration
		isDate bool
	}{
		// The page at 23:59 the day before the stamps, which are then
		// between a minute and a day ahead of it.
		{"the page a day behind, at 23:59", today.Add(-time.Minute).Sub(now), true},
		// The page ten seconds behind: the stamps only just ahead.
		{"the page seconds behind", -10 * time.Second, now.Add(-10*time.Second).Day() != now.Day()},
	} {
		page, problems := browser(t)
		require.NoError(t, chromedp.Do(page, clockAhead(c.ahead), chromedp.Navigate(b.web.URL), chromedp.WaitVisible(`#live.on`),
			waitText(`#range`, "of 30"), chromedp.WaitVisible(`#list tbody tr[data-task] td.when`)))
		cell, err := chromedp.Run(page, chromedp.Evaluate[[]string](`(() => { const e = document.querySelector("#list tbody tr[data-task] td.when"); return [e.textContent, e.title, String(new Date())]; })()`))
		require.NoError(t, err)
		t.Logf("%s (page at %s): a time's cell shows %q, titled %q", c.name, cell[2], cell[0], cell[1])
		if c.isDate {
			require.Contains(t, cell[0], now.Format("Jan 2"), "%s: the cell names the stamp's date", c.name)
			require.NotContains(t, cell[0], ":", "%s: not a time of day, which would read as yesterday's", c.name)
		} else {
			require.Contains(t, cell[0], ":", "%s: a time of day", c.name)
		}
		require.Empty(t, problems(), "no console errors")
	}
}
