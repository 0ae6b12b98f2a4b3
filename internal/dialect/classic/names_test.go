package classic_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/captchaq/captchaq/internal/golit"
)

// TestCodesLiveHere checks that the dialect's codes are spelled here once:
// no non-test Go file of the repository outside this package and bench/
// holds one of the codes this package declares as a string literal; the
// gateway, the emulator and the solver name the constant.
func TestCodesLiveHere(t *testing.T) {
	t.Parallel()
	codes := declared(t, "codes.go")
	if len(codes) < 40 {
		t.Fatalf("%d codes declared in codes.go, want the whole table", len(codes))
	}
	found, err := golit.Files("../../..", codes, "bench", "internal/dialect/classic")
	if err != nil {
		t.Fatal(err)
	}
	for code, files := range found {
		for _, f := range files {
			t.Errorf("%s writes the dialect's code %q as a literal: name classic's constant", f, code)
		}
	}
}

// declared returns the string constants declared in file.
func declared(t *testing.T, file string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			for _, v := range s.(*ast.ValueSpec).Values {
				if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if u, err := strconv.Unquote(lit.Value); err == nil {
						out = append(out, u)
					}
				}
			}
		}
	}
	return out
}

// TestLeaf checks the dialect links only the standard library, so the
// gateway, the emulator and the solver read it without linking each other.
func TestLeaf(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	if deps := strings.Fields(string(out)); len(deps) != 1 || deps[0] != "github.com/captchaq/captchaq/internal/dialect/classic" {
		t.Errorf("classic links %v, want the standard library only", deps)
	}
}
