package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// readmeBlock is one fenced block of README.md: its language tag, the
// line it starts on, and its text.
type readmeBlock struct {
	lang string
	line int
	text string
}

// readmeBlocks returns README.md's fenced blocks.
func readmeBlocks(t *testing.T) []readmeBlock {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var blocks []readmeBlock
	var open *readmeBlock
	for i, line := range strings.Split(string(readme), "\n") {
		switch {
		case open == nil && strings.HasPrefix(line, "```"):
			open = &readmeBlock{lang: strings.TrimPrefix(line, "```"), line: i + 1}
		case open != nil && line == "```":
			blocks = append(blocks, *open)
			open = nil
		case open != nil:
			open.text += line + "\n"
		}
	}
	if open != nil {
		t.Fatalf("README.md: the block at line %d is never closed", open.line)
	}
	return blocks
}

// keyEnv finds the environment variables a configuration names for keys.
var keyEnv = regexp.MustCompile(`\b(?:key_env|api_key_env):\s*([A-Z_][A-Z0-9_]*)`)

// TestREADMESamples keeps the README's samples true (issue 23: its
// check-config sample had gone stale unnoticed): every yaml block is a
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
				t.Errorf("README.md line %d: the yaml block is not a configuration meterproxy starts on: %v\n%s", b.line, err, b.text)
			}
		case strings.HasPrefix(b.text, "$ go run ./cmd/meterproxy "):
			commands++
			command, want, _ := strings.Cut(b.text, "\n")
			args := strings.Fields(strings.TrimPrefix(command, "$ go run ./cmd/meterproxy "))
			for i, a := range args {
				if i > 0 && args[i-1] == "--config" {
					args[i] = filepath.Join("..", "..", a) // the README's paths are the repository's
				}
			}
			var out, errOut bytes.Buffer
			if err := run(t.Context(), args, nil, &out, &errOut); err != nil {
				t.Errorf("README.md line %d: %s: %v\n%s", b.line, command, err, errOut.String())
				continue
			}
			if out.String() != want {
				t.Errorf("README.md line %d: %s prints\n%s\nbut the README shows\n%s", b.line, command, out.String(), want)
			}
		}
	}
	if configs < 4 || commands < 1 {
		t.Errorf("found %d yaml blocks and %d command samples in README.md; it has at least 4 and 1", configs, commands)
	}
}
