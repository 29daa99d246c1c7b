package docgen

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Check compares want, the file at rel (from the module's root) as the
// code renders it, with the file, or with update writes it. The error
// names the first line that differs, and the key or code of its row.
func Check(src *Source, rel string, want []byte, update bool) error {
	path := filepath.Join(src.Root(), filepath.FromSlash(rel))
	if update {
		return os.WriteFile(path, want, 0o644) //nolint:gosec // G306: a document of the repository, read by everyone
	}
	got, err := os.ReadFile(path) //nolint:gosec // G304: a file of the module, named by the caller's code
	if err != nil {
		return fmt.Errorf("%s: %w (run make docs)", rel, err)
	}
	if bytes.Equal(got, want) {
		return nil
	}
	gotLines, wantLines := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := range max(len(gotLines), len(wantLines)) {
		g, w := line(gotLines, i), line(wantLines, i)
		if g == w {
			continue
		}
		what := rowName(w)
		if what == "" {
			what = rowName(g)
		}
		if what != "" {
			what = " (" + what + ")"
		}
		return fmt.Errorf("%s is stale at line %d%s: run make docs\n  file: %s\n  code: %s", rel, i+1, what, g, w)
	}
	return nil
}

func line(lines []string, i int) string {
	if i < len(lines) {
		return lines[i]
	}
	return "(end of file)"
}

// rowName is the first cell of a table row, its key or code: "" for
// another line.
func rowName(line string) string {
	if !strings.HasPrefix(line, "| `") {
		return ""
	}
	name, _, _ := strings.Cut(strings.TrimPrefix(line, "| `"), "`")
	return name
}
