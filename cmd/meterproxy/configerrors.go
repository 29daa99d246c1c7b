package main

import (
	"errors"
	"strings"
)

// problemKey is the key a "key: problem" line names, or "".
func problemKey(line string) string {
	key, _, ok := strings.Cut(line, ": ")
	if !ok || strings.ContainsAny(key, " \t") {
		return ""
	}
	return key
}

// besideDecoded is the validation's problems, one a line, without those
// of a key the decoder refused already: a value that did not decode was
// left at its default (or zero), and validating that would report a second
// fault that is not in the file (unknown_callers: rejct "is forward";
// usd: "3$" "got 0"). One error per fault.
func besideDecoded(validation error, decoded []error) []error {
	if validation == nil {
		return nil
	}
	refused := make(map[string]bool, len(decoded))
	for _, err := range decoded {
		refused[problemKey(err.Error())] = true
	}
	var out []error
	for line := range strings.Lines(validation.Error()) {
		line = strings.TrimRight(line, "\n")
		if k := problemKey(line); line == "" || (k != "" && refused[k]) {
			continue
		}
		out = append(out, errors.New(line))
	}
	return out
}

// namingSources adds, to each problem of a key set by an environment
// variable (fromEnv, by key), which variable: the fix is there, not in the
// file.
func namingSources(errs []error, fromEnv map[string]string) []error {
	if len(fromEnv) == 0 {
		return errs
	}
	out := make([]error, 0, len(errs))
	for _, err := range errs {
		if err == nil {
			continue
		}
		var b strings.Builder
		for line := range strings.Lines(err.Error()) {
			line = strings.TrimRight(line, "\n")
			if name, ok := fromEnv[problemKey(line)]; ok {
				line += " (the value is from the environment variable " + name + ", not the file)"
			}
			if b.Len() > 0 {
				b.WriteString("\n")
			}
			b.WriteString(line)
		}
		out = append(out, errors.New(b.String()))
	}
	return out
}
