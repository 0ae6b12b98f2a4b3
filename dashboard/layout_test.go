package dashboard

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
)

// controlsOutside lists the page's buttons that are shown but not wholly
// inside the viewport's width, inside their section's box, or inside the
// box of an element between them and their section that clips what
// overflows it: a button there is cut off or scrolled out of sight.
const controlsOutside = `(() => {
  const vw = document.documentElement.clientWidth, out = [];
  for (const b of document.querySelectorAll("button")) {
    const r = b.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) continue; // not shown
    const row = b.closest("tr"), sec = b.closest("section");
    const name = JSON.stringify(b.textContent.trim()) + (row && (row.dataset.task || row.dataset.lane) ? " in row " + (row.dataset.task || row.dataset.lane + " " + row.dataset.priority) : "");
    const span = Math.round(r.left) + "-" + Math.round(r.right) + " px";
    if (r.left < 0 || r.right > vw + 0.5) out.push(name + " at " + span + ": outside the viewport, 0-" + vw + " px");
    if (sec) {
      const s = sec.getBoundingClientRect();
      if (r.left < s.left - 0.5 || r.right > s.right + 0.5 || r.top < s.top - 0.5 || r.bottom > s.bottom + 0.5)
        out.push(name + " at " + span + ": outside its section " + JSON.stringify(sec.querySelector("h2, nav") ? sec.querySelector("h2, nav").textContent.trim().slice(0, 20) : "") + ", " + Math.round(s.left) + "-" + Math.round(s.right) + " px");
    }
    for (let p = b.parentElement; p && p !== sec; p = p.parentElement) {
      if (getComputedStyle(p).overflowX === "visible") continue;
      const c = p.getBoundingClientRect();
      if (r.left < c.left - 0.5 || r.right > c.right + 0.5) out.push(name + " at " + span + ": clipped by " + (p.id || p.className || p.tagName) + ", " + Math.round(c.left) + "-" + Math.round(c.right) + " px");
    }
  }
  return out;
})()`

// queueCounts reads the Queues table: queued, solving, retrying by lane and
// priority.
const queueCounts = `(() => {
  const m = {};
  for (const r of document.querySelectorAll("#queues tbody tr[data-lane]")) {
    const c = r.querySelectorAll("td");
    m[r.dataset.lane + " " + r.dataset.priority] = [2, 3, 4].map(i => Number(c[i].textContent));
  }
  return m;
})()`

// The dashboard fits the screen at 1,400 and at 1,024 px wide with the slow
// lane paused while some of its tasks wait out retry delays, and 2,000
// tasks waiting behind them: every button (pause and resume on the lanes,
// cancel, replay and delete in the lists) is inside the viewport and inside
// its section's box, and the Queues table counts what `stats --json`
// (Client.Stats over its default hour) counts.
func TestDashboardFitsAt1400And1024(t *testing.T) {
	b := setup(t)
	ctx := testContext(t)
	_, err := b.client.Solve(ctx, turnstile("solved-0", "https://shop.example/checkout"))
	require.NoError(t, err)
	_, err = b.client.Solve(ctx, turnstile("dead-0", "https://bad.example/checkout"))
	require.ErrorIs(t, err, stream.ErrNotSolved)
	// The emulator answers ERROR_CAPTCHA_UNSOLVABLE for its demo site key
	// "unsolvable": each attempt is retried after a delay.
	var backoff []stream.Task
	for i := range 6 {
		backoff = append(backoff, stream.Task{ID: fmt.Sprintf("backoff-%d", i), Method: "userrecaptcha",
			Params: stream.Params{"googlekey": fakeapi.DemoUnsolvable, "pageurl": fmt.Sprintf("https://forum.example/%d", i)}})
	}
	_, err = b.client.SubmitAll(ctx, backoff)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		ts, err := b.client.Tasks(ctx, stream.TaskFilter{Status: stream.TaskRetrying})
		return err == nil && len(ts) == len(backoff)
	}, 20*time.Second, 10*time.Millisecond, "the unsolvable tasks never all waited out a retry delay")
	require.NoError(t, b.admin.PauseLane(ctx, stream.LaneSlow, time.Now().Add(time.Hour)))
	const n = 2000
	tasks := make([]stream.Task, n)
	for i := range tasks {
		id := fmt.Sprintf("wait-%04d", i)
		if i%2 == 0 {
			tasks[i] = stream.Task{ID: id, Method: "userrecaptcha", Params: stream.Params{"googlekey": "6Le-key", "pageurl": "https://forum.example/b"}}
		} else {
			tasks[i] = stream.Task{ID: id, Method: "hcaptcha", Params: stream.Params{"sitekey": "hc-key", "pageurl": "https://tickets.example/c"}}
		}
		if i%7 == 0 {
			tasks[i].Priority = stream.PriorityHigh
		}
	}
	for chunk := range sliceChunks(tasks, 500) {
		_, err := b.client.SubmitAll(ctx, chunk)
		require.NoError(t, err)
	}

	page, problems := browser(t)
	for _, width := range []int64{1400, 1024} {
		require.NoError(t, chromedp.Do(page, chromedp.EmulateViewport(width, 900), chromedp.Navigate(b.web.URL),
			chromedp.WaitVisible(`#live.on`), waitText(`#range`, "of 2,00"),
			waitText(`#queues tr[data-lane="slow"][data-priority="normal"]`, "deadlines pass before it resumes")))

		// The table against stats, once both read the same moment: the
		// retries' delays end meanwhile, moving tasks from retrying to
		// queued.
		var shown map[string][3]int
		var st stream.Stats
		agree := func() bool {
			shown, err = chromedp.Run(page, chromedp.Evaluate[map[string][3]int](queueCounts))
			require.NoError(t, err)
			st, err = b.client.Stats(ctx, time.Hour)
			require.NoError(t, err)
			want := map[string][3]int{}
			for _, q := range st.Queues {
				want[string(q.Lane)+" "+string(q.Priority)] = [3]int{int(q.Queued), q.Solving, q.Retrying}
			}
			return fmt.Sprint(want) == fmt.Sprint(shown)
		}
		require.Eventually(t, agree, 20*time.Second, 100*time.Millisecond, "the page shows %v, stats --json %+v", shown, st.Queues)
		require.Equal(t, uint64(n+len(backoff)), st.Queued+uint64(st.Retrying), "every waiting task in a column")

		for _, tab := range []string{"tasks", "dead"} {
			require.NoError(t, chromedp.Do(page, chromedp.Click(fmt.Sprintf(`.tab[data-tab=%q]`, tab)), chromedp.WaitVisible(`#list tbody tr[data-task] button`)))
			outside, err := chromedp.Run(page, chromedp.Evaluate[[]string](controlsOutside))
			require.NoError(t, err)
			screenshot(t, page, fmt.Sprintf("dashboard-%dpx-%s.png", width, tab))
			require.Empty(t, outside, "at %d px, the %s tab", width, tab)
		}
	}
	require.Empty(t, problems(), "no console errors")
}
