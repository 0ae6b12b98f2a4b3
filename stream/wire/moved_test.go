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
