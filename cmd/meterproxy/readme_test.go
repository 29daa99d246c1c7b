package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// readmeBlock is one fenced block of a markdown file: the file (relative
// to the repository's root), its language tag, the line it starts on, and
// its text.
type readmeBlock struct {
	file string
	lang string
	line int
	text string
}

// markdownFiles are README.md and every markdown file in docs/, relative
// to the repository's root: where the samples live since the README was
// split by topic (issue 35).
func markdownFiles(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	if err != nil || len(docs) == 0 {
		t.Fatalf("docs/*.md: %v, %d files", err, len(docs))
	}
	files := []string{"README.md"}
	for _, d := range docs {
		files = append(files, filepath.ToSlash(filepath.Join("docs", filepath.Base(d))))
	}
	return files
}

// readmeBlocks returns the fenced blocks of README.md and of the markdown
// files under docs/.
func readmeBlocks(t *testing.T) []readmeBlock {
	t.Helper()
	var blocks []readmeBlock
	for _, file := range markdownFiles(t) {
		text, err := os.ReadFile(filepath.Join("..", "..", file))
		if err != nil {
			t.Fatal(err)
		}
		var open *readmeBlock
		for i, line := range strings.Split(string(text), "\n") {
			switch {
			case open == nil && strings.HasPrefix(line, "```"):
				open = &readmeBlock{file: file, lang: strings.TrimPrefix(line, "```"), line: i + 1}
			case open != nil && line == "```":
				blocks = append(blocks, *open)
				open = nil
			case open != nil:
				open.text += line + "\n"
			}
		}
		if open != nil {
			t.Fatalf("%s: the block at line %d is never closed", file, open.line)
		}
	}
	return blocks
}

// keyEnv finds the environment variables a configuration names for keys.
var keyEnv = regexp.MustCompile(`\b(?:key_env|api_key_env):\s*([A-Z_][A-Z0-9_]*)`)

// TestREADMESamples keeps the samples of README.md and docs/ true (issue
// 23: the README's check-config sample had gone stale unnoticed; issue 35
// moved most samples to docs/): every yaml block is a
// configuration meterproxy starts on, and every block that shows a
// meterproxy command ("$ go run ./cmd/meterproxy …") shows what that
// command prints today, exactly.
func TestREADMESamples(t *testing.T) {
	var configs, commands int
	for _, b := range readmeBlocks(t) {
		switch {
		case b.lang == "yaml":
			configs++
			var environ []string
			for _, m := range keyEnv.FindAllStringSubmatch(b.text, -1) {
				environ = append(environ, m[1]+"=sk-readme-"+strings.ToLower(m[1]))
			}
			cfg, err := loadConfig(writeConfig(t, b.text), environ, lookupIn(environ))
			if err == nil {
				_, err = checkServable(cfg, lookupIn(environ))
			}
			if err != nil {
				t.Errorf("%s line %d: the yaml block is not a configuration meterproxy starts on: %v\n%s", b.file, b.line, err, b.text)
			}
		case strings.HasPrefix(b.text, "$ go run ./cmd/meterproxy "):
			commands++
			command, want, _ := strings.Cut(b.text, "\n")
			args := strings.Fields(strings.TrimPrefix(command, "$ go run ./cmd/meterproxy "))
			for i, a := range args {
				if i > 0 && args[i-1] == "--config" {
					args[i] = filepath.Join("..", "..", a) // the samples' paths are the repository's
				}
			}
			var out, errOut bytes.Buffer
			if err := run(t.Context(), args, nil, &out, &errOut); err != nil {
				t.Errorf("%s line %d: %s: %v\n%s", b.file, b.line, command, err, errOut.String())
				continue
			}
			if out.String() != want {
				t.Errorf("%s line %d: %s prints\n%s\nbut the sample shows\n%s", b.file, b.line, command, out.String(), want)
			}
		}
	}
	if configs < 4 || commands < 1 {
		t.Errorf("found %d yaml blocks and %d command samples in README.md and docs/; they have at least 4 and 1", configs, commands)
	}
}
