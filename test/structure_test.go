package test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The size rules docs/style.md states for the admission core and the
// proxy, so that each part stays readable in one sitting:
//   - no struct over maxStructFields fields (each name counts, an
//     embedded field counts one);
//   - no type whose methods are declared in more than maxMethodFiles files;
//   - `go doc` of quota's core no longer than maxCoreDocLines lines.
//
// They are checked over the non-test files of the trees in sizeRuledTrees.
const (
	maxStructFields = 12
	maxMethodFiles  = 2
	maxCoreDocLines = 50
)

// sizeRuledTrees are the package trees the size rules hold in, relative to
// the module root.
var sizeRuledTrees = []string{"quota", "proxy"}

// TestStructuresStaySmall pins the size rules above: a struct that grows a
// thirteenth field, or a type whose methods spread to a third file, fails
// here naming it.
func TestStructuresStaySmall(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	for _, tree := range sizeRuledTrees {
		for _, dir := range goPackageDirs(t, filepath.Join(root, tree)) {
			rel, err := filepath.Rel(root, dir)
			if err != nil {
				t.Fatal(err)
			}
			fields, methodFiles := packageShape(t, dir)
			for name, n := range fields {
				if n > maxStructFields {
					t.Errorf("%s: struct %s has %d fields (at most %d: group them by concern)", rel, name, n, maxStructFields)
				}
			}
			for name, files := range methodFiles {
				if len(files) > maxMethodFiles {
					t.Errorf("%s: %s's methods are in %d files (at most %d): %s", rel, name, len(files), maxMethodFiles, strings.Join(files, ", "))
				}
			}
		}
	}
}

// TestCoreDocIsShort: `go doc` of package quota (its exported surface) stays
// within maxCoreDocLines lines, so the core's API reads in one sitting.
func TestCoreDocIsShort(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	cmd := exec.CommandContext(t.Context(), "go", "doc", "./quota")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go doc ./quota: %v", err)
	}
	if lines := strings.Count(string(out), "\n"); lines > maxCoreDocLines {
		t.Errorf("go doc ./quota is %d lines (at most %d): unexport what only quota uses, or move a part to a package of its own", lines, maxCoreDocLines)
	}
}

// packageShape parses dir's non-test files and returns each struct type's
// field count and, for each receiver type, the sorted names of the files
// its methods are declared in.
func packageShape(t *testing.T, dir string) (fields map[string]int, methodFiles map[string][]string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fields = map[string]int{}
	methodFiles = map[string][]string{}
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("parse %s: %v", path, err)
		}
		base := filepath.Base(path)
		ast.Inspect(file, func(n ast.Node) bool {
			switch d := n.(type) {
			case *ast.TypeSpec:
				if st, ok := d.Type.(*ast.StructType); ok {
					fields[d.Name.Name] = fieldCount(st)
				}
			case *ast.FuncDecl:
				if name := receiverName(d); name != "" && !slices.Contains(methodFiles[name], base) {
					methodFiles[name] = append(methodFiles[name], base)
					slices.Sort(methodFiles[name])
				}
			}
			return true
		})
	}
	return fields, methodFiles
}

// fieldCount counts a struct's fields: each name, and each embedded field
// as one.
func fieldCount(st *ast.StructType) int {
	n := 0
	for _, f := range st.Fields.List {
		n += max(len(f.Names), 1)
	}
	return n
}

// receiverName is the name of a method's receiver type ("" for a function).
func receiverName(d *ast.FuncDecl) string {
	if d.Recv == nil || len(d.Recv.List) != 1 {
		return ""
	}
	expr := d.Recv.List[0].Type
	if star, ok := expr.(*ast.StarExpr); ok {
		expr = star.X
	}
	switch x := expr.(type) {
	case *ast.IndexExpr:
		expr = x.X
	case *ast.IndexListExpr:
		expr = x.X
	}
	if id, ok := expr.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}
