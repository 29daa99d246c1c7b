package proxy

import (
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/meterproxy/meterproxy/internal/docgen"
)

// update makes TestDocsRefusals write docs/refusals.md instead of
// checking it: make docs.
var update = flag.Bool("update", false, "write docs/refusals.md instead of checking it")

// TestDocsRefusals keeps docs/refusals.md what the code says: every
// reason and negotiation constant is in refusalCodes or negotiationCodes
// and has a doc comment, its meaning; every refusal the code builds comes
// with its code's status; and the file lists each once.
func TestDocsRefusals(t *testing.T) {
	src, err := docgen.NewSource(".")
	if err != nil {
		t.Fatal(err)
	}
	const pkg = "github.com/meterproxy/meterproxy/proxy"
	values := map[string]string{} // constant name to value
	codes := func(prefix string, table []reasonStatus) []docgen.Code {
		consts, err := src.StringConsts(pkg, prefix)
		if err != nil {
			t.Fatal(err)
		}
		byValue := map[string]docgen.ConstDoc{}
		for _, c := range consts {
			values[c.Name] = c.Value
			byValue[c.Value] = c
			if !containsReason(table, c.Value) {
				t.Errorf("%s (%q) is not in the table of codes; add it with its status", c.Name, c.Value)
			}
		}
		out := make([]docgen.Code, 0, len(table))
		for _, r := range table {
			c, ok := byValue[r.reason]
			switch {
			case !ok:
				t.Errorf("%q is in the table but is no %s… constant", r.reason, prefix)
			case docgen.Meaning(c.Name, c.Doc) == "":
				t.Errorf("%s has no doc comment: it is the code's meaning in docs/refusals.md", c.Name)
			}
			out = append(out, docgen.Code{Code: r.reason, Status: r.status, Doc: docgen.Meaning(c.Name, c.Doc)})
		}
		return out
	}
	refusals, negotiations := codes("reason", refusalCodes), codes("negotiation", negotiationCodes)
	checkBuiltStatuses(t, slices.Concat(refusalCodes, negotiationCodes), values)
	if err := docgen.Check(src, "docs/refusals.md", docgen.Refusals(refusals, negotiations), *update); err != nil {
		t.Error(err)
	}
}

func containsReason(table []reasonStatus, reason string) bool {
	return slices.ContainsFunc(table, func(r reasonStatus) bool { return r.reason == reason })
}

// checkBuiltStatuses reads the package's source for every refusal built
// with a status — a refusal{status: http.StatusX, reason: reasonY}
// literal, a later f.reason = reasonZ in the same function (which keeps
// the literal's status), a call given both (refuse(http.StatusX,
// reasonY, …)) — and checks each against table; every code must be built
// somewhere. values are the constants' values, by name.
func checkBuiltStatuses(t *testing.T, table []reasonStatus, values map[string]string) {
	t.Helper()
	want := map[string]int{}
	for _, r := range table {
		want[r.reason] = r.status
	}
	status := statusNames()
	built := map[string]bool{}
	pair := func(pos token.Position, statusExpr, reasonExpr ast.Expr) {
		name, ok := httpStatus(statusExpr)
		id, isIdent := reasonExpr.(*ast.Ident)
		if !ok || !isIdent || !isCode(id.Name) {
			return
		}
		code, known := status[name]
		if !known {
			t.Errorf("%s: http.%s: add it to statusNames", pos, name)
			return
		}
		reason, ok := values[id.Name]
		if !ok {
			t.Errorf("%s: %s is no reason or negotiation constant", pos, id.Name)
			return
		}
		built[reason] = true
		if want[reason] != code {
			t.Errorf("%s: %s (%q) is answered %d here, but its table says %d", pos, id.Name, reason, code, want[reason])
		}
	}
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		var current ast.Expr // the status of the last refusal literal, in source order
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				current = nil
			case *ast.CompositeLit:
				if id, ok := n.Type.(*ast.Ident); !ok || id.Name != "refusal" {
					return true
				}
				var s, r ast.Expr
				for _, e := range n.Elts {
					if kv, ok := e.(*ast.KeyValueExpr); ok {
						switch kv.Key.(*ast.Ident).Name {
						case "status":
							s = kv.Value
						case "reason":
							r = kv.Value
						}
					}
				}
				if s != nil && r != nil {
					current = s
					pair(fset.Position(n.Pos()), s, r)
				}
			case *ast.AssignStmt:
				for i, l := range n.Lhs {
					if sel, ok := l.(*ast.SelectorExpr); ok && sel.Sel.Name == "reason" && current != nil && i < len(n.Rhs) {
						pair(fset.Position(n.Pos()), current, n.Rhs[i])
					}
				}
			case *ast.CallExpr:
				var s, r ast.Expr
				for _, a := range n.Args {
					ast.Inspect(a, func(m ast.Node) bool {
						if e, ok := m.(ast.Expr); ok && s == nil {
							if _, ok := httpStatus(e); ok {
								s = e
							}
						}
						return true
					})
					if id, ok := a.(*ast.Ident); ok && r == nil && isCode(id.Name) {
						r = id
					}
				}
				if s != nil && r != nil {
					pair(fset.Position(n.Pos()), s, r)
				}
			}
			return true
		})
	}
	for _, r := range table {
		if !built[r.reason] {
			t.Errorf("%q: no refusal built with a status found in the source; its table's status is not checked", r.reason)
		}
	}
}

// isCode reports whether name is a reason's or a negotiation's constant's.
func isCode(name string) bool {
	return name != "reasonOf" && (strings.HasPrefix(name, "reason") || strings.HasPrefix(name, "negotiation"))
}

// httpStatus is the name of e when it is http.StatusX.
func httpStatus(e ast.Expr) (string, bool) {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok || !strings.HasPrefix(sel.Sel.Name, "Status") {
		return "", false
	}
	if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "http" {
		return "", false
	}
	return sel.Sel.Name, true
}

// statusNames maps net/http's status constants' names to their codes, by
// their text: StatusTooManyRequests is "Too Many Requests".
func statusNames() map[string]int {
	names := map[string]int{}
	for code := 100; code < 600; code++ {
		if text := http.StatusText(code); text != "" {
			names["Status"+strings.NewReplacer(" ", "", "-", "").Replace(text)] = code
		}
	}
	return names
}
