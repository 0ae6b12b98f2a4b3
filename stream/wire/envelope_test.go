package wire

import (
	"testing"
	"time"

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
		"replay of no letter":  {"a1", h(HeaderMsgID, ReplayMsgID("a1", "")), Task{}, "is not the task id"},
		"generation alone":     {"a1", h(HeaderMsgID, "a1", HeaderGen, "3"), Task{}, "only a worker's moved copy names a generation"},
		"store time alone":     {"a1", h(HeaderMsgID, "a1", HeaderSubmitted, "2026-12-06T04:00:00Z"), Task{}, "names a submission time"},
		"id header differs":    {"a1", h(HeaderMsgID, "a1", HeaderTaskID, "b2"), Task{}, "differs from the id"},
		"body id differs":      {"a1", h(HeaderMsgID, "a1"), Task{ID: "b2"}, "in the body differs"},
		"invalid id":           {"order#1", h(HeaderMsgID, "order#1"), Task{}, "subject: id"},
	} {
		require.ErrorContains(t, CheckEnvelope(c.id, c.h, c.t), c.err, name)
	}
}

// A task message is late when the stream stored it after its producer's
// submit-by instant; only the producer's own message (its message id the
// task id) is judged, and a header that is not a time counts as none.
func TestStoredLate(t *testing.T) {
	t.Parallel()
	by := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
	h := func(msgID, submitBy string) nats.Header {
		return nats.Header{HeaderMsgID: {msgID}, HeaderSubmitBy: {submitBy}}
	}
	for _, c := range []struct {
		name   string
		h      nats.Header
		stored time.Time
		late   bool
	}{
		{"stored after", h("t1", by.Format(time.RFC3339Nano)), by.Add(time.Millisecond), true},
		{"stored at the instant", h("t1", by.Format(time.RFC3339Nano)), by, false},
		{"stored before", h("t1", by.Format(time.RFC3339Nano)), by.Add(-time.Second), false},
		{"no header", nats.Header{HeaderMsgID: {"t1"}}, by.Add(time.Hour), false},
		{"a replay", h(ReplayMsgID("t1", "42"), by.Format(time.RFC3339Nano)), by.Add(time.Hour), false},
		{"not a time", h("t1", "soon"), by.Add(time.Hour), false},
	} {
		got, late := StoredLate("t1", c.h, c.stored)
		if late != c.late {
			t.Errorf("%s: late %v, want %v", c.name, late, c.late)
		}
		if late && !got.Equal(by) {
			t.Errorf("%s: by %s, want %s", c.name, got, by)
		}
	}
}

// Only the producer's own message is held to its submit-by header: a
// replay or a moved copy carries the header of the submission it stands
// for, checked then.
func TestCheckSubmitBy(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		h    map[string][]string
		bad  bool
	}{
		{"a time", map[string][]string{HeaderMsgID: {"t1"}, HeaderSubmitBy: {"2026-12-06T04:00:00.5Z"}}, false},
		{"none", map[string][]string{HeaderMsgID: {"t1"}}, false},
		{"not a time", map[string][]string{HeaderMsgID: {"t1"}, HeaderSubmitBy: {"soon"}}, true},
		{"a replay's", map[string][]string{HeaderMsgID: {ReplayMsgID("t1", "4")}, HeaderSubmitBy: {"soon"}}, false},
		{"a moved copy's", map[string][]string{HeaderMsgID: {MovedMsgID("t1", 4)}, HeaderSubmitBy: {"soon"}}, false},
	} {
		if err := CheckSubmitBy("t1", c.h); (err != nil) != c.bad {
			t.Errorf("%s: CheckSubmitBy = %v, want an error %v", c.name, err, c.bad)
		}
	}
}
