package glob

import (
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

// globRegexp is Match's meaning as a regular expression: * is .*,
// everything else itself, anchored.
func globRegexp(p string) *regexp.Regexp {
	parts := strings.Split(p, "*")
	for i := range parts {
		parts[i] = regexp.QuoteMeta(parts[i])
	}
	return regexp.MustCompile(`^(?s:` + strings.Join(parts, ".*") + `)$`)
}

// FuzzGlob holds Match to its regular-expression meaning, and
// Covers to its promise: a string the covered pattern matches, the
// covering one matches too.
func FuzzGlob(f *testing.F) {
	for _, seed := range [][3]string{
		{"gpt-4o*", "gpt-4o-mini*", "gpt-4o-mini-2024"},
		{"*a*", "*a*a*", "banana"},
		{"*ab*", "*a*b*", "axb"},
		{"a*a", "a*", "ab"},
		{"**", "x", ""},
	} {
		f.Add(seed[0], seed[1], seed[2])
	}
	f.Fuzz(func(t *testing.T, p, q, s string) {
		if len(p) > 64 || len(q) > 64 || len(s) > 256 || !utf8.ValidString(p) || !utf8.ValidString(s) {
			return // patterns are valid UTF-8 (CheckPattern); a byte-wise match of one needs no rune boundaries
		}
		if got, want := Match(p, s), globRegexp(p).MatchString(s); got != want {
			t.Fatalf("Match(%q, %q) = %v, the regexp says %v", p, s, got, want)
		}
		if Covers(p, q) && Match(q, s) && !Match(p, s) {
			t.Fatalf("Covers(%q, %q), yet %q matches only the second", p, q, s)
		}
	})
}
