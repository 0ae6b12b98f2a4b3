package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cdppage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/stream"
)

// shotDir is where the browser tests write their screenshots: the
// directory CAPTCHAQ_DASHBOARD_SHOTS names, or the test's own temporary
// directory.
func shotDir(t *testing.T) string {
	if d := os.Getenv("CAPTCHAQ_DASHBOARD_SHOTS"); d != "" {
		require.NoError(t, os.MkdirAll(d, 0o755))
		return d
	}
	return t.TempDir()
}

func screenshot(t *testing.T, page context.Context, name string) []byte {
	t.Helper()
	png, err := chromedp.Run(page, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	path := filepath.Join(shotDir(t), name)
	require.NoError(t, os.WriteFile(path, png, 0o644))
	t.Logf("screenshot: %s (%d bytes)", path, len(png))
	return png
}

// scaleFixture fills the stream through the shipped roles: a few tasks that
// ended (solved, dead for a permanent error, dead because canceled), then,
// with both lanes paused so nothing is solved, n tasks that wait, the
// first few of them canceled. Waiting tasks are published directly: no
// solving is needed for them.
func scaleFixture(t *testing.T, b *bundle, n int) (canceled int) {
	ctx := testContext(t)
	for i := range 3 {
		_, err := b.client.Solve(ctx, turnstile(fmt.Sprintf("dead-%d", i), "https://bad.example/checkout"))
		require.ErrorIs(t, err, stream.ErrNotSolved)
		_, err = b.client.Solve(ctx, turnstile(fmt.Sprintf("solved-%d", i), "https://shop.example/checkout"))
		require.NoError(t, err)
	}
	// A canceled task's letter: queued on a paused lane, canceled, let go.
	require.NoError(t, b.admin.PauseLane(ctx, stream.LaneFast, time.Now().Add(time.Hour)))
	_, err := b.client.Submit(ctx, turnstile("canceled-0", "https://shop.example/"))
	require.NoError(t, err)
	_, err = b.admin.Cancel(ctx, "canceled-0", "test")
	require.NoError(t, err)
	require.NoError(t, b.admin.ResumeLane(ctx, stream.LaneFast))
	out, err := b.client.Wait(ctx, "canceled-0")
	require.ErrorIs(t, err, stream.ErrNotSolved)
	require.Equal(t, string(retry.ReasonCanceled), out.Reason)

	// The ended tasks' messages leave the stream just after their outcomes:
	// go on once they are gone, so that no read below runs while one is
	// deleted (a scan may then stop short).
	require.Eventually(t, func() bool {
		s, err := b.js.Stream(ctx, stream.DefaultStream)
		if err != nil {
			return false
		}
		info, err := s.Info(ctx, jetstream.WithSubjectFilter("captcha.tasks.>"))
		return err == nil && len(info.State.Subjects) == 0
	}, 20*time.Second, 10*time.Millisecond)
	for _, l := range stream.Lanes {
		require.NoError(t, b.admin.PauseLane(ctx, l, time.Now().Add(time.Hour)))
	}
	tasks := make([]stream.Task, n)
	for i := range tasks {
		switch i % 3 {
		case 0:
			tasks[i] = turnstile(fmt.Sprintf("wait-%04d", i), "https://shop.example/a")
		case 1:
			tasks[i] = stream.Task{ID: fmt.Sprintf("wait-%04d", i), Method: "userrecaptcha", Params: stream.Params{"googlekey": "6Le-key", "pageurl": "https://forum.example/b"}}
		default:
			tasks[i] = stream.Task{ID: fmt.Sprintf("wait-%04d", i), Method: "hcaptcha", Params: stream.Params{"sitekey": "hc-key", "pageurl": "https://tickets.example/c"}}
		}
		if i%7 == 0 {
			tasks[i].Priority = stream.PriorityHigh
		}
	}
	for chunk := range sliceChunks(tasks, 500) {
		_, err := b.client.SubmitAll(ctx, chunk)
		require.NoError(t, err)
	}
	canceled = min(3, n)
	for i := range canceled {
		_, err := b.admin.Cancel(ctx, tasks[i].ID, "test")
		require.NoError(t, err)
	}
	return canceled
}

func sliceChunks[T any](s []T, n int) func(func([]T) bool) {
	return func(yield func([]T) bool) {
		for len(s) > 0 {
			k := min(n, len(s))
			if !yield(s[:k]) {
				return
			}
			s = s[k:]
		}
	}
}

// pick sets a filter's select as the operator would.
func pick(id, value string) chromedp.Action[chromedp.Void] {
	return void(chromedp.Evaluate[bool](fmt.Sprintf(`(() => { const s = document.getElementById(%q); s.value = %q; s.dispatchEvent(new Event("change")); return true; })()`, id, value)))
}

// text waits for the element and reads its text in one script: the page
// re-renders its tables from server-sent events, and a node found by one
// DevTools call may be gone by the next ("No node with given id found",
// CI's TestServerPage once), so no node id is held between calls.
func text(t *testing.T, page context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(page, chromedp.Poll[[]string](fmt.Sprintf(`(() => { const e = document.querySelector(%q); return e ? [e.textContent] : null; })()`, sel),
		chromedp.WithPollingTimeout(20*time.Second)))
	require.NoError(t, err)
	require.Len(t, s, 1)
	return s[0]
}

// pageParts names the height of each part of the page and the first rows
// of the list, so that a page grown too tall says which part grew.
func pageParts(t *testing.T, page context.Context) string {
	t.Helper()
	s, err := chromedp.Run(page, chromedp.Evaluate[string](`[...document.querySelectorAll("header, #notice, #outage, main > section, #filters, #bulk, #list, #pager, #task-panel")].map(e => (e.id || e.className || e.tagName.toLowerCase()) + " " + Math.round(e.getBoundingClientRect().height)).join(", ") + "; rows: " + [...document.querySelectorAll("#list tbody tr")].slice(0, 3).map(r => r.innerText.replace(/\s+/g, " ") + " (" + Math.round(r.getBoundingClientRect().height) + " px)").join(" / ")`))
	require.NoError(t, err)
	return s
}

func pageHeight(t *testing.T, page context.Context) int {
	t.Helper()
	h, err := chromedp.Run(page, chromedp.Evaluate[int](`document.documentElement.scrollHeight`))
	require.NoError(t, err)
	return h
}

// The dashboard at 10 and at 2,000 waiting tasks: the page stays the same
// height (a page of the list at a time), the filters count what the stream
// holds, the trace opens beside the list at its top, actions show only
// where they apply, and a bulk purge asks first and acts on what it named.
func TestDashboardAtScale(t *testing.T) {
	heights := map[int]int{}
	for _, n := range []int{10, 2000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			start := time.Now()
			b := setup(t)
			canceled := scaleFixture(t, b, n)
			t.Logf("%d tasks published in %s", n, time.Since(start).Round(time.Millisecond))
			// The history, read from the stream: every waiting task open now,
			// and what ended counted once.
			h, err := b.client.History(testContext(t), time.Now().Add(-time.Hour), time.Minute)
			require.NoError(t, err)
			require.Len(t, h, 61)
			require.Equal(t, n, h[len(h)-1].Open)
			require.Zero(t, h[0].Open, "nothing was open an hour ago")
			solved, dead := 0, 0
			for _, p := range h {
				solved, dead = solved+p.Solved, dead+p.Dead
			}
			require.Equal(t, []int{3, 4}, []int{solved, dead})
			// What one read of each list costs the dashboard (before any
			// cache): it is done at most once per refresh, whoever asks.
			c := newClient(t, b)
			for _, path := range []string{"/api/tasks", "/api/outcomes", "/api/dead", "/api/history", "/api/history?span=24h", "/api/snapshot"} {
				var v any
				read := time.Now()
				require.Equal(t, http.StatusOK, c.get(path, &v), path)
				t.Logf("%d tasks: GET %s took %s", n, path, time.Since(read).Round(time.Millisecond))
			}
			page, problems := browser(t)
			want := fmt.Sprintf("of %s", commas(n))
			require.NoError(t, chromedp.Do(page,
				chromedp.Navigate(b.web.URL),
				chromedp.WaitVisible(`#live.on`),
				chromedp.WaitVisible(`#list tbody tr[data-task]`),
				waitText(`#range`, want)))
			rows, err := chromedp.Run(page, chromedp.Nodes(`#list tbody tr[data-task]`, chromedp.AtLeast(1)))
			require.NoError(t, err)
			require.Len(t, rows, min(n, 25), "one page of the list")
			heights[n] = pageHeight(t, page)
			t.Logf("page height with %d tasks: %d px (loaded in %s)", n, heights[n], time.Since(start).Round(time.Millisecond))
			if heights[n] >= 2400 {
				t.Logf("the parts of the page: %s", pageParts(t, page))
			}
			require.Less(t, heights[n], 2400, "the page stays short: the list is paged")

			// Pause and resume on every lane, not only high-priority rows.
			for _, l := range stream.Lanes {
				for _, p := range []stream.Priority{stream.PriorityNormal, stream.PriorityHigh} {
					require.NoError(t, chromedp.Do(page, waitText(fmt.Sprintf(`#queues tr[data-lane=%q][data-priority=%q]`, l, p), "resume lane "+string(l))))
				}
			}

			// Filters: canceled tasks, then one lane, counted as the
			// stream counts them.
			// The range and the tab's count come from the same read; a read
			// started before the pick and answered after it is dropped
			// (app.js listSeq), so both say the filtered count.
			require.NoError(t, chromedp.Do(page, pick("f-state", "canceled"), waitText(`#range`, fmt.Sprintf("of %d", canceled)),
				waitText(`#count-tasks`, fmt.Sprintf("(%d matching)", canceled))))
			require.NoError(t, chromedp.Do(page, pick("f-state", "")))
			slow, err := b.client.Tasks(testContext(t), stream.TaskFilter{Lane: stream.LaneSlow})
			require.NoError(t, err)
			require.NoError(t, chromedp.Do(page, pick("f-lane", "slow"), waitText(`#range`, "of "+commas(len(slow)))))
			if n > 25 {
				require.NoError(t, chromedp.Do(page, chromedp.Click(`#next`), waitText(`#range`, "26–50 of "+commas(len(slow)))))
			}

			// The trace of a dead task opens beside the list, at its top.
			require.NoError(t, chromedp.Do(page,
				chromedp.Click(`.tab[data-tab="dead"]`), waitText(`#range`, "of 4"),
				chromedp.Click(`#list tr[data-task="dead-1"] a`), chromedp.WaitVisible(`#trace tbody tr`)))
			require.Contains(t, text(t, page, `#trace tbody`), "ERROR_PAGEURL")
			top, err := chromedp.Run(page, chromedp.Evaluate[struct{ Panel, List float64 }](`({panel: document.getElementById("task-panel").getBoundingClientRect().top, list: document.querySelector(".list").getBoundingClientRect().top})`))
			require.NoError(t, err)
			require.InDelta(t, top.List, top.Panel, 2, "the trace opens beside the list, level with its top")

			// A canceled task's letter offers delete but no replay.
			require.Equal(t, "delete", strings.TrimSpace(text(t, page, `#list tr[data-task="canceled-0"] td.actions`)))
			require.Contains(t, text(t, page, `#list tr[data-task="dead-1"] td.actions`), "replay")

			// Bulk purge of the permanent ones: nothing before sign-in,
			// then a confirmation that names how many; "keep" keeps them.
			require.NoError(t, chromedp.Do(page, pick("f-reason", "permanent"), waitText(`#range`, "of 3")))
			disabled, err := chromedp.Run(page, chromedp.Evaluate[bool](`document.getElementById("bulk-purge").disabled`))
			require.NoError(t, err)
			require.True(t, disabled, "no change before sign-in")
			signIn(t, page, "admin")
			require.NoError(t, chromedp.Do(page, chromedp.Click(`#bulk-purge`), chromedp.WaitVisible(`#confirm`)))
			require.Contains(t, text(t, page, `#confirm-text`), "Purge 3 dead letter(s) (reason permanent)?")
			if n == 2000 {
				png := screenshot(t, page, fmt.Sprintf("dashboard-%d-dead.png", n))
				if dst := os.Getenv("CAPTCHAQ_DASHBOARD_PNG"); dst != "" { // the picture of the docs
					require.NoError(t, os.WriteFile(dst, png, 0o644))
				}
			}
			require.NoError(t, chromedp.Do(page, chromedp.Click(`#confirm-no`), chromedp.WaitNotVisible(`#confirm`)))
			ds, err := b.admin.DeadLetters(testContext(t), stream.DeadFilter{})
			require.NoError(t, err)
			require.Len(t, ds, 4, "kept")
			require.NoError(t, chromedp.Do(page, chromedp.Click(`#bulk-purge`), chromedp.WaitVisible(`#confirm`),
				chromedp.Click(`#confirm-yes`), waitText(`#notice-msg`, "purged 3 dead letter(s)")))
			ds, err = b.admin.DeadLetters(testContext(t), stream.DeadFilter{})
			require.NoError(t, err)
			require.Len(t, ds, 1)
			require.Equal(t, "canceled-0", ds[0].ID, "only the named set is purged")

			// Back to the tasks for the picture.
			require.NoError(t, chromedp.Do(page, chromedp.Click(`.tab[data-tab="tasks"]`), waitText(`#range`, "of "+commas(len(slow))),
				chromedp.Click(`#list tbody tr[data-task] a`), chromedp.WaitVisible(`#trace tbody tr`)))
			screenshot(t, page, fmt.Sprintf("dashboard-%d.png", n))
			require.Empty(t, problems(), "no console errors")
			t.Logf("%d tasks: done in %s", n, time.Since(start).Round(time.Millisecond))
		})
	}
	if len(heights) == 2 {
		require.InDelta(t, heights[10], heights[2000], 600, "2,000 tasks make the page no taller than a page of rows")
	}
}

