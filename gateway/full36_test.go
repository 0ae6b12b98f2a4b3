package gateway_test

import (
	"cmp"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/gateway"
	"github.com/captchaq/captchaq/internal/dialect/createtask"
	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/streamtest"
)

// boundStream sets the stream's byte limit to room bytes more than it
// holds, as an operator's --max-bytes does, before the gateway starts.
func boundStream(t *testing.T, env *streamtest.Env, room int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := jetstream.New(env.Conn)
	require.NoError(t, err)
	s, err := js.Stream(ctx, cmp.Or(env.Topology.Stream, stream.DefaultStream))
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	cfg := info.Config
	cfg.MaxBytes = int64(info.State.Bytes) + room
	_, err = js.UpdateStream(ctx, cfg)
	require.NoError(t, err)
}

// createTask against a full stream (its byte limit reached, with room kept
// for the records of every queued task) is answered in the dialect with
// ERROR_NO_SLOT_AVAILABLE, errorId 2: the code the services give when
// "the queue of your captchas is too long and we temporary do not accept
// more captchas from you" (2captcha.com/api-docs/error-codes, id 2;
// anti-captcha.com/apidoc/errors, id 2: no free workers, retry later),
// which their clients retry; in.php, in both its shapes, answers the same
// code. Nothing accepted is lost, nothing is paid while no worker runs, and
// once workers finish the queued tasks the gateway takes tasks again: every
// accepted task is solved and paid once, none refused is paid.
func TestCreateTaskAgainstAFullStream(t *testing.T) {
	t.Parallel()
	env := streamtest.Start(t, streamtest.WithWorkers(0))
	boundStream(t, env, 48<<10)
	b := serve(t, env, gateway.Config{Conn: env.Connect(), Topology: env.Topology, Keys: []gateway.Key{alice, bob}, Now: env.Now,
		Limits: gateway.Limits{Submits: -1}})
	task := map[string]any{"type": "TurnstileTaskProxyless", "websiteURL": "https://shop.example/checkout", "websiteKey": "0x4AAAAAAABkMYinukE8nzY"}

	var accepted []int64
	var full reply
	for {
		r := b.postJSON(t, "createTask", map[string]any{"clientKey": alice.Key, "task": task})
		if r.str("errorCode") != "" {
			full = r
			break
		}
		accepted = append(accepted, r.num(t, "taskId"))
		require.Less(t, len(accepted), 100, "a stream with 48 KB of room never filled")
	}
	t.Logf("createTask accepted %d tasks, then answered %v", len(accepted), full)
	require.NotEmpty(t, accepted)
	require.Equal(t, createtask.CodeNoSlotAvailable, full.str("errorCode"))
	require.Equal(t, int64(2), full.num(t, "errorId"))
	require.Contains(t, full.str("errorDescription"), "retry later")
	require.NotContains(t, full.str("errorDescription"), alice.Key)
	_, hasID := full["taskId"]
	require.False(t, hasID, "no task id for a task not taken: %v", full)

	require.Equal(t, "ERROR_NO_SLOT_AVAILABLE", b.call(t, "in.php", append([]string{"key", bob.Key}, turnstile...)...), "another key, the classic dialect")
	var classic struct {
		Status  int    `json:"status"`
		Request string `json:"request"`
	}
	require.NoError(t, json.Unmarshal([]byte(b.call(t, "in.php", append([]string{"key", alice.Key, "json", "1"}, turnstile...)...)), &classic))
	require.Equal(t, 0, classic.Status)
	require.Equal(t, "ERROR_NO_SLOT_AVAILABLE", classic.Request)

	// Every accepted task waits, none paid.
	for _, id := range accepted {
		r := b.postJSON(t, "getTaskResult", map[string]any{"clientKey": alice.Key, "taskId": id})
		require.Equal(t, createtask.StatusProcessing, r.str("status"), "task %d: %v", id, r)
	}
	require.Zero(t, env.Emulator.Stats().Submitted, "nothing paid while no worker runs")

	// Workers come: every accepted task is solved, and the room its
	// records were kept comes back.
	start := time.Now()
	env.StartWorker(env.WorkerConfig())
	for _, id := range accepted {
		r := b.result(t, alice, id)
		require.Equal(t, createtask.StatusReady, r.str("status"), "task %d: %v", id, r)
	}
	require.Equal(t, len(accepted), env.Emulator.Stats().Submitted, "each accepted task paid once, none refused paid")

	t.Logf("the %d accepted tasks solved %s after the worker started", len(accepted), time.Since(start).Round(time.Millisecond))
	require.Less(t, time.Since(start), 5*time.Second, "the room kept for them is there: no attempt waits a lease for it")
	start = time.Now()
	var again reply
	require.Eventually(t, func() bool {
		again = b.postJSON(t, "createTask", map[string]any{"clientKey": alice.Key, "task": task})
		return again.str("errorCode") == ""
	}, 10*time.Second, 50*time.Millisecond, "createTask takes tasks again once the queued ones are done: %v", again)
	t.Logf("createTask took a task again %s after", time.Since(start).Round(time.Millisecond))
	r := b.result(t, alice, again.num(t, "taskId"))
	require.Equal(t, createtask.StatusReady, r.str("status"), "%v", r)
	out := b.call(t, "in.php", append([]string{"key", bob.Key}, turnstile...)...)
	require.True(t, strings.HasPrefix(out, "OK|"), "in.php takes tasks again: %s", out)
	require.True(t, strings.HasPrefix(b.await(t, bob, strings.TrimPrefix(out, "OK|")), "OK|"))
	require.Equal(t, len(accepted)+2, env.Emulator.Stats().Submitted, "each paid once")
}
