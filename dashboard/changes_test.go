package dashboard

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream"
)

// client is a browser of the dashboard without the browser: it reads the
// page's token and sends the admin's changes as the page does.
type client struct {
	t    *testing.T
	b    *bundle
	csrf string
}

func newClient(t *testing.T, b *bundle) *client {
	resp, err := http.Get(b.web.URL + "/")
	require.NoError(t, err)
	page, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	return &client{t: t, b: b, csrf: between(string(page), `<meta name="csrf" content="`, `"`)}
}

func (c *client) post(path, body string) (int, map[string]string) {
	req, err := http.NewRequest(http.MethodPost, c.b.web.URL+path, strings.NewReader(body))
	require.NoError(c.t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Captchaq-CSRF", c.csrf)
	req.Header.Set("Origin", c.b.web.URL)
	req.SetBasicAuth("admin", passwords["admin"])
	resp, err := http.DefaultClient.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	var out map[string]string
	require.NoError(c.t, json.NewDecoder(resp.Body).Decode(&out))
	return resp.StatusCode, out
}

func (c *client) get(path string, v any) int {
	resp, err := http.Get(c.b.web.URL + path)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	require.NoError(c.t, json.NewDecoder(resp.Body).Decode(v))
	return resp.StatusCode
}

// Per-letter delete and replay, and bulk replay of a filtered set through
// the API: a canceled task's letter is not replayed, a bulk change names
// the newest letter it covers, bad filters are named.
func TestItemAndBulkChanges(t *testing.T) {
	b := setup(t)
	scaleFixture(t, b, 5)
	c := newClient(t, b)

	var dead page[deadRow]
	require.Equal(t, http.StatusOK, c.get("/api/dead?reason=permanent", &dead))
	require.Equal(t, 3, dead.Total)
	for _, d := range dead.Items {
		require.True(t, d.Replayable, d.ID)
		require.Equal(t, "null", string(d.Task), "no task body (page URL) reaches the browser")
	}
	var canceled page[deadRow]
	require.Equal(t, http.StatusOK, c.get("/api/dead?reason=canceled", &canceled))
	require.Equal(t, 1, canceled.Total)
	require.False(t, canceled.Items[0].Replayable)

	var bad map[string]string
	require.Equal(t, http.StatusBadRequest, c.get("/api/dead?reason=tired&since=yesterday&limit=5000", &bad))
	require.Contains(t, bad["error"], `reason "tired": want one of permanent`)
	require.Contains(t, bad["error"], `since "yesterday"`)
	require.Contains(t, bad["error"], `limit "5000"`)
	// A method no task can have matches nothing: refused, naming the near one.
	for _, list := range []string{"tasks", "outcomes", "dead"} {
		bad = nil
		require.Equal(t, http.StatusBadRequest, c.get("/api/"+list+"?method=turnstyle", &bad), list)
		require.Contains(t, bad["error"], `method "turnstyle": not a method captchaq solves (did you mean turnstile?); want one of `, list)
	}
	code, out := c.post("/api/purge", fmt.Sprintf(`{"method":"turnstyle","upto":%d}`, dead.Items[0].Seq))
	require.Equal(t, http.StatusBadRequest, code, out)
	require.Contains(t, out["error"], `method "turnstyle"`)

	code, out = c.post("/api/replay", `{"id":"canceled-0"}`)
	require.Equal(t, http.StatusBadRequest, code, out)
	require.Contains(t, out["error"], "was canceled")

	code, out = c.post("/api/replay-all", `{"reason":"permanent"}`)
	require.Equal(t, http.StatusBadRequest, code, out)
	require.Contains(t, out["error"], "want upto")

	// Bulk replay of the permanent ones, confirmed for the two oldest.
	upto := dead.Items[1].Seq // newest first
	code, out = c.post("/api/replay-all", fmt.Sprintf(`{"reason":"permanent","upto":%d}`, upto))
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, "replayed 2 task(s)", out["ok"])
	ds, err := b.admin.DeadLetters(testContext(t), stream.DeadFilter{})
	require.NoError(t, err)
	replayed := map[string]bool{}
	for _, d := range ds {
		if d.Replayed != nil {
			replayed[d.ID] = true
		}
	}
	require.Equal(t, map[string]bool{dead.Items[1].ID: true, dead.Items[2].ID: true}, replayed)

	// Delete one letter: the canceled one.
	code, out = c.post("/api/delete", fmt.Sprintf(`{"seq":%d}`, canceled.Items[0].Seq))
	require.Equal(t, http.StatusOK, code, out)
	require.Contains(t, out["ok"], "canceled-0")
	code, out = c.post("/api/delete", fmt.Sprintf(`{"seq":%d}`, canceled.Items[0].Seq))
	require.Equal(t, http.StatusConflict, code, out)
	_, err = b.admin.DeadLetterOf(testContext(t), "canceled-0")
	require.ErrorIs(t, err, stream.ErrNotFound)

	// Tasks: paged and filtered.
	var tasks page[taskRow]
	require.Equal(t, http.StatusOK, c.get("/api/tasks?limit=2&offset=2", &tasks))
	require.Equal(t, 7, tasks.Total, "5 waiting and the 2 replayed (the lanes are paused)")
	require.Len(t, tasks.Items, 2)
	require.Equal(t, "wait-0002", tasks.Items[0].ID)
	require.Equal(t, []string{"hcaptcha", "turnstile", "userrecaptcha"}, tasks.Methods)
	require.Equal(t, http.StatusOK, c.get("/api/tasks?state=canceled", &tasks))
	require.Equal(t, 3, tasks.Total)
	for _, x := range tasks.Items {
		require.False(t, x.Cancelable, "canceled already: no cancel")
	}
	require.Equal(t, http.StatusOK, c.get("/api/tasks?method=hcaptcha&since=1h", &tasks))
	require.Equal(t, 1, tasks.Total)
	require.Equal(t, http.StatusOK, c.get("/api/tasks?until="+time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), &tasks))
	require.Zero(t, tasks.Total)

	var outcomes page[stream.OutcomeRecord]
	require.Equal(t, http.StatusOK, c.get("/api/outcomes?status=solved", &outcomes))
	require.Equal(t, 3, outcomes.Total)
	for _, o := range outcomes.Items {
		require.Empty(t, o.Solution, "no token reaches the browser")
		require.False(t, o.At.IsZero())
	}
}
