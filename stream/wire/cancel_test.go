package wire

import (
	"strings"
	"testing"
)

// TestOwnsCancel checks that only the secret whose SHA-256 the task
// message names cancels it, the hash read in either case of hex (a raw
// producer may write it upper-case), and that no secret cancels a message
// that names no hash.
func TestOwnsCancel(t *testing.T) {
	t.Parallel()
	secret, hash := NewCancelKey()
	other, _ := NewCancelKey()
	for _, c := range []struct {
		name   string
		h      map[string][]string
		secret string
		owns   bool
	}{
		{"the owner", map[string][]string{HeaderCancelHash: {hash}}, secret, true},
		{"upper-case hex", map[string][]string{HeaderCancelHash: {strings.ToUpper(hash)}}, secret, true},
		{"another secret", map[string][]string{HeaderCancelHash: {hash}}, other, false},
		{"no secret", map[string][]string{HeaderCancelHash: {hash}}, "", false},
		{"no hash", map[string][]string{}, secret, false},
		{"the hash as secret", map[string][]string{HeaderCancelHash: {hash}}, hash, false},
	} {
		if got := OwnsCancel(c.h, c.secret); got != c.owns {
			t.Errorf("%s: OwnsCancel = %v, want %v", c.name, got, c.owns)
		}
	}
}

// TestParseCancel checks that a cancel record is read only for the
// generation it names.
func TestParseCancel(t *testing.T) {
	t.Parallel()
	b := []byte(`{"id":"t1","gen":7,"by":"app"}`)
	if rec := ParseCancel(b, 7); rec == nil || rec.ID != "t1" || rec.By != "app" {
		t.Errorf("ParseCancel(gen 7) = %+v", rec)
	}
	if rec := ParseCancel(b, 8); rec != nil {
		t.Errorf("ParseCancel of generation 7's record for generation 8 = %+v, want nil", rec)
	}
	if rec := ParseCancel([]byte("nope"), 7); rec != nil {
		t.Errorf("ParseCancel(not JSON) = %+v, want nil", rec)
	}
}

// TestReplayCancelHashOK checks that a replay keeps exactly its letter's
// cancel hash: neither another one nor none where the letter names one.
func TestReplayCancelHashOK(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		letter, replay string
		ok             bool
	}{{"abc", "abc", true}, {"", "", true}, {"abc", "", false}, {"abc", "def", false}, {"", "abc", false}} {
		if got := ReplayCancelHashOK(c.letter, c.replay); got != c.ok {
			t.Errorf("ReplayCancelHashOK(%q, %q) = %v, want %v", c.letter, c.replay, got, c.ok)
		}
	}
}
