package stream

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/stream/broker"
	"github.com/captchaq/captchaq/stream/wire"
)

// payloadSetup runs the shipped nats.conf (max_payload 4 MB, the roles)
// with the fast lane limited to two tasks at once, a worker on the worker
// role, and returns the server, the admin's JetStream, and a producer's
// connection and client.
func payloadSetup(t *testing.T) (*server.Server, jetstream.JetStream, *nats.Conn, *Client) {
	t.Helper()
	setRoleEnv(t)
	ns, err := broker.Start(broker.Config{ConfigFile: shippedConfig, Port: -1, StoreDir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	ctx := testContext(t)
	top := Topology{LaneLimits: map[Lane]int{LaneFast: 2}}
	anc, _ := roleConn(t, ns, "admin")
	ajs, err := jetstream.New(anc)
	require.NoError(t, err)
	_, err = EnsureTopology(ctx, ajs.Conn(), top, true)
	require.NoError(t, err)

	wnc, _ := roleConn(t, ns, "worker")
	w, err := NewWorker(ctx, wnc, WorkerConfig{Solver: tokenSolver(), Threads: 4, Topology: top, IdleCheck: 50 * time.Millisecond})
	require.NoError(t, err)
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	t.Cleanup(func() { stop(); <-done })

	pnc, _ := roleConn(t, ns, "producer")
	producer, err := NewClient(ctx, pnc, ClientConfig{Name: "producer"})
	require.NoError(t, err)
	return ns, ajs, pnc, producer
}

// rawTask publishes, as a producer with a plain NATS client would, a
// base64 image task on the fast lane whose message (headers and body) is
// exactly size bytes.
func rawTask(ctx context.Context, js jetstream.JetStream, id string, size int) (*jetstream.PubAck, error) {
	msg := nats.NewMsg(wire.TaskSubject(LaneFast, wire.PriorityNormal, id))
	msg.Header.Set("Nats-Msg-Id", id)
	hdr := len("NATS/1.0\r\n") + len("Nats-Msg-Id: ") + len(id) + len("\r\n") + len("\r\n")
	head, tail := `{"id":"`+id+`","method":"base64","params":{"body":"`, `"}}`
	msg.Data = []byte(head + strings.Repeat("A", size-hdr-len(head)-len(tail)) + tail)
	return js.PublishMsg(ctx, msg)
}

// Every task message the stream accepts fits its own dead letter: one at
// max_payload is refused at the door, one just under the stream's limit
// ends dead (its image is far too large) with a dead letter, and neither
// keeps the fast lane from serving a good task.
func TestTaskNearMaxPayloadEndsDeadAndLeavesTheLane(t *testing.T) {
	t.Parallel()
	_, ajs, pnc, producer := payloadSetup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pjs, err := jetstream.New(pnc)
	require.NoError(t, err)
	mp := int(pnc.MaxPayload())
	require.Equal(t, 4<<20, mp, "the shipped max_payload")

	_, err = rawTask(ctx, pjs, "at-max-payload", mp)
	var apiErr *jetstream.APIError
	require.True(t, errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum,
		"a task at max_payload could not be dead-lettered whole: the stream refuses it (got %v)", err)

	s, err := ajs.Stream(ctx, DefaultStream)
	require.NoError(t, err)
	limit := int(s.CachedInfo().Config.MaxMsgSize)
	require.Positive(t, limit)
	require.Equal(t, int64(limit), wire.MaxTaskMessage(int64(mp)), "the limit the wire contract states")
	for _, id := range []string{"near-max-1", "near-max-2"} {
		_, err := rawTask(ctx, pjs, id, limit-1)
		require.NoError(t, err, "%s: under the stream's limit", id)
	}
	_, err = rawTask(ctx, pjs, "whole-1", int(wire.WholeDeadLetterMax(int64(mp))))
	require.NoError(t, err)

	wctx, wcancel := context.WithTimeout(ctx, 90*time.Second) // 4-MB messages: slow under the race detector
	defer wcancel()
	for _, id := range []string{"near-max-1", "near-max-2", "whole-1"} {
		out, err := producer.Wait(wctx, id)
		require.ErrorIs(t, err, ErrNotSolved, id)
		require.Equal(t, string(retry.ReasonInvalidTask), out.Reason, id)
	}
	out, err := producer.Solve(wctx, turnstileTask("good-fast"))
	require.NoError(t, err, "the fast lane still serves")
	require.NotEmpty(t, out.Solution)

	admin, err := NewClient(ctx, pnc, ClientConfig{})
	require.NoError(t, err)
	d, err := admin.DeadLetterOf(ctx, "near-max-1")
	require.NoError(t, err)
	require.Equal(t, retry.ReasonInvalidTask, d.Reason)
	require.Equal(t, limit-1-len("NATS/1.0\r\nNats-Msg-Id: near-max-1\r\n\r\n"), d.BodyOmitted,
		"a task too large to be dead-lettered whole is dead-lettered without its body, and the letter says so")
	require.Contains(t, d.Detail, "left out")
	// Read directly: a 4-MB letter is slow to come through a scan here.
	whole, err := s.GetLastMsgForSubject(ctx, wire.DeadSubject("whole-1"))
	require.NoError(t, err)
	require.Empty(t, whole.Header.Get(wire.HeaderBodyOmitted), "a task up to the wire contract's limit is dead-lettered whole")
	require.Greater(t, len(whole.Data), limit-2*wire.DeadLetterRoom)
}

// On a stream made before it had its message limit (or changed by hand), a
// task that cannot be dead-lettered whole is dead-lettered without its
// body, and the letter says so.
func TestTaskTooLargeForItsDeadLetterIsDeadLetteredWithoutBody(t *testing.T) {
	t.Parallel()
	_, ajs, pnc, producer := payloadSetup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := ajs.Stream(ctx, DefaultStream)
	require.NoError(t, err)
	cfg := s.CachedInfo().Config
	cfg.MaxMsgSize = -1
	_, err = ajs.UpdateStream(ctx, cfg)
	require.NoError(t, err)

	pjs, err := jetstream.New(pnc)
	require.NoError(t, err)
	mp := int(pnc.MaxPayload())
	_, err = rawTask(ctx, pjs, "whole-max", mp)
	require.NoError(t, err, "the stream without a limit takes it")

	wctx, wcancel := context.WithTimeout(ctx, 90*time.Second) // 4-MB messages: slow under the race detector
	defer wcancel()
	out, err := producer.Wait(wctx, "whole-max")
	require.ErrorIs(t, err, ErrNotSolved)
	require.Equal(t, string(retry.ReasonInvalidTask), out.Reason)
	d, err := producer.DeadLetterOf(ctx, "whole-max")
	require.NoError(t, err)
	require.Positive(t, d.BodyOmitted, "the letter says its body was left out")
	require.Contains(t, d.Detail, "left out")
	_, err = producer.Solve(wctx, turnstileTask("good-fast-2"))
	require.NoError(t, err, "the fast lane still serves")
}
