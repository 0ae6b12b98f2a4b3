package stream

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// What `go doc` shows a user of package stream names only what a user can
// look up: no unexported constant, variable or helper of this package or
// of its internal packages, whose value the reader cannot see.
func TestGoDocNamesNothingUnexported(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, parser.ParseComments)
	require.NoError(t, err)
	// camelCase words that start lower-case are identifiers; these are the
	// names of captchas, and a parameter the signature beside shows.
	ident := regexp.MustCompile(`\b[a-z]+[A-Z][A-Za-z0-9]*\b`)
	allowed := map[string]bool{"reCAPTCHA": true, "hCaptcha": true, "learnPlan": true}
	var found []string
	check := func(where string, groups ...*ast.CommentGroup) {
		for _, g := range groups {
			for _, w := range ident.FindAllString(g.Text(), -1) {
				if !allowed[w] {
					found = append(found, where+": "+w)
				}
			}
		}
	}
	for _, f := range pkgs["stream"].Files {
		if f.Name.Name == "stream" && f.Doc != nil {
			check("package doc", f.Doc)
		}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Name.IsExported() && (d.Recv == nil || exportedRecv(d.Recv)) {
					check(d.Name.Name, d.Doc)
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						if !s.Name.IsExported() {
							continue
						}
						check(s.Name.Name, d.Doc, s.Doc)
						if st, ok := s.Type.(*ast.StructType); ok {
							for _, fl := range st.Fields.List {
								if len(fl.Names) > 0 && fl.Names[0].IsExported() {
									check(s.Name.Name+"."+fl.Names[0].Name, fl.Doc, fl.Comment)
								}
							}
						}
					case *ast.ValueSpec:
						if s.Names[0].IsExported() {
							check(s.Names[0].Name, d.Doc, s.Doc, s.Comment)
						}
					}
				}
			}
		}
	}
	require.Empty(t, found, "the doc of an exported name cites an unexported one")
}

// exportedRecv reports whether a method's receiver type is exported.
func exportedRecv(r *ast.FieldList) bool {
	typ := r.List[0].Type
	if st, ok := typ.(*ast.StarExpr); ok {
		typ = st.X
	}
	id, ok := typ.(*ast.Ident)
	return ok && id.IsExported()
}

// `go doc` of package stream shows its three roles, each with its
// constructor and its configuration: the producer (Client), the worker
// (Worker) and the admin (Admin).
func TestGoDocShowsTheRoles(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	out, err := exec.Command(goBin, "doc", ".").CombinedOutput()
	require.NoError(t, err, "go doc: %s", out)
	doc := string(out)
	for _, role := range []struct{ name, constructor string }{
		{"Client", "func NewClient(ctx context.Context, nc *nats.Conn, cfg ClientConfig) (*Client, error)"},
		{"Worker", "func NewWorker(ctx context.Context, nc *nats.Conn, cfg WorkerConfig) (*Worker, error)"},
		{"Admin", "func NewAdmin(nc *nats.Conn, cfg AdminConfig) (*Admin, error)"},
	} {
		require.Contains(t, doc, "\ntype "+role.name+" struct{ ... }\n    "+role.constructor+"\n", "go doc lists %s with its constructor", role.name)
		require.Contains(t, doc, "\ntype "+role.name+"Config struct{ ... }\n", "go doc lists %sConfig", role.name)
	}
}
