package stream

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/captchaq/captchaq/stream/wire"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// A generation's state is folded from the task's records alone: another
// generation's records, foreign messages and records of other tasks change
// only the sequence to expect. No broker needed.
func TestGenStateFoldsOnlyItsGeneration(t *testing.T) {
	t.Parallel()
	ev := func(gen uint64, kind EventKind, delivery uint64) []byte {
		b, _ := json.Marshal(Event{Kind: kind, Gen: gen, Delivery: delivery, Attempts: 1})
		return b
	}
	hdr := func(gen uint64) nats.Header {
		h := nats.Header{}
		h.Set(wire.HeaderGen, strconv.FormatUint(gen, 10))
		return h
	}
	st := genState{gen: 10}
	st.fold("a", wire.EventSubject("a"), nil, ev(10, EventAttempt, 1), 11)
	st.fold("a", wire.EventSubject("a"), nil, ev(20, EventAttempt, 1), 21) // another generation
	st.fold("a", wire.EventSubject("a"), nil, []byte("not json"), 22)      // a foreign message
	require.Equal(t, EventAttempt, st.last.Kind)
	require.Equal(t, uint64(11), st.lastSeq)
	require.Equal(t, uint64(22), st.seq, "every record moves the sequence to expect")

	before := st
	st.fold("a", wire.ResultSubject("a"), hdr(20), nil, 23) // the other generation's outcome
	st.fold("a", wire.DeadSubject("a"), hdr(20), nil, 24)
	require.False(t, st.outcome)
	require.False(t, st.deadLetter)
	require.True(t, st.sameGen(before), "only other generations wrote: try again on the new sequence")

	st.fold("a", wire.EventSubject("a"), nil, ev(10, EventDead, 1), 25)
	st.fold("a", wire.DeadSubject("a"), hdr(10), nil, 26)
	require.False(t, st.sameGen(before))
	require.True(t, st.deadLetter)
	st.fold("a", wire.ResultSubject("a"), hdr(10), nil, 27)
	require.True(t, st.outcome)
	require.Equal(t, uint64(27), st.seq)

	attempts, crashed := spentAttempts(Event{Kind: EventAttempt, Attempts: 2})
	require.Equal(t, 2, attempts)
	require.True(t, crashed, "an attempt that is still the last event died with its worker")
	attempts, crashed = spentAttempts(Event{Kind: EventRetry, Attempts: 2})
	require.Equal(t, 2, attempts)
	require.False(t, crashed)
}

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
	require.NoError(t, wire.CheckEnvelope("a1", h(wire.HeaderMsgID, "a1"), Task{}))
	require.NoError(t, wire.CheckEnvelope("a1", h(wire.HeaderMsgID, "a1", wire.HeaderTaskID, "a1"), Task{ID: "a1"}))
	require.NoError(t, wire.CheckEnvelope("a1", h(wire.HeaderMsgID, "a1.replay.7", wire.HeaderReplayedBy, "7"), Task{}))
	for name, c := range map[string]struct {
		id  string
		h   nats.Header
		t   Task
		err string
	}{
		"no message id":        {"a1", h(), Task{}, "Nats-Msg-Id missing"},
		"another message id":   {"a1", h(wire.HeaderMsgID, "result.a1.3"), Task{}, "is not the task id"},
		"replay id, no header": {"a1", h(wire.HeaderMsgID, "a1.replay.7"), Task{}, "is not the task id"},
		"id header differs":    {"a1", h(wire.HeaderMsgID, "a1", wire.HeaderTaskID, "b2"), Task{}, "differs from the id"},
		"body id differs":      {"a1", h(wire.HeaderMsgID, "a1"), Task{ID: "b2"}, "in the body differs"},
		"invalid id":           {"order#1", h(wire.HeaderMsgID, "order#1"), Task{}, "subject: id"},
	} {
		require.ErrorContains(t, wire.CheckEnvelope(c.id, c.h, c.t), c.err, name)
	}
}
