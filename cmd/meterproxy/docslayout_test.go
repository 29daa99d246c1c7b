package main

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// The documentation's shape (issue 35: a README of 1,698 lines, no table of
// contents, and code citing files the repository does not have). These
// tests keep the README short, every relative link resolving, each page of
// docs/ with a table of contents, and every citation inside the repository.

// repoRoot is the repository's root, seen from this package's directory.
var repoRoot = filepath.Join("..", "..")

// readmeMaxLines is the most lines README.md may have: what meterproxy is,
// the two commands, the tour, pointing an SDK at it, and links to docs/.
const readmeMaxLines = 300

// markdownPage is one markdown file: its path relative to the repository's
// root, and its lines outside fenced blocks (a fenced line is "", so line
// numbers hold).
type markdownPage struct {
	file  string
	lines []string
}

// readPage reads file (relative to the repository's root), blanking its
// fenced blocks.
func readPage(t *testing.T, file string) markdownPage {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(file)))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(raw), "\n")
	fenced := false
	for i, line := range lines {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			lines[i] = ""
		} else if fenced {
			lines[i] = ""
		}
	}
	return markdownPage{file: file, lines: lines}
}

// headings are the page's headings (any level) in order.
func (p markdownPage) headings() (level []int, text []string) {
	for _, line := range p.lines {
		hashes := len(line) - len(strings.TrimLeft(line, "#"))
		if hashes > 0 && hashes <= 6 && strings.HasPrefix(line[hashes:], " ") {
			level = append(level, hashes)
			text = append(text, strings.TrimSpace(line[hashes:]))
		}
	}
	return level, text
}

// anchors are the fragments GitHub gives the page's headings.
func (p markdownPage) anchors() map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	_, text := p.headings()
	for _, h := range text {
		a := anchor(h)
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// anchor is GitHub's fragment for a heading: lower case, spaces to '-',
// every other character but letters, digits, '-' and '_' dropped.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// inlineCode is a code span; a link's target is never inside one.
var inlineCode = regexp.MustCompile("`[^`]*`")

// linkTarget is an inline link's target.
var linkTarget = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// links are the page's inline link targets, with the line each is on.
func (p markdownPage) links() (line []int, target []string) {
	for i, l := range p.lines {
		for _, m := range linkTarget.FindAllStringSubmatch(inlineCode.ReplaceAllString(l, "``"), -1) {
			line = append(line, i+1)
			target = append(target, m[1])
		}
	}
	return line, target
}

// docPages are README.md and every markdown file in docs/.
func docPages(t *testing.T) []markdownPage {
	t.Helper()
	pages := []markdownPage{readPage(t, "README.md")}
	docs, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil || len(docs) == 0 {
		t.Fatalf("docs/*.md: %v, %d files", err, len(docs))
	}
	for _, d := range docs {
		pages = append(pages, readPage(t, "docs/"+filepath.Base(d)))
	}
	return pages
}

// TestREADMEIsShort: README.md stays an entrance, the rest in docs/.
func TestREADMEIsShort(t *testing.T) {
	if n := len(readPage(t, "README.md").lines) - 1; n > readmeMaxLines {
		t.Errorf("README.md has %d lines; at most %d — move the detail to docs/", n, readmeMaxLines)
	}
}

// TestDocLinksResolve: every relative link of README.md and docs/*.md names
// a file of the repository, and every #fragment a heading of that file.
func TestDocLinksResolve(t *testing.T) {
	pages := map[string]markdownPage{}
	for _, p := range docPages(t) {
		pages[p.file] = p
	}
	var checked int
	for _, p := range pages {
		lines, targets := p.links()
		for i, target := range targets {
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			checked++
			where := fmt.Sprintf("%s line %d: link %s", p.file, lines[i], target)
			file, fragment, _ := strings.Cut(target, "#")
			to := p.file
			if file != "" {
				to = path.Clean(path.Join(path.Dir(p.file), file))
			}
			if to == ".." || strings.HasPrefix(to, "../") {
				t.Errorf("%s: outside the repository", where)
				continue
			}
			info, err := os.Stat(filepath.Join(repoRoot, filepath.FromSlash(to)))
			if err != nil {
				t.Errorf("%s: %s is not in the repository", where, to)
				continue
			}
			if fragment == "" {
				continue
			}
			if info.IsDir() || !strings.HasSuffix(to, ".md") {
				t.Errorf("%s: a fragment of %s, which is no markdown file", where, to)
				continue
			}
			page, ok := pages[to]
			if !ok {
				page = readPage(t, to)
			}
			if !page.anchors()[fragment] {
				t.Errorf("%s: %s has no heading #%s", where, to, fragment)
			}
		}
	}
	if checked < 50 {
		t.Errorf("checked %d relative links; README.md and docs/ have far more: is the link pattern broken?", checked)
	}
}

// TestDocPagesHaveContents: each page of docs/ with more than one "##" heading
// opens, before the first (or under a first "## Contents", as the generated
// configuration reference has it), with a table of contents linking every
// one.
func TestDocPagesHaveContents(t *testing.T) {
	for _, p := range docPages(t) {
		if p.file == "README.md" {
			continue
		}
		levels, text := p.headings()
		var sections []string
		for i, h := range text {
			if levels[i] == 2 && (h != "Contents" || len(sections) > 0) {
				sections = append(sections, h)
			}
		}
		if len(sections) < 2 {
			continue
		}
		var contents []string
		for _, line := range p.lines {
			if strings.HasPrefix(line, "## ") && line != "## Contents" {
				break
			}
			contents = append(contents, line)
		}
		head := strings.Join(contents, "\n")
		for _, h := range sections {
			if !strings.Contains(head, "](#"+anchor(h)+")") {
				t.Errorf("%s: its table of contents does not link %q (#%s)", p.file, h, anchor(h))
			}
		}
	}
}

// TestCitationsStayInside: no source, doc or config file cites a file the
// repository does not have — the design and style notes of another
// repository, or a directory beside this one (issue 35).
func TestCitationsStayInside(t *testing.T) {
	// Spelled in parts, so this file does not cite them itself.
	var outside []string
	for _, name := range []string{"DESIGN", "STYLE", "PROVIDERS"} {
		outside = append(outside, name+".md")
	}
	outside = append(outside, ".."+"/shared")
	root, err := os.OpenRoot(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = root.Close() }()
	tree := root.FS()
	var read int
	err = fs.WalkDir(tree, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); name == ".git" || name == "bin" {
				return fs.SkipDir // git's store; bin/ holds built and installed tools
			}
			return nil
		}
		switch path.Ext(p) {
		case ".go", ".md", ".yaml", ".yml":
		default:
			return nil
		}
		raw, err := fs.ReadFile(tree, p)
		if err != nil {
			return err
		}
		read++
		for _, name := range outside {
			if strings.Contains(string(raw), name) {
				t.Errorf("%s names %s, which is not in the repository", p, name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if read < 100 {
		t.Errorf("read %d files; the repository has far more", read)
	}
}