func commas(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// waitText waits until the element's text contains want.
func waitText(sel, want string) chromedp.Action[chromedp.Void] {
	return void(chromedp.Poll[bool](fmt.Sprintf(`(() => { const e = document.querySelector(%q); return !!e && e.textContent.includes(%q); })()`, sel, want),
		chromedp.WithPollingTimeout(20*time.Second)))
}

// void drops an action's result, for chromedp.Do.
func void[T any](a chromedp.Action[T]) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := a(ctx, t)
		return chromedp.Void{}, err
	}
}

// signIn signs in through the page's form and waits until the dashboard
// has checked the credentials.
func signIn(t *testing.T, page context.Context, user string) {
	t.Helper()
	require.NoError(t, chromedp.Do(page,
		chromedp.SetValue(`#user`, user), chromedp.SetValue(`#password`, passwords[user]),
		chromedp.Click(`#signin-button`), waitText(`#who`, "changes as NATS user "+user)))
}

// clockAhead makes the page's clock run ahead of the machine's by d from
// its first script on.
func clockAhead(d time.Duration) chromedp.Action[chromedp.Void] {
	shift := fmt.Sprintf(`(() => { const D = Date; const ahead = %d;
  class Ahead extends D { constructor(...a) { if (a.length) super(...a); else super(D.now() + ahead); } static now() { return D.now() + ahead; } }
  globalThis.Date = Ahead; })()`, d.Milliseconds())
	return void(func(ctx context.Context, t *chromedp.Target) (cdppage.ScriptIdentifier, error) {
		r, err := chromedp.Call(ctx, cdppage.AddScriptToEvaluateOnNewDocument, cdppage.AddScriptToEvaluateOnNewDocumentParams{Source: shift})
		return r.Identifier, err
	})
}

