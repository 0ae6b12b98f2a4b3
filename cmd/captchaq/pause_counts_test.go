package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/dashboard"
	"github.com/captchaq/captchaq/internal/logbuf"
	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
)

// The slow lane paused while some of its tasks wait out a retry delay:
// once the delays end, stats, stats --json, task ls and the dashboard's
// snapshot put every waiting task in the same column, and each says that
// their deadlines (the default ten minutes) pass before the pause ends.
// Nothing is paid while the lane is paused.
func TestCountsAgreeWithALanePausedDuringRetries(t *testing.T) {
	t.Parallel()
	natsURL, _, client := listeningServer(t, stream.Topology{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// "unsolvable": ERROR_CAPTCHA_UNSOLVABLE from res.php (fakeapi's demo
	// site keys), a transient failure that is retried after the delay.
	api, emu := emulatorURL(t, fakeapi.Config{TimeScale: 0.001})
	const delay = 5 * time.Second // long enough to pause the lane within it
	startWorkerWith(t, ctx, natsURL, emu, stream.WorkerConfig{Threads: 8, Policy: retry.Policy{InitialInterval: delay, NoJitter: true}})

	recaptcha := func(id string, high bool) stream.Task {
		t := stream.Task{ID: id, Method: "userrecaptcha", Params: stream.Params{"googlekey": fakeapi.DemoUnsolvable, "pageurl": "https://shop.example/" + id}}
		if high {
			t.Priority = "high"
		}
		return t
	}
	var tasks []stream.Task
	for i := range 3 {
		tasks = append(tasks, stream.Task{ID: fmt.Sprintf("ok%d", i), Method: "turnstile", Params: stream.Params{"sitekey": "0x4AAAAAAAB", "pageurl": "https://shop.example/"}})
	}
	for i := range 6 {
		tasks = append(tasks, recaptcha(fmt.Sprintf("retry%d", i), i >= 4))
	}
	receipts, err := client.SubmitAll(ctx, tasks[:3])
	require.NoError(t, err)
	require.NoError(t, client.WaitAll(ctx, receipts, func(o stream.Outcome, err error) {
		require.NoError(t, err)
		require.Equal(t, stream.StatusSolved, o.Status)
	}))
	_, err = client.SubmitAll(ctx, tasks[3:])
	require.NoError(t, err)
	countStatus := func(want stream.TaskStatus) int {
		ts, err := client.Tasks(ctx, stream.TaskFilter{})
		require.NoError(t, err)
		n := 0
		for _, ti := range ts {
			if ti.Status == want {
				n++
			}
		}
		return n
	}
	require.Eventually(t, func() bool { return countStatus(stream.TaskRetrying) == 6 }, 30*time.Second, 10*time.Millisecond,
		"the six unsolvable tasks never all waited out a retry delay")
	r := captchaq(t, natsURL, "lane", "pause", "slow", "--for", "20m")
	require.Zero(t, r.code, r.stderr)
	paid := api.Stats().Submitted
	require.Equal(t, 9, paid, "three solved and the six first attempts, each paid once")
	var later []stream.Task
	for i := range 4 {
		later = append(later, recaptcha(fmt.Sprintf("later%d", i), i == 3))
	}
	_, err = client.SubmitAll(ctx, later)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return countStatus(stream.TaskQueued) == 10 }, 3*delay, 10*time.Millisecond,
		"the retries' delays never ended")

	// The four views, read while nothing moves.
	r = captchaq(t, natsURL, "stats", "--json")
	require.Zero(t, r.code, r.stderr)
	var st stream.Stats
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	r = captchaq(t, natsURL, "stats")
	require.Zero(t, r.code, r.stderr)
	text := r.stdout
	r = captchaq(t, natsURL, "task", "ls", "--json")
	require.Zero(t, r.code, r.stderr)
	listed := jsonLines[stream.TaskInfo](t, r.stdout)
	snap := dashboardSnapshot(ctx, t, natsURL)

	queued := map[string]uint64{}
	var firstDeadline time.Time
	for _, ti := range listed {
		require.Equal(t, stream.TaskQueued, ti.Status, "%+v", ti)
		queued[string(ti.Lane)+" "+string(ti.Priority)]++
		if firstDeadline.IsZero() || ti.Deadline.Before(firstDeadline) {
			firstDeadline = ti.Deadline
		}
	}
	require.Equal(t, map[string]uint64{"slow normal": 7, "slow high": 3}, queued)
	for name, s := range map[string]stream.Stats{"stats --json": st, "the dashboard": snap.Stats} {
		require.Equal(t, uint64(10), s.Queued, "%s: %+v", name, s.Queues)
		require.Zero(t, s.Solving, name)
		require.Zero(t, s.Retrying, name)
		require.Equal(t, 10, s.DeadlinesInPause, name)
		require.True(t, firstDeadline.Equal(s.FirstDeadline), "%s: first deadline %s, want %s", name, s.FirstDeadline, firstDeadline)
		for _, q := range s.Queues {
			require.Equal(t, queued[string(q.Lane)+" "+string(q.Priority)], q.Queued, "%s: %+v", name, q)
			require.Equal(t, int(q.Queued), q.DeadlinesInPause, "%s: every waiting task's deadline passes in the pause: %+v", name, q)
		}
	}
	require.Contains(t, text, "warning: lane slow is paused with 10 waiting tasks whose deadline passes before the pause ends (the first passes at "+
		firstDeadline.UTC().Format(time.RFC3339)+", in ")
	require.Contains(t, text, "they end dead with DEADLINE_PASSED unless `captchaq lane resume slow` comes first")
	require.NotContains(t, text, "lane fast is paused")
	var total []string
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "total ") {
			total = strings.Fields(line)
		}
	}
	require.Equal(t, []string{"total", "10", "0", "0"}, total[:4], text)
	require.Equal(t, paid, api.Stats().Submitted, "a paused lane pays nothing")
}

// dashboardSnapshot runs `captchaq dashboard` against natsURL and reads one
// snapshot, as the page gets it.
func dashboardSnapshot(ctx context.Context, t *testing.T, natsURL string) dashboard.Snapshot {
	t.Helper()
	addr := freeAddr(t)
	dctx, stop := context.WithCancel(ctx)
	defer stop()
	var out logbuf.Buffer
	done := make(chan error, 1)
	go func() {
		done <- runDashboard(dctx, []string{"--addr", addr, "--nats", natsURL, "--log-level", "error"}, &out, io.Discard)
	}()
	defer func() { stop(); require.NoError(t, <-done) }()
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "captchaq dashboard on http://"+addr+"/") }, 10*time.Second, 10*time.Millisecond)
	body, code := httpGet(t, "http://"+addr+"/api/snapshot")
	require.Equal(t, 200, code, body)
	var snap dashboard.Snapshot
	require.NoError(t, json.Unmarshal([]byte(body), &snap))
	require.Empty(t, snap.Error)
	return snap
}
