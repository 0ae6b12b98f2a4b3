package provider_test

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/solver/provider"
	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/streamtest"
	"github.com/captchaq/captchaq/stream/wire"
)

// lockedLog is a worker's log, read while the worker writes it.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.b.Write(p)
	}), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestHeartbeatCarriesEveryDetachedTask: a worker holds more detached
// captchas at a per-solve fallback (max_in_flight) than one heartbeat
// message can name on a server of max_payload 16 KiB (150 tasks of
// 64-character ids, some 12 KiB of list against the stream's 8 KiB
// messages). Its heartbeats go on being stored, name every task it holds,
// and a second worker given every task again (the broker lost its
// consumer's delivery state: the consumer recreated) waits for the holder
// instead of counting its attempts as crashes; each captcha is paid once.
// Before, every beat was refused (err_code 10054, message size exceeds
// maximum allowed), said at debug level only, and once as "the stream does
// not answer" though it answered; the worker had no heartbeat after
// HeartbeatTTL (no worker in stats or the dashboard) while it held 150
// tasks, and the next worker found none: its attempts were no longer held
// off by the holder's heartbeat.
func TestHeartbeatCarriesEveryDetachedTask(t *testing.T) {
	t.Parallel()
	const n = 150
	// Solving in 16–32 s: every captcha is still at the service when the
	// test ends.
	spare := startService(t, provider.Entry{Name: "spare", Dialect: provider.Classic, BaseURL: "http://x", KeyEnv: "K",
		Service: fakeapi.Service2Captcha, Methods: []string{"userrecaptcha", "base64"}, Billing: spareBilling, Role: provider.Primary}, 2, 16*time.Second)
	env := streamtest.Start(t, streamtest.WithWorkers(0), streamtest.WithMaxPayload(16<<10))
	newSet := func() *provider.Set {
		set, err := provider.New(provider.Config{Members: []provider.Member{spare.member}})
		require.NoError(t, err)
		return set
	}
	var holderLog, nextLog lockedLog
	env.StartWorker(stream.WorkerConfig{Solver: newSet(), Threads: 4, Name: "holder", Logger: holderLog.logger()})
	ctx := t.Context()
	for i := range n {
		_, err := env.Client.Submit(ctx, stream.Task{ID: fmt.Sprintf("%s-%03d", strings.Repeat("h", 60), i), Method: "userrecaptcha", Params: taskParams(i)})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return spare.api.Stats().Concurrent == n }, 30*time.Second, 5*time.Millisecond,
		"the fallback holds every task's captcha, none on a thread")
	mark := time.Now()
	var holder stream.WorkerInfo
	require.Eventually(t, func() bool {
		ws, err := env.Client.Workers(ctx)
		if err != nil || len(ws) != 1 || !ws[0].At.After(mark) {
			return false
		}
		holder = ws[0]
		return true
	}, 3*wire.HeartbeatEvery, 10*time.Millisecond, "no heartbeat of the holder since it held its %d tasks; its log:\n%s", n, holderLog.String())
	t.Logf("the holder's heartbeat: %d tasks held, %d named in its last message", holder.Held, len(holder.Tasks))
	require.Equal(t, n, holder.Held)

	// The broker loses the lane's delivery state: every task is delivered
	// again, to a second worker, while the holder polls their captchas.
	js, err := jetstream.New(env.Connect())
	require.NoError(t, err)
	s, err := js.Stream(ctx, "CAPTCHA")
	require.NoError(t, err)
	const lane = "workers-slow-normal"
	c, err := s.Consumer(ctx, lane)
	require.NoError(t, err)
	cfg := c.CachedInfo().Config
	// A delivery numbered 1 is taken for the task's first and fails to
	// record its attempt; it comes back within a second, numbered 2.
	cfg.AckWait = time.Second
	// Until the lane is deleted, nothing kept the holder from the stream.
	require.NotContains(t, holderLog.String(), "does not answer", "the stream answered all along")
	require.NoError(t, s.DeleteConsumer(ctx, lane))
	_, err = s.CreateConsumer(ctx, cfg)
	require.NoError(t, err)
	env.StartWorker(stream.WorkerConfig{Solver: newSet(), Threads: 4, Name: "next", Logger: nextLog.logger()})
	waited := func() int {
		return strings.Count(nextLog.String()+holderLog.String(), "holds the task: waiting for it")
	}
	if !assert.Eventually(t, func() bool { return waited() >= n }, 20*time.Second, 10*time.Millisecond) {
		t.Fatalf("%d of %d redelivered tasks waited for their holder; the next worker's log:\n%s\nthe holder's:\n%s", waited(), n, nextLog.String(), holderLog.String())
	}
	byNext := strings.Count(nextLog.String(), "holds the task: waiting for it")
	t.Logf("%d redeliveries waited at the next worker (from the heartbeat's parts), %d at the holder", byNext, waited()-byNext)
	require.Positive(t, byNext, "the next worker read no split heartbeat")
	require.NotContains(t, nextLog.String()+holderLog.String(), "died with its worker")
	// While the lane is deleted and made again, a fetch of the holder's
	// finds no consumer ("no responders"), which it says once: only that,
	// and said answered again (CI's loaded preview fetched in that window).
	// Its heartbeats were stored all along (the next worker waited).
	if hl := holderLog.String(); strings.Contains(hl, "does not answer") {
		for _, line := range strings.Split(hl, "\n") {
			if strings.Contains(line, "does not answer") {
				require.Contains(t, line, `failed="fetch tasks"`, "only the lane's fetch failed, while it was made again")
			}
		}
		require.Contains(t, hl, "the stream answers again")
	}
	ss := spare.api.Stats()
	t.Logf("the fallback accepted %d captchas for %d tasks", ss.Submitted, n)
	require.Equal(t, n, ss.Submitted, "one captcha paid per task")
	require.Empty(t, ss.Repeated())
}
