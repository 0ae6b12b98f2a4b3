package wire

import (
	"reflect"
	"testing"
	"time"
)

// TestMovedHeader checks the header of a moved copy: the producer's
// headers kept, the broker's (Nats-*) and a forged generation or store time
// in any spelling dropped, its own generation, store time and message id
// set, and the moved message's header left as it was.
func TestMovedHeader(t *testing.T) {
	t.Parallel()
	h := map[string][]string{
		HeaderTaskID:         {"t1"},
		HeaderCancelHash:     {"abc"},
		"X-App":              {"a", "b"},
		HeaderMsgID:          {"t1"},
		"nats-expected-last": {"3"},
		"captchaq-gen":       {"99"},
		"CAPTCHAQ-SUBMITTED": {"then"},
	}
	before := map[string][]string{}
	for k, v := range h {
		before[k] = v
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.FixedZone("x", 3600))
	got := MovedHeader(SubjectLater+".5.2.t1", h, 7, at, 41)
	want := map[string][]string{
		HeaderTaskID:     {"t1"},
		HeaderCancelHash: {"abc"},
		"X-App":          {"a", "b"},
		HeaderGen:        {"7"},
		HeaderSubmitted:  {"2026-01-02T02:04:05.000000006Z"},
		HeaderMsgID:      {"t1.moved.41"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("MovedHeader = %v, want %v", got, want)
	}
	if !reflect.DeepEqual(h, before) {
		t.Errorf("MovedHeader changed the moved message's header: %v", h)
	}
	if !IsMovedCopy(got) {
		t.Error("IsMovedCopy(MovedHeader(...)) = false")
	}
	if gen, sub, ok := MovedFrom(got); !ok || gen != 7 || !sub.Equal(at) {
		t.Errorf("MovedFrom = %d, %v, %v", gen, sub, ok)
	}
}

// TestHeaderExactKey checks that the contract reads a header as
// nats.Header.Get does: by its exact key, the first value.
func TestHeaderExactKey(t *testing.T) {
	t.Parallel()
	h := map[string][]string{HeaderTaskID: {"a", "b"}, "captchaq-gen": {"3"}, HeaderReason: {}}
	for _, c := range []struct{ key, want string }{
		{HeaderTaskID, "a"}, {HeaderGen, ""}, {"captchaq-gen", "3"}, {HeaderReason, ""}, {"missing", ""},
	} {
		if got := header(h, c.key); got != c.want {
			t.Errorf("header(%q) = %q, want %q", c.key, got, c.want)
		}
	}
	if got := header(nil, HeaderTaskID); got != "" {
		t.Errorf("header(nil) = %q", got)
	}
}

// TestMovedFromRefusesWhatIsNotACopy checks that a copy naming generation
// 0 (no task message has sequence 0), a generation that is not a number or
// a store time that is not RFC 3339 is not read as a moved copy's word.
func TestMovedFromRefusesWhatIsNotACopy(t *testing.T) {
	t.Parallel()
	const at = "2026-12-06T04:00:00.000000001Z"
	for _, h := range []map[string][]string{
		{HeaderGen: {"0"}, HeaderSubmitted: {at}},
		{HeaderGen: {"-1"}, HeaderSubmitted: {at}},
		{HeaderGen: {"7"}, HeaderSubmitted: {"yesterday"}},
		{HeaderGen: {"7"}},
	} {
		if gen, _, ok := MovedFrom(h); ok {
			t.Errorf("MovedFrom(%v) = generation %d, ok", h, gen)
		}
	}
	if gen, sub, ok := MovedFrom(map[string][]string{HeaderGen: {"7"}, HeaderSubmitted: {at}}); !ok || gen != 7 || sub.Format(time.RFC3339Nano) != at {
		t.Errorf("MovedFrom of a copy = %d, %v, %v", gen, sub, ok)
	}
}

// TestMovedDigestCoversWhatWorkersActOn checks that changing any one thing
// the digest covers (the task subject, the body, each header a worker acts
// on, the generation, the store time) changes the digest, and that the
// waiting room's subject of the same task gives the same one.
func TestMovedDigestCoversWhatWorkersActOn(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 6, 4, 0, 0, 1, time.UTC)
	subject := TaskSubject(LaneFast, PriorityNormal, "t1")
	h := func(kv ...string) map[string][]string {
		out := map[string][]string{HeaderTaskID: {"t1"}, HeaderClient: {"app"}, HeaderCancelHash: {"abc"}, HeaderReplayedBy: {"5"}}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i]] = []string{kv[i+1]}
		}
		return out
	}
	body := []byte(`{"method":"turnstile"}`)
	base := MovedDigest(subject, h(), body, 7, at)
	for name, d := range map[string]string{
		"subject":     MovedDigest(TaskSubject(LaneFast, PriorityHigh, "t1"), h(), body, 7, at),
		"body":        MovedDigest(subject, h(), []byte(`{"method":"hcaptcha"}`), 7, at),
		"task id":     MovedDigest(subject, h(HeaderTaskID, "t2"), body, 7, at),
		"client":      MovedDigest(subject, h(HeaderClient, "other"), body, 7, at),
		"cancel hash": MovedDigest(subject, h(HeaderCancelHash, "def"), body, 7, at),
		"replay":      MovedDigest(subject, h(HeaderReplayedBy, "6"), body, 7, at),
		"generation":  MovedDigest(subject, h(), body, 8, at),
		"store time":  MovedDigest(subject, h(), body, 7, at.Add(time.Nanosecond)),
	} {
		if d == base {
			t.Errorf("a copy with another %s has the same digest", name)
		}
	}
	if d := MovedDigest(subject, h("X-App", "x"), body, 7, at.In(time.FixedZone("x", 3600))); d != base {
		t.Error("a header no worker acts on, or the store time's zone, changed the digest")
	}
	if d := MovedDigest(LaterSubject(LaneFast, PriorityNormal, "t1"), h(), body, 7, at); d != base {
		t.Error("the same copy in the waiting room has another digest")
	}
}

// TestOneMovedHeaderAloneIsForged checks that a message naming a
// generation or a store time without the other is not a moved copy, and
// that its headers alone show it forged, before a worker reads anything
// for it.
func TestOneMovedHeaderAloneIsForged(t *testing.T) {
	t.Parallel()
	subject := TaskSubject(LaneFast, PriorityNormal, "t1")
	for _, h := range []map[string][]string{
		{HeaderMsgID: {"t1"}, HeaderGen: {"7"}},
		{HeaderMsgID: {"t1"}, HeaderSubmitted: {"2026-12-06T04:00:00Z"}},
	} {
		if IsMovedCopy(h) {
			t.Errorf("IsMovedCopy(%v) = true", h)
		}
		if HeadersForged(subject, h) == nil {
			t.Errorf("HeadersForged(%v) = nil", h)
		}
	}
	moved := MovedHeader(subject, map[string][]string{HeaderMsgID: {"t1"}}, 7, time.Now(), 9)
	if !IsMovedCopy(moved) || HeadersForged(subject, moved) != nil {
		t.Errorf("a moved copy: IsMovedCopy %v, HeadersForged %v", IsMovedCopy(moved), HeadersForged(subject, moved))
	}
}
