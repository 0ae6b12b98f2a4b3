package wire

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// The envelope check holds a message to what the stream says of it.
func TestCheckEnvelope(t *testing.T) {
	t.Parallel()
	h := func(kv ...string) nats.Header {
		out := nats.Header{}
		for i := 0; i < len(kv); i += 2 {
			out.Set(kv[i], kv[i+1])
		}
		return out
	}
	require.NoError(t, CheckEnvelope("a1", h(HeaderMsgID, "a1"), Task{}))
	require.NoError(t, CheckEnvelope("a1", h(HeaderMsgID, "a1", HeaderTaskID, "a1"), Task{ID: "a1"}))
	require.NoError(t, CheckEnvelope("a1", h(HeaderMsgID, "a1.replay.7", HeaderReplayedBy, "7"), Task{}))
	for name, c := range map[string]struct {
		id  string
		h   nats.Header
		t   Task
		err string
	}{
		"no message id":        {"a1", h(), Task{}, "Nats-Msg-Id missing"},
		"another message id":   {"a1", h(HeaderMsgID, "result.a1.3"), Task{}, "is not the task id"},
		"replay id, no header": {"a1", h(HeaderMsgID, "a1.replay.7"), Task{}, "is not the task id"},
		"id header differs":    {"a1", h(HeaderMsgID, "a1", HeaderTaskID, "b2"), Task{}, "differs from the id"},
		"body id differs":      {"a1", h(HeaderMsgID, "a1"), Task{ID: "b2"}, "in the body differs"},
		"invalid id":           {"order#1", h(HeaderMsgID, "order#1"), Task{}, "subject: id"},
	} {
		require.ErrorContains(t, CheckEnvelope(c.id, c.h, c.t), c.err, name)
	}
}
