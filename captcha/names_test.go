package captcha

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/captchaq/captchaq/internal/golit"
)

// TestMethodNamesLiveHere checks that adding a method means adding an entry
// here: each method's name, as a Go string literal, appears in at most two
// non-test Go files of the repository outside bench/ and the emulator
// (solver/fakeapi, which models the service on its own), this package's
// catalogue being one of them.
func TestMethodNamesLiveHere(t *testing.T) {
	t.Parallel()
	files, err := golit.Files("..", Methods(), "bench", "solver/fakeapi")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range Methods() {
		if fs := files[m]; len(fs) > 2 || !slices.Contains(fs, "captcha/methods.go") {
			t.Errorf("method name %q is written in %d files, want at most 2 with the catalogue one: %s",
				m, len(fs), strings.Join(fs, ", "))
		}
	}
}

// TestLeaf checks the catalogue links only the standard library, so every
// package can read it without linking anything more.
func TestLeaf(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	if deps := strings.Fields(string(out)); !slices.Equal(deps, []string{"github.com/captchaq/captchaq/captcha"}) {
		t.Errorf("captcha links %v, want the standard library only", deps)
	}
}
