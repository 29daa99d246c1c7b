package classify

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"hash/maphash"
	"net/http"
	"net/textproto"
	"slices"
	"strings"

	"github.com/meterproxy/meterproxy/internal/configcheck"
)

// UnknownCaller is Result.Caller for a request whose key matches no
// configured caller (or that presents no key).
const UnknownCaller = "unknown"

// ErrUnknownCaller is returned by Classify, together with the Result, when
// unknown_callers is "reject" and the caller is not configured. The proxy
// answers it with 401.
var ErrUnknownCaller = errors.New("classify: unknown caller")

// Result is the outcome of Classify. It holds no key material.
type Result struct {
	// Caller is the configured caller name, or UnknownCaller.
	Caller string
	// Known reports whether the key matched a configured caller.
	Known bool
	// Class is the admission class.
	Class Class
	// ClaimDenied reports that the class header asked for interactive and
	// the caller is not allowed to claim it, so the header was ignored.
	ClaimDenied bool
	// Anonymous tells unknown callers apart for fair queuing: a keyed hash
	// of the credential an unknown caller presented (seeded at random per
	// process, so it identifies nothing outside it), 0 for a known caller
	// or no credential. It is never logged or used as a label.
	Anonymous uint64
}

// anonSeed keys Result.Anonymous.
var anonSeed = maphash.MakeSeed()

// Classifier classifies requests by caller key, class header and path. It is
// immutable after New and safe for concurrent use.
type Classifier struct {
	header       string // canonical form of Config.Header
	defaultClass Class
	reject       bool
	paths        []PathRule
	callers      []entry
}

// New validates cfg and callers (reporting every problem of both at once,
// named as the configuration file names them: under classify and callers)
// and returns a Classifier. Keys named by key_env are read through getenv
// and hashed here, once; a nil getenv behaves as an empty environment.
// New keeps no reference to cfg, callers or getenv.
func New(cfg Config, callers []Caller, getenv func(string) string) (*Classifier, error) {
	cfgErr := cfg.Validate()
	entries, callersErr := compileCallers(callers, getenv)
	if err := errors.Join(configcheck.Under("classify", cfgErr), configcheck.Under("callers", callersErr)); err != nil {
		return nil, err
	}
	return &Classifier{
		header:       textproto.CanonicalMIMEHeaderKey(cfg.Header),
		defaultClass: cfg.DefaultClass,
		reject:       cfg.UnknownCallers == UnknownReject,
		paths:        slices.Clone(cfg.Paths),
		callers:      entries,
	}, nil
}

// Callers returns the configured caller names in config order, for
// pre-initialising metric labels. The slice is a fresh copy.
func (c *Classifier) Callers() []string {
	names := make([]string, len(c.callers))
	for i, e := range c.callers {
		names[i] = e.name
	}
	return names
}

// claim is what the class header asks for.
type claim uint8

const (
	claimNone claim = iota
	claimBulk
	claimInteractive
)

// Classify identifies the caller from the credential in h (see Credential)
// and picks the class of a request for path (the URL path). Precedence:
//
//  1. class header "bulk" (case-insensitive, trimmed): Bulk, for any caller;
//  2. class header "interactive": Interactive if the caller is known and may
//     claim it; otherwise the header is ignored and ClaimDenied is set
//     (other header values are ignored silently);
//  3. a known caller's configured class;
//  4. the first path rule whose Prefix is a prefix of path;
//  5. the default class.
//
// When unknown_callers is "reject" and the caller is not known, Classify
// returns the Result (classified by 1, 4, 5) with ErrUnknownCaller. It
// neither retains nor returns the key, and is safe for concurrent use.
func (c *Classifier) Classify(h http.Header, path string) (Result, error) {
	res := Result{Caller: UnknownCaller}
	var caller *entry
	if _, key, ok := Credential(h); ok {
		if i := c.lookup(key); i >= 0 {
			caller = &c.callers[i]
			res.Caller, res.Known = caller.name, true
		} else {
			res.Anonymous = max(1, maphash.String(anonSeed, key))
		}
	}
	switch cl := parseClaim(h.Get(c.header)); {
	case cl == claimBulk:
		res.Class = Bulk
	case cl == claimInteractive && caller != nil && caller.mayClaim:
		res.Class = Interactive
	default:
		res.ClaimDenied = cl == claimInteractive
		if caller != nil {
			res.Class = caller.class
		} else {
			res.Class = c.pathClass(path)
		}
	}
	if !res.Known && c.reject {
		return res, ErrUnknownCaller
	}
	return res, nil
}

// lookup returns the index of the caller whose hash matches key, or -1. It
// compares against every caller in constant time and never exits early, so
// timing does not reveal which caller (if any) matched.
func (c *Classifier) lookup(key string) int {
	sum := hashKey(key)
	idx := -1
	for i := range c.callers {
		eq := subtle.ConstantTimeCompare(sum[:], c.callers[i].hash[:])
		idx = subtle.ConstantTimeSelect(eq, i, idx)
	}
	return idx
}

// hashKey returns the SHA-256 of key. Keys up to the buffer size are copied
// to the stack, so hashing does not allocate.
func hashKey(key string) [sha256.Size]byte {
	var buf [256]byte
	return sha256.Sum256(append(buf[:0], key...))
}

// pathClass applies the path rules and the default class.
func (c *Classifier) pathClass(path string) Class {
	for _, p := range c.paths {
		if strings.HasPrefix(path, p.Prefix) {
			return p.Class
		}
	}
	return c.defaultClass
}

// parseClaim interprets a class header value.
func parseClaim(v string) claim {
	v = trim(v)
	switch {
	case strings.EqualFold(v, "bulk"):
		return claimBulk
	case strings.EqualFold(v, "interactive"):
		return claimInteractive
	default:
		return claimNone
	}
}
