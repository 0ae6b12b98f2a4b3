package text

import (
	"testing"
	"unicode/utf8"
)

func TestCut(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly", 7, "exactly"},
		{"longer text", 6, "longer…"},
		{"café au lait", 4, "caf…"}, // never half of "é"
		{"ключ", 3, "к…"},
		{"abc", 0, "…"},
	} {
		got := Cut(c.in, c.n)
		if got != c.want || !utf8.ValidString(got) {
			t.Errorf("Cut(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}
