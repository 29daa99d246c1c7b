package docgen

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
)

// Source reads doc comments from the module's Go files, by package import
// path. A Source caches what it parsed; it is not safe for concurrent use.
type Source struct {
	root, module string
	files        map[string][]*ast.File // by import path
}

// NewSource finds the module that holds dir (its go.mod, dir or above).
func NewSource(dir string) (*Source, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod")) //nolint:gosec // G304: the module's go.mod, found upwards
		if err == nil {
			for line := range strings.SplitSeq(string(b), "\n") {
				if m, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
					return &Source{root: dir, module: strings.TrimSpace(m), files: map[string][]*ast.File{}}, nil
				}
			}
			return nil, fmt.Errorf("%s: no module line", filepath.Join(dir, "go.mod"))
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return nil, errors.New("docgen: no go.mod above the working directory")
		}
		dir = parent
	}
}

// Root is the module's directory.
func (s *Source) Root() string { return s.root }

// parse returns the non-test files of the package at import path pkg.
func (s *Source) parse(pkg string) ([]*ast.File, error) {
	if files, ok := s.files[pkg]; ok {
		return files, nil
	}
	rel, ok := strings.CutPrefix(pkg, s.module)
	if !ok {
		return nil, fmt.Errorf("docgen: package %s is not in module %s", pkg, s.module)
	}
	dir := filepath.Join(s.root, filepath.FromSlash(strings.TrimPrefix(rel, "/")))
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	s.files[pkg] = files
	return files, nil
}

// FieldDocs returns the doc comments of the fields of struct type name in
// package pkg, by field name, each as one line of text; a field without
// one is absent.
func (s *Source) FieldDocs(pkg, name string) (map[string]string, error) {
	files, err := s.parse(pkg)
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.TYPE {
				continue
			}
			for _, spec := range g.Specs {
				ts := spec.(*ast.TypeSpec)
				st, ok := ts.Type.(*ast.StructType)
				if !ok || ts.Name.Name != name {
					continue
				}
				docs := map[string]string{}
				for _, field := range st.Fields.List {
					for _, n := range field.Names {
						if text := oneLine(field.Doc); text != "" {
							docs[n.Name] = text
						}
					}
				}
				return docs, nil
			}
		}
	}
	return nil, fmt.Errorf("docgen: no struct type %s in %s", name, pkg)
}

// ConstDoc is one constant of a package: its name, its string value and
// its doc comment as one line.
type ConstDoc struct {
	Name, Value, Doc string
}

// StringConsts returns the string constants of package pkg whose names
// begin with prefix, in source order, files by name.
func (s *Source) StringConsts(pkg, prefix string) ([]ConstDoc, error) {
	files, err := s.parse(pkg)
	if err != nil {
		return nil, err
	}
	var consts []ConstDoc
	for _, f := range files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				doc := vs.Doc
				if doc == nil && len(g.Specs) == 1 {
					doc = g.Doc
				}
				for i, n := range vs.Names {
					if !strings.HasPrefix(n.Name, prefix) || i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					consts = append(consts, ConstDoc{Name: n.Name, Value: strings.Trim(lit.Value, "\"`"), Doc: oneLine(doc)})
				}
			}
		}
	}
	return consts, nil
}

// oneLine is a doc comment's text on one line.
func oneLine(g *ast.CommentGroup) string {
	if g == nil {
		return ""
	}
	return strings.Join(strings.Fields(g.Text()), " ")
}
