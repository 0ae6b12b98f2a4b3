package dashboard

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/stream"
)

// The page's cancel, on a task that waits on a paused lane: once the admin
// has signed in, one click, and the row says canceled; when the lane
// resumes the task ends dead (canceled) without a call to the service,
// while a task queued beside it is solved and paid for once.
func TestCancelAQueuedTaskInThePage(t *testing.T) {
	b := setup(t)
	ctx := testContext(t)
	require.NoError(t, b.admin.PauseLane(ctx, stream.LaneFast, time.Now().Add(time.Hour)))
	_, err := b.client.SubmitAll(ctx, []stream.Task{turnstile("stop-me", "https://shop.example/"), turnstile("keep-me", "https://shop.example/")})
	require.NoError(t, err)

	page, problems := browser(t)
	require.NoError(t, chromedp.Do(page, chromedp.Navigate(b.web.URL+"/#tasks?state=queued"), chromedp.WaitVisible(`#list tr[data-task="stop-me"] button`)))
	signIn(t, page, "admin")
	require.NoError(t, chromedp.Do(page, chromedp.Click(`#list tr[data-task="stop-me"] button`),
		waitText(`#notice-msg`, "task stop-me canceled: it ends dead/canceled without a call to the service"),
		waitText(`#list tr[data-task="stop-me"]`, "queued (canceled)")))
	require.Empty(t, problems(), "no console errors")

	require.NoError(t, b.admin.ResumeLane(ctx, stream.LaneFast))
	out, err := b.client.Wait(ctx, "stop-me")
	require.ErrorIs(t, err, stream.ErrNotSolved)
	require.Equal(t, string(retry.ReasonCanceled), out.Reason)
	_, err = b.client.Wait(ctx, "keep-me")
	require.NoError(t, err)
	require.Equal(t, 1, b.api.Stats().Submitted, "only the task not canceled was paid for")
}
