package meta

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoReturnOrderDependence fails on `return r, s.view(func(t tx) error {
// r = ... })` anywhere in the module: Go leaves unspecified whether r is read
// before or after the call that fills it (spec, "Order of evaluation"), so
// the reply would depend on the compiler. Write `err := s.view(...); return
// r, err` instead.
func TestNoReturnOrderDependence(t *testing.T) {
	root, _ := filepath.Abs("../../..")
	fset := token.NewFileSet()
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() && p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "vendor") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			return nil
		}
		ast.Inspect(f, func(n ast.Node) bool {
			ret, ok := n.(*ast.ReturnStmt)
			if !ok {
				return true
			}
			for _, res := range ret.Results {
				id, ok := res.(*ast.Ident)
				if !ok || id.Name == "nil" || id.Name == "true" || id.Name == "false" {
					continue
				}
				for _, other := range ret.Results {
					if other != res && assignsIn(other, id.Name) {
						t.Errorf("%s: return reads %s and calls a closure that assigns it: the result depends on evaluation order", fset.Position(ret.Pos()), id.Name)
					}
				}
			}
			return true
		})
		return nil
	})
}

// assignsIn reports whether a function literal inside e assigns to name.
func assignsIn(e ast.Expr, name string) bool {
	found := false
	ast.Inspect(e, func(n ast.Node) bool {
		lit, ok := n.(*ast.FuncLit)
		if !ok {
			return !found
		}
		ast.Inspect(lit.Body, func(n ast.Node) bool {
			if as, ok := n.(*ast.AssignStmt); ok && as.Tok == token.ASSIGN {
				for _, l := range as.Lhs {
					if id, ok := l.(*ast.Ident); ok && id.Name == name {
						found = true
					}
				}
			}
			return !found
		})
		return false
	})
	return found
}
