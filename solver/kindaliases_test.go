package solver

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strings"
	"testing"
)

// kindConsts returns the names of the Kind… constants declared in file,
// sorted; with pkg set, only those whose value is pkg's constant of the
// same name (an alias of the catalogue's).
func kindConsts(t *testing.T, file, pkg string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if !strings.HasPrefix(n.Name, "Kind") {
					continue
				}
				if pkg != "" {
					sel, ok := vs.Values[i].(*ast.SelectorExpr)
					if !ok || sel.X.(*ast.Ident).Name != pkg || sel.Sel.Name != n.Name {
						t.Errorf("%s: %s is not %s.%s", file, n.Name, pkg, n.Name)
					}
				}
				names = append(names, n.Name)
			}
		}
	}
	slices.Sort(names)
	return names
}

// The solver's and the emulator's kind names alias the catalogue's, every
// one of them: a kind the catalogue adds is named in both, so that
// Timing's maps and the emulator's SolveTime can be keyed by it.
func TestKindAliasesNameEveryCatalogueKind(t *testing.T) {
	t.Parallel()
	want := kindConsts(t, "../captcha/methods.go", "")
	if len(want) == 0 {
		t.Fatal("no Kind constants in the catalogue")
	}
	for file, pkg := range map[string]string{"catalogue.go": "captcha", "fakeapi/fakeapi.go": "catalogue"} {
		if got := kindConsts(t, file, pkg); !slices.Equal(got, want) {
			t.Errorf("%s names %v, the catalogue %v", file, got, want)
		}
	}
}
