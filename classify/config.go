package classify

import (
	"fmt"
	"net/textproto"
	"strings"

	"github.com/meterproxy/meterproxy/internal/configcheck"
)

// UnknownCallers is what happens to a request whose key is no configured
// caller's: classify.unknown_callers.
type UnknownCallers string

// Values of Config.UnknownCallers.
const (
	// UnknownForward classifies callers without a configured key like any
	// other request (header bulk, path rules, default class).
	UnknownForward UnknownCallers = "forward"
	// UnknownReject refuses callers without a configured key: Classify
	// returns ErrUnknownCaller.
	UnknownReject UnknownCallers = "reject"
)

// Valid reports whether u is UnknownForward or UnknownReject.
func (u UnknownCallers) Valid() bool { return u == UnknownForward || u == UnknownReject }

// UnmarshalText implements encoding.TextUnmarshaler, so a config file that
// says anything else is refused at load, by key.
func (u *UnknownCallers) UnmarshalText(b []byte) error {
	v := UnknownCallers(b)
	if !v.Valid() {
		return fmt.Errorf("must be %q or %q, got %q", UnknownForward, UnknownReject, b)
	}
	*u = v
	return nil
}

// PathRule assigns a class to requests whose URL path starts with Prefix.
type PathRule struct {
	// Prefix is a literal prefix of the request path; it must start with "/".
	// "/v1/batches" matches "/v1/batches" and "/v1/batches/abc".
	Prefix string `koanf:"prefix"`
	// Class is the class of matching requests from unknown callers, or from
	// known callers once their own class no longer applies (see Classify).
	Class Class `koanf:"class"`
}

// Config is the classify section of the configuration. A Config is a plain
// value; its methods do not modify it and are safe for concurrent use.
type Config struct {
	// Header is the request header a caller may set to "bulk" or
	// "interactive" to choose its class, matched case-insensitively; it is
	// not forwarded upstream.
	Header string `koanf:"header"`
	// DefaultClass is the class of requests no other rule classifies.
	DefaultClass Class `koanf:"default_class"`
	// UnknownCallers is what happens to a request whose key no caller
	// has: forward (UnknownForward) or reject (UnknownReject: 401
	// unknown_caller).
	UnknownCallers UnknownCallers `koanf:"unknown_callers"`
	// Paths classify requests by their path's prefix, tried in order;
	// the first whose prefix matches wins.
	Paths []PathRule `koanf:"paths"`
}

// DefaultConfig returns the defaults, each chosen so that an unconfigured
// proxy never lets unidentified traffic eat the interactive share.
func DefaultConfig() Config {
	return Config{
		// The documented header; clients opt in by name.
		Header: "X-Meterproxy-Class",
		// Unidentified traffic is bulk: interactive must be earned by a key.
		DefaultClass: Bulk,
		// Forward, so putting the proxy in front of an account breaks no one.
		UnknownCallers: UnknownForward,
		// The OpenAI Batch API is bulk by definition.
		Paths: []PathRule{{Prefix: "/v1/batches", Class: Bulk}},
	}
}

// Validate reports every problem in c at once, each naming its key
// relative to Config (for example "paths[0].prefix"; see configcheck). It
// does not modify c.
func (c Config) Validate() error {
	var p configcheck.Problems
	bad := p.Add
	switch {
	case c.Header == "":
		bad("header", "must not be empty")
	case !isToken(c.Header):
		bad("header", "must be a valid HTTP header name, got %q", c.Header)
	case isCredentialHeader(c.Header):
		bad("header", "must not be a credential header, got %q", c.Header)
	}
	if !c.DefaultClass.Valid() {
		bad("default_class", "must be \"interactive\" or \"bulk\", got %s", c.DefaultClass)
	}
	if !c.UnknownCallers.Valid() {
		bad("unknown_callers", "must be %q or %q, got %q", UnknownForward, UnknownReject, c.UnknownCallers)
	}
	for i, p := range c.Paths {
		key := fmt.Sprintf("paths[%d]", i)
		if !strings.HasPrefix(p.Prefix, "/") {
			bad(key+".prefix", "must start with \"/\", got %q", p.Prefix)
		} else if j := shadowedBy(c.Paths[:i], p.Prefix); j >= 0 {
			bad(key+".prefix", "never matches: %s %q comes first", configcheck.Ref(fmt.Sprintf("paths[%d].prefix", j)), c.Paths[j].Prefix)
		}
		if !p.Class.Valid() {
			bad(key+".class", "must be \"interactive\" or \"bulk\", got %s", p.Class)
		}
	}
	return p.Err()
}

// shadowedBy returns the index of the first rule in earlier whose prefix
// matches every path prefix matches, or -1.
func shadowedBy(earlier []PathRule, prefix string) int {
	for j, e := range earlier {
		if strings.HasPrefix(e.Prefix, "/") && strings.HasPrefix(prefix, e.Prefix) {
			return j
		}
	}
	return -1
}

// isCredentialHeader reports whether name is one of the headers Credential reads.
func isCredentialHeader(name string) bool {
	for _, h := range credentialHeaders {
		if textproto.CanonicalMIMEHeaderKey(name) == h {
			return true
		}
	}
	return false
}

// isToken reports whether s is an RFC 9110 token, the syntax of a header name.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		switch {
		case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", b) >= 0:
		default:
			return false
		}
	}
	return true
}
