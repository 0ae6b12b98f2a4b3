package wire_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/captchaq/captchaq/stream/wire"
)

// TestOutcomeCodesLiveHere checks that each outcome code is written once:
// no non-test Go file of the repository outside stream/wire and bench/
// holds one as a string literal; the others name the constant.
//
// One exception: the solver's Call.Code CANCELED (solver.CodeCanceled, a
// call its caller's context ended) is the solver's own pseudo-code, spelled
// in solver/codes.go beside BAD_REPLY and LOCAL_TIMEOUT, because the solver
// does not link this package (it would link nats.go with it).
func TestOutcomeCodesLiveHere(t *testing.T) {
	t.Parallel()
	// CodeError is left out: "ERROR" is also how every error reply of the
	// service begins, which the solver's client reads.
	codes := []string{wire.CodeInvalidTask, wire.CodeInvalidEnvelope, wire.CodeDeadlinePassed,
		wire.CodeWorkerLost, wire.CodeCanceled, wire.CodeShutdown, wire.CodeSubmitByPassed, wire.CodeTokenTooLarge}
	allowed := map[string][]string{wire.CodeCanceled: {"solver/codes.go"}}
	for code, files := range literalFiles(t, "../..", codes) {
		for _, f := range files {
			if !slices.Contains(allowed[code], f) {
				t.Errorf("outcome code %q is written as a literal in %s: name wire's constant", code, f)
			}
		}
	}
}

// literalFiles returns, for each of codes, the non-test Go files under root
// (but stream/wire, bench/ and testdata) holding it as a string literal.
func literalFiles(t *testing.T, root string, codes []string) map[string][]string {
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
			case rel == "bench", rel == "stream/wire", d.Name() == "testdata",
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
				if v, err := strconv.Unquote(lit.Value); err == nil && slices.Contains(codes, v) && !seen[v] {
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