// rowHeights reads the tallest and the shortest row of the list shown.
func rowHeights(t *testing.T, page context.Context) [2]float64 {
	t.Helper()
	h, err := chromedp.Run(page, chromedp.Evaluate[[2]float64](`(() => { const hs = [...document.querySelectorAll("#list tbody tr[data-task]")].map(r => r.getBoundingClientRect().height); return [Math.max(...hs), Math.min(...hs)]; })()`))
	require.NoError(t, err)
	return h
}

// The lists read just after midnight, when every time in them is
// yesterday's, keep their rows as tall as by day, and so do they two days
// on, when they name dates: a date beside a time broke each row of the
// tasks' list over a third line (CI's TestDashboardAtScale measured its 25
// rows 20 px taller each, at 00:0x). Each time's cell holds the date and the
// time in its title.
func TestTheListsKeepTheirRowsAfterMidnight(t *testing.T) {
	b := setup(t)
	scaleFixture(t, b, 30)
	now := time.Now()
	midnight := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, time.Local)
	clocks := []struct {
		name  string
		ahead time.Duration
		date  bool // whether a time's cell shows its date rather than its time
	}{
		{"today", 0, false},
		{"just after midnight", midnight.Add(time.Minute).Sub(now), false},
		{"two days on", 48 * time.Hour, true},
	}
	heights := map[string]map[string][2]float64{}
	cells := map[string]map[string][2]string{} // a time's cell: its text and its title
	for _, c := range clocks {
		page, problems := browser(t)
		require.NoError(t, chromedp.Do(page, clockAhead(c.ahead), chromedp.Navigate(b.web.URL), chromedp.WaitVisible(`#live.on`), waitText(`#range`, "of 30")))
		heights[c.name], cells[c.name] = map[string][2]float64{}, map[string][2]string{}
		for _, tab := range []struct{ name, want string }{{"tasks", "of 30"}, {"outcomes", "of "}, {"dead", "of 4"}} {
			require.NoError(t, chromedp.Do(page, chromedp.Click(fmt.Sprintf(`.tab[data-tab=%q]`, tab.name)),
				waitText(`#range`, tab.want), chromedp.WaitVisible(`#list tbody tr[data-task]`)))
			// A page without td.when (the old one) reads no cell: the rows'
			// heights below, checked first, say what it got wrong.
			cell, err := chromedp.Run(page, chromedp.Evaluate[[2]string](`(() => { const e = document.querySelector("#list tbody tr[data-task] td.when"); return e ? [e.textContent, e.title] : ["", ""]; })()`))
			require.NoError(t, err)
			cells[c.name][tab.name] = cell
			t.Logf("%s, %s: a time's cell shows %q, titled %q", c.name, tab.name, cell[0], cell[1])
			heights[c.name][tab.name] = rowHeights(t, page)
			t.Logf("%s, %s: rows %v px high (tallest, shortest)", c.name, tab.name, heights[c.name][tab.name])
		}
		require.Empty(t, problems(), "no console errors")
	}
	for tab, h := range heights["today"] {
		for _, c := range clocks[1:] {
			require.LessOrEqual(t, heights[c.name][tab][0], h[0], "%s: the %s list's tallest row as by day at most", c.name, tab)
		}
	}
	for _, c := range clocks {
		for tab, cell := range cells[c.name] {
			// The cell against its own title, not against the test's now:
			// the fixture stamps its rows up to ~50 ms before now, in the
			// second before it in about one run of 20.
			if c.date {
				require.True(t, strings.HasPrefix(cell[1], cell[0]+" "), "%s, %s: the cell shows the title's date", c.name, tab)
				require.NotContains(t, cell[0], ":", "%s, %s: and no time", c.name, tab)
			} else {
				require.True(t, strings.HasSuffix(cell[1], " "+cell[0]), "%s, %s: the cell shows the title's time", c.name, tab)
				require.Contains(t, cell[0], ":", "%s, %s: a time", c.name, tab)
			}
			require.Contains(t, cell[1], now.Format("Jan 2"), "%s, %s: the title names the date", c.name, tab)
			require.Contains(t, cell[1], ":", "%s, %s: and the time", c.name, tab)
		}
	}
}
