package test

import (
	"errors"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestPackagesHaveDocComments checks that every Go package in the module has
// a package doc comment in at least one of its non-test files (docs/style.md
// rule 12), so `go doc` says what each room is for.
func TestPackagesHaveDocComments(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	dirs := goPackageDirs(t, root)
	if len(dirs) == 0 {
		t.Fatalf("no Go packages found under %s", root)
	}
	for _, dir := range dirs {
		rel, err := filepath.Rel(root, dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(filepath.ToSlash(rel), func(t *testing.T) {
			files, err := filepath.Glob(filepath.Join(dir, "*.go"))
			if err != nil {
				t.Fatal(err)
			}
			fset := token.NewFileSet()
			nonTest := 0
			for _, f := range files {
				if strings.HasSuffix(f, "_test.go") {
					continue
				}
				nonTest++
				file, err := parser.ParseFile(fset, f, nil, parser.PackageClauseOnly|parser.ParseComments)
				if err != nil {
					t.Fatalf("parse %s: %v", f, err)
				}
				if file.Doc != nil && strings.TrimSpace(file.Doc.Text()) != "" {
					return
				}
			}
			if nonTest == 0 {
				t.Fatalf("%s has only _test.go files: add a doc.go with the package doc comment", rel)
			}
			t.Errorf("%s has no package doc comment: add one (\"// Package x …\" or \"// Command x …\") to doc.go or the main file", rel)
		})
	}
}

// moduleRoot returns the directory of the go.mod that encloses the working
// directory (the package directory while `go test` runs).
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		} else if !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
}

// goPackageDirs returns, sorted, every directory under root that holds a .go
// file, skipping what the go command skips (testdata, hidden and _-prefixed
// directories, nested modules) and build output (bin).
func goPackageDirs(t *testing.T, root string) []string {
	t.Helper()
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == root {
				return nil
			}
			name := d.Name()
			if name == "testdata" || name == "bin" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(d.Name(), ".go") {
			seen[filepath.Dir(path)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return slices.Sorted(maps.Keys(seen))
}
