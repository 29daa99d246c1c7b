package main

import "strings"

func splitLines(s string) []string { return strings.Split(strings.ReplaceAll(s, "\r\n", "\n"), "\n") }

// cut parses "<prefix><name><sep><value>,…" into name and value.
func cut(line, prefix, sep string) (name, value string, ok bool) {
	rest, ok := strings.CutPrefix(line, prefix)
	if !ok {
		return "", "", false
	}
	name, value, ok = strings.Cut(rest, sep)
	if !ok {
		return "", "", false
	}
	value, _, _ = strings.Cut(value, ",")
	return name, value, true
}
