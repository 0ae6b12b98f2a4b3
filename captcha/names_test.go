package captcha

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestMethodNamesLiveHere checks that adding a method means adding an entry
// here: each method's name, as a Go string literal, appears in at most two
// non-test Go files of the repository outside bench/ and the emulator
// (solver/fakeapi, which models the service on its own), this package's
// catalogue being one of them.
func TestMethodNamesLiveHere(t *testing.T) {
	t.Parallel()
	files := literalFiles(t, "..", Methods())
	for _, m := range Methods() {
		if fs := files[m]; len(fs) > 2 || !slices.Contains(fs, "captcha/methods.go") {
			t.Errorf("method name %q is written in %d files, want at most 2 with the catalogue one: %s",
				m, len(fs), strings.Join(fs, ", "))
		}
	}
}

// literalFiles returns, for each of names, the non-test Go files under root
// (but bench/, solver/fakeapi/ and testdata) holding it as a string literal.
func literalFiles(t *testing.T, root string, names []string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			switch {
			case rel == "bench", rel == "solver/fakeapi", d.Name() == "testdata",
				rel != "." && strings.HasPrefix(d.Name(), "."):
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		seen := map[string]bool{}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if v, err := strconv.Unquote(lit.Value); err == nil && slices.Contains(names, v) && !seen[v] {
					seen[v] = true
					out[v] = append(out[v], rel)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", root, err)
	}
	return out
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
