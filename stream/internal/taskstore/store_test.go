package taskstore_test

// The JetStream store against the embedded server: the compare-and-set and
// write-once rules the executor's tests assume of their store in memory
// hold on the CAPTCHA stream itself.

import (
	"cmp"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/internal/taskstore"
	"github.com/captchaq/captchaq/stream/streamtest"
	"github.com/captchaq/captchaq/stream/wire"
)

func setup(t *testing.T) (context.Context, *taskstore.JetStream) {
	t.Helper()
	env := streamtest.Start(t, streamtest.WithWorkers(0))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	js, err := jetstream.New(env.Conn)
	require.NoError(t, err)
	s, err := js.Stream(ctx, cmp.Or(env.Topology.Stream, stream.DefaultStream))
	require.NoError(t, err)
	tokens, err := js.Stream(ctx, env.Topology.TokenStream())
	require.NoError(t, err)
	return ctx, &taskstore.JetStream{JS: js, Stream: s, Tokens: tokens, NC: env.Conn}
}

func event(t *testing.T, id string, ev wire.Event) *nats.Msg {
	t.Helper()
	msg := nats.NewMsg(wire.EventSubject(id))
	b, err := json.Marshal(ev)
	require.NoError(t, err)
	msg.Data = b
	return msg
}

// A record is appended only on the last sequence over the task's records;
// a task message, which producers publish, does not move it.
func TestAppendIsCompareAndSetOverTheTaskRecords(t *testing.T) {
	t.Parallel()
	ctx, s := setup(t)
	gen, err := s.JS.Publish(ctx, wire.TaskSubject(wire.LaneFast, wire.PriorityNormal, "a1"), []byte(`{}`), jetstream.WithMsgID("a1"))
	require.NoError(t, err)

	first, err := s.Append(ctx, "a1", 0, event(t, "a1", wire.Event{Kind: wire.EventAttempt, Gen: gen.Sequence, Attempts: 1, Worker: "w1"}))
	require.NoError(t, err, "no record of a1 yet: the task message does not count")
	_, err = s.Append(ctx, "a1", 0, event(t, "a1", wire.Event{Kind: wire.EventAttempt, Gen: gen.Sequence, Attempts: 1, Worker: "w2"}))
	require.ErrorIs(t, err, taskstore.ErrConflict, "w1's attempt came first")
	// Another task's record does not move a1's.
	_, err = s.Append(ctx, "b1", 0, event(t, "b1", wire.Event{Kind: wire.EventAttempt, Gen: 99, Attempts: 1, Worker: "w2"}))
	require.NoError(t, err)
	second, err := s.Append(ctx, "a1", first, event(t, "a1", wire.Event{Kind: wire.EventRetry, Gen: gen.Sequence, Attempts: 1, Worker: "w1"}))
	require.NoError(t, err)

	st, err := s.LoadGen(ctx, "a1", gen.Sequence)
	require.NoError(t, err)
	require.Equal(t, second, st.Seq, "the next write expects the last record")
	require.Equal(t, wire.EventRetry, st.Last.Kind)
	require.Equal(t, []string{"w1"}, []string{st.Last.Worker})
}

// A generation's token is written once, and read back while it lives.
func TestTokenIsWrittenOnce(t *testing.T) {
	t.Parallel()
	ctx, s := setup(t)
	put := func(solution string) error {
		msg := nats.NewMsg(wire.TokenSubject("k1", 7))
		b, err := json.Marshal(wire.Outcome{ID: "k1", Status: wire.StatusSolved, Solution: json.RawMessage(solution)})
		require.NoError(t, err)
		msg.Data = b
		_, err = s.PutToken(ctx, "k1", 7, msg, time.Minute, 0)
		return err
	}
	require.NoError(t, put(`"first"`))
	require.ErrorIs(t, put(`"second"`), taskstore.ErrTokenTaken)
	out, found, err := s.Token(ctx, "k1", 7)
	require.NoError(t, err)
	require.True(t, found)
	require.JSONEq(t, `"first"`, string(out.Out.Solution))
	_, found, err = s.Token(ctx, "k1", 8)
	require.NoError(t, err)
	require.False(t, found, "another generation has none")

	_, _, found, err = s.Heartbeat(ctx, "nobody")
	require.NoError(t, err)
	require.False(t, found)
}
