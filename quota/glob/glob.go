// Package glob matches model names against the patterns of
// account.models, prices and flex_models: * stands for any run of
// characters, every other byte for itself, an Azure deployment regardless
// of ASCII case. It checks first-match-wins lists too (FirstMatch), where a
// pattern an earlier one covers could never match.
package glob

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxPattern bounds a match pattern's length, and MaxName the model
// names matched against them: a longer one (from a hostile path or body)
// draws on the account without being matched, so matching costs at most
// MaxPattern × MaxName steps per pattern.
const (
	MaxPattern = 256
	MaxName    = 512
)

// Matcher returns how a pattern is matched against name — exactly, or
// with fold (an Azure deployment) ASCII case-insensitively — and false
// when no pattern is: name is empty, or longer than any pattern is worth
// matching against (MaxName).
func Matcher(name string, fold bool) (func(pattern string) bool, bool) {
	if name == "" || len(name) > MaxName {
		return nil, false
	}
	match := Match
	if fold {
		match = MatchFold
	}
	return func(p string) bool { return match(p, name) }, true
}

// FirstMatch is the patterns of a first-match-wins list (account.models,
// prices, flex_models) checked so far, each with its key. The zero value
// is an empty list.
type FirstMatch []struct{ key, pattern string }

// Check checks the match list under key (account.models[0].match): not
// empty, each pattern valid (CheckPattern) and not covered by one before
// it in the list, which would leave it nothing to match; and adds them.
func (f *FirstMatch) Check(bad func(string, string, ...any), key string, match []string) {
	if len(match) == 0 {
		bad(key, "must list at least one model name or pattern")
	}
	for j, p := range match {
		pkey := fmt.Sprintf("%s[%d]", key, j)
		if err := CheckPattern(p); err != "" {
			bad(pkey, "%s, got %q", err, p)
			continue
		}
		for _, e := range *f {
			if Covers(e.pattern, p) {
				bad(pkey, "%q can never match: %s (%q) matches every model it does, and the first match wins", p, e.key, e.pattern)
				break
			}
		}
		*f = append(*f, struct{ key, pattern string }{pkey, p})
	}
}

// CheckPattern says what is wrong with a match pattern, or "".
func CheckPattern(p string) string {
	switch {
	case p == "":
		return "must not be empty"
	case len(p) > MaxPattern:
		return fmt.Sprintf("must be at most %d bytes", MaxPattern)
	case !utf8.ValidString(p):
		return "must be UTF-8"
	case strings.IndexFunc(p, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0:
		return "must not hold spaces or control characters"
	}
	return ""
}

// Match reports whether s matches pattern p, in which * stands for any
// run of characters (none included) and every other byte for itself. It
// backtracks only to the last star, so it is linear in len(p)·len(s) at
// worst.
func Match(p, s string) bool {
	return matchFn(p, s, func(pc, sc byte, _ bool) bool { return pc == sc })
}

// MatchFold is Match with ASCII letters compared
// case-insensitively, for Azure deployments.
func MatchFold(p, s string) bool {
	return matchFn(p, s, func(pc, sc byte, _ bool) bool { return lowerASCII(pc) == lowerASCII(sc) })
}

// lowerASCII is c in lower case when it is an ASCII letter, else c.
func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// Covers reports whether every string q matches also matches p: p
// matches q's text when q's stars are symbols only p's stars may stand
// for.
func Covers(p, q string) bool {
	return matchFn(p, q, func(pc, sc byte, _ bool) bool { return pc == sc && sc != '*' })
}

// matchFn is the matcher both use: a * in p takes any run of s;
// another byte of p must equal the byte of s (eq).
func matchFn(p, s string, eq func(pc, sc byte, star bool) bool) bool {
	pi, si := 0, 0
	star, mark := -1, 0
	for si < len(s) {
		switch {
		case pi < len(p) && p[pi] == '*':
			star, mark = pi, si
			pi++
		case pi < len(p) && eq(p[pi], s[si], false):
			pi++
			si++
		case star >= 0:
			mark++
			pi, si = star+1, mark
		default:
			return false
		}
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}
