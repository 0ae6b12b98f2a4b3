// Package golit finds where strings are written as literals in the
// repository's Go source, for the tests that keep a name (a method, an
// outcome code, a dialect's code) spelled in one place.
package golit

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Files returns, for each of want written as a Go string literal in a
// non-test Go file under root, the files holding it (slash paths relative
// to root, in walk order). It skips testdata, hidden directories and the
// directories skip names (slash paths relative to root).
func Files(root string, want []string, skip ...string) (map[string][]string, error) {
	out := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if slices.Contains(skip, rel) || d.Name() == "testdata" || rel != "." && strings.HasPrefix(d.Name(), ".") {
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
				if v, err := strconv.Unquote(lit.Value); err == nil && slices.Contains(want, v) && !seen[v] {
					seen[v] = true
					out[v] = append(out[v], rel)
				}
			}
			return true
		})
		return nil
	})
	return out, err
}
