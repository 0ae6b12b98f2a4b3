package taskstore

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream/wire"
)

// A generation's state is folded from the task's records alone: another
// generation's records, foreign messages and records of other tasks change
// only the sequence to expect. No broker needed.
func TestGenStateFoldsOnlyItsGeneration(t *testing.T) {
	t.Parallel()
	ev := func(gen uint64, kind wire.EventKind, delivery uint64) []byte {
		b, _ := json.Marshal(wire.Event{Kind: kind, Gen: gen, Delivery: delivery, Attempts: 1})
		return b
	}
	hdr := func(gen uint64) nats.Header {
		h := nats.Header{}
		h.Set(wire.HeaderGen, strconv.FormatUint(gen, 10))
		return h
	}
	st := GenState{Gen: 10}
	st.Fold("a", wire.EventSubject("a"), nil, ev(10, wire.EventAttempt, 1), 11)
	st.Fold("a", wire.EventSubject("a"), nil, ev(20, wire.EventAttempt, 1), 21) // another generation
	st.Fold("a", wire.EventSubject("a"), nil, []byte("not json"), 22)           // a foreign message
	require.Equal(t, wire.EventAttempt, st.Last.Kind)
	require.Equal(t, uint64(11), st.LastSeq)
	require.Equal(t, uint64(22), st.Seq, "every record moves the sequence to expect")

	before := st
	st.Fold("a", wire.ResultSubject("a"), hdr(20), nil, 23) // the other generation's outcome
	st.Fold("a", wire.DeadSubject("a"), hdr(20), nil, 24)
	require.False(t, st.Outcome)
	require.False(t, st.DeadLetter)
	require.True(t, st.SameGen(before), "only other generations wrote: try again on the new sequence")

	st.Fold("a", wire.EventSubject("a"), nil, ev(10, wire.EventDead, 1), 25)
	st.Fold("a", wire.DeadSubject("a"), hdr(10), nil, 26)
	require.False(t, st.SameGen(before))
	require.True(t, st.DeadLetter)
	st.Fold("a", wire.ResultSubject("a"), hdr(10), nil, 27)
	require.True(t, st.Outcome)
	require.Equal(t, uint64(27), st.Seq)

}
