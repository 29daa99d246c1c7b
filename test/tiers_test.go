package test

import (
	"go/ast"
	"go/build/constraint"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"mvdan.cc/sh/v3/shell"
)

// tierTargets are the make targets CI runs (.ci/run), one tier each: make
// test the suite that counts, make test-chart the Helm chart's tests (they
// need Helm built), make test-load the long load runs (build tag load),
// make test-faults the fault suite (build tag faults).
var tierTargets = []string{"test", "test-chart", "test-load", "test-faults"}

// tierRun is one `go test` a tier runs on this package: the build tags it
// sets, the -run pattern it selects by (nil: every test) and the -skip
// pattern it leaves out by (nil: none).
type tierRun struct {
	target string
	tags   []string
	run    *regexp.Regexp
	skip   *regexp.Regexp
}

// TestEveryTestHasATier: each Test function of this package is run by one
// of the tiers .ci/run runs. The tiers' `go test` commands are read from
// `make -n`, each file's build constraint from its //go:build line: a test
// in a file under a tag no tier sets, or whose name no tier's -run
// selects, fails here rather than never running.
func TestEveryTestHasATier(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	ci, err := os.ReadFile(filepath.Join(root, ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range tierTargets {
		if !regexp.MustCompile(`(?m)^make ` + regexp.QuoteMeta(target) + `$`).Match(ci) {
			t.Errorf(".ci/run does not run `make %s`", target)
		}
	}
	runs := tierRuns(t, root)
	files, err := filepath.Glob(filepath.Join(root, "test", "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	tested := 0
	for _, file := range files {
		expr, names := testFuncs(t, file)
		for _, name := range names {
			tested++
			if !slices.ContainsFunc(runs, func(r tierRun) bool { return r.runs(expr, name) }) {
				t.Errorf("%s (%s) is run by none of make %s: its file's build constraint or its name is outside every tier",
					name, filepath.Base(file), strings.Join(tierTargets, ", make "))
			}
		}
	}
	if tested == 0 {
		t.Fatal("no Test functions found in test/*_test.go")
	}
}

// runs reports whether r runs the test name of a file under expr (nil: a
// file with no build constraint).
func (r tierRun) runs(expr constraint.Expr, name string) bool {
	if expr != nil && !expr.Eval(func(tag string) bool { return slices.Contains(r.tags, tag) }) {
		return false
	}
	return (r.run == nil || r.run.MatchString(name)) && (r.skip == nil || !r.skip.MatchString(name))
}

// tierRuns is every `go test` of this package that `make -n` prints for
// the tier targets.
func tierRuns(t *testing.T, root string) []tierRun {
	t.Helper()
	var runs []tierRun
	for _, target := range tierTargets {
		cmd := exec.CommandContext(t.Context(), "make", "-n", "--no-print-directory", target)
		cmd.Dir = root
		// A make test running this test must not pass its own flags
		// (its jobserver, its -n-less mode) down to the dry run.
		cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
			return strings.HasPrefix(kv, "MAKEFLAGS=") || strings.HasPrefix(kv, "MFLAGS=") || strings.HasPrefix(kv, "MAKELEVEL=")
		})
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make -n %s: %v\n%s", target, err, out)
		}
		n := 0
		for line := range strings.Lines(string(out)) {
			if r, ok := parseGoTest(t, target, line); ok {
				runs = append(runs, r)
				n++
			}
		}
		if n == 0 {
			t.Errorf("make %s runs no `go test` of ./test", target)
		}
	}
	return runs
}

// goTestLine is a recipe line that runs go test.
var goTestLine = regexp.MustCompile(`(^|\s)(\S*/)?go test\s`)

// parseGoTest reads a `go test` command line of target's recipe; ok is
// false for any other line and for a go test that does not test ./test.
func parseGoTest(t *testing.T, target, line string) (r tierRun, ok bool) {
	t.Helper()
	if !goTestLine.MatchString(line) {
		return tierRun{}, false
	}
	words, err := shell.Fields(line, func(string) string { return "" })
	if err != nil {
		t.Fatalf("make %s: cannot split %q: %v", target, line, err)
	}
	r.target = target
	i := slices.Index(words, "test")
	for j := i + 1; j < len(words); j++ {
		flag, value, hasValue := strings.Cut(words[j], "=")
		switch flag {
		case "-tags", "-run", "-skip":
			if !hasValue && j+1 < len(words) {
				j++
				value = words[j]
			}
			if flag == "-tags" {
				r.tags = strings.Split(value, ",")
				continue
			}
			re, err := regexp.Compile(value)
			if err != nil {
				t.Fatalf("make %s: %s %q: %v", target, flag, value, err)
			}
			if flag == "-run" {
				r.run = re
			} else {
				r.skip = re
			}
		case "./...", "./test", "./test/":
			ok = true
		}
	}
	return r, ok
}

// testFuncs returns a test file's build constraint (nil when it has none)
// and its Test functions (TestMain aside).
func testFuncs(t *testing.T, file string) (constraint.Expr, []string) {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var expr constraint.Expr
	for _, g := range f.Comments {
		if g.Pos() > f.Package {
			break
		}
		for _, c := range g.List {
			if constraint.IsGoBuild(c.Text) {
				if expr, err = constraint.Parse(c.Text); err != nil {
					t.Fatalf("%s: %v", file, err)
				}
			}
		}
	}
	var names []string
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Test") && fn.Name.Name != "TestMain" {
			names = append(names, fn.Name.Name)
		}
	}
	return expr, names
}
