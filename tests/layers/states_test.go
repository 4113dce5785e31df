package layers

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestStatesComparedOnlyInRulesAndFolds: what a job's state means (held,
// runnable, waiting for admission, ...) is decided in commands and folded
// in projections; the machinery asks them (commands.HeldState,
// commands.Dispatchable, ...) and never compares a state itself. A
// comparison with a state constant (==, != or a case) anywhere else in
// the machinery fails here, naming the file and line. The CLI, the tests
// and the user-facing helpers compare the public jetflow states as any
// user may.
func TestStatesComparedOnlyInRulesAndFolds(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	allowed := []string{"commands", "projections", "internal/domain", "cmd", "tests", "examples", "python", "jetflowtest", "internal/testkit", ".git"}
	isState := func(e ast.Expr) bool {
		se, ok := e.(*ast.SelectorExpr)
		if !ok {
			return false
		}
		x, ok := se.X.(*ast.Ident)
		if !ok {
			return false
		}
		name := se.Sel.Name
		return (x.Name == "domain" && strings.HasPrefix(name, "State") && name != "State" && name != "States") ||
			(x.Name == "commands" && name == "StateRetryLater")
	}
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			for _, a := range allowed {
				if rel == a {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		checked++
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BinaryExpr:
				if (n.Op == token.EQL || n.Op == token.NEQ) && (isState(n.X) || isState(n.Y)) {
					t.Errorf("%s:%d: a job state compared outside commands and projections: ask commands (HeldState, Dispatchable, InQueue, ...) or add the question there", rel, fset.Position(n.Pos()).Line)
				}
			case *ast.CaseClause:
				for _, e := range n.List {
					if isState(e) {
						t.Errorf("%s:%d: a case on a job state outside commands and projections: ask commands or add the question there", rel, fset.Position(n.Pos()).Line)
						break
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("checked only %d files: is the walk rooted at the module?", checked)
	}
}
