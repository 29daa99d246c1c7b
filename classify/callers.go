package classify

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/meterproxy/meterproxy/internal/configcheck"
)

// Caller is one configured client of the proxy, identified by its API key.
// Exactly one of KeySHA256 and KeyEnv is set.
type Caller struct {
	// Name identifies the caller in metrics and logs; unique, not "unknown".
	Name string `koanf:"name"`
	// KeySHA256 is the hex SHA-256 of the caller's key (64 characters,
	// either case), e.g. the output of `printf %s "$KEY" | sha256sum`.
	KeySHA256 string `koanf:"key_sha256"`
	// KeyEnv names an environment variable holding the caller's key itself.
	// Surrounding whitespace in its value is ignored.
	KeyEnv string `koanf:"key_env"`
	// Class is the caller's class when its request does not choose one.
	Class Class `koanf:"class"`
	// MayClaimInteractive lets the caller choose interactive with the class
	// header. Any caller may choose bulk.
	MayClaimInteractive bool `koanf:"may_claim_interactive"`
	// MaxInFlight caps this caller's requests in flight, fleet-wide, inside
	// its class's bound; 0 means no cap of its own.
	MaxInFlight int64 `koanf:"max_in_flight"`
	// RequestsPerMinute caps this caller's admissions per minute,
	// fleet-wide, inside its class's share; 0 means no cap of its own.
	RequestsPerMinute int64 `koanf:"requests_per_minute"`
	// Weight is the caller's share of its class against the class's other
	// callers (classes.<class>.fairness: callers), 0 < weight <= 1000; 0
	// means 1.
	Weight float64 `koanf:"weight"`
	// Budget caps what the caller's requests may cost per UTC day or
	// month, fleet-wide (see "Spend and budgets"); the zero value is no
	// budget of its own.
	Budget Budget `koanf:"budget"`
	// MaxSessions caps this caller's Realtime sessions open at once on
	// each replica; 0 means no cap of its own.
	MaxSessions int `koanf:"max_sessions"`
}

// ValidateCallers reports every problem in callers at once, each naming its
// key relative to the list (for example "[1].key_sha256"; see configcheck). getenv resolves KeyEnv; a nil
// getenv behaves as an empty environment. Errors never contain a key, a
// key's hash or any part of either. ValidateCallers is safe for concurrent
// use if getenv is.
func ValidateCallers(callers []Caller, getenv func(string) string) error {
	_, err := compileCallers(callers, getenv)
	return err
}

// entry is a compiled Caller: the decoded hash replaces the key material.
type entry struct {
	name     string
	hash     [sha256.Size]byte
	class    Class
	mayClaim bool
}

// emptyKeyHash is the SHA-256 of the empty string, which no caller can
// present (Credential never returns an empty key).
var emptyKeyHash = sha256.Sum256(nil)

// compileCallers validates callers and resolves each to an entry.
func compileCallers(callers []Caller, getenv func(string) string) ([]entry, error) {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	var p configcheck.Problems
	bad := p.Add
	entries := make([]entry, 0, len(callers))
	names := make(map[string]int, len(callers))
	hashes := make(map[[sha256.Size]byte]int, len(callers))
	for i, c := range callers {
		key := fmt.Sprintf("[%d]", i)
		switch j, dup := names[c.Name]; {
		case c.Name == "":
			bad(key+".name", "must not be empty")
		case c.Name == UnknownCaller:
			bad(key+".name", "%q is reserved for callers not in this list", UnknownCaller)
		case dup:
			bad(key+".name", "duplicate of %s %q", configcheck.Ref(fmt.Sprintf("[%d].name", j)), c.Name)
		default:
			names[c.Name] = i
		}
		if !c.Class.Valid() {
			bad(key+".class", "must be \"interactive\" or \"bulk\", got %s", c.Class)
		}
		if math.IsNaN(c.Weight) || c.Weight < 0 || c.Weight > 1000 {
			bad(key+".weight", "must be between 0 (= 1) and 1000, got %g", c.Weight)
		}
		if c.MaxInFlight < 0 {
			bad(key+".max_in_flight", "must be >= 0 (0 = no cap), got %d", c.MaxInFlight)
		}
		if c.RequestsPerMinute < 0 {
			bad(key+".requests_per_minute", "must be >= 0 (0 = no cap), got %d", c.RequestsPerMinute)
		}
		if c.MaxSessions < 0 {
			bad(key+".max_sessions", "must be >= 0 (0 = no cap), got %d", c.MaxSessions)
		}
		c.Budget.Check(bad, key+".budget")
		hash, field, err := callerHash(c, getenv)
		if err != nil {
			bad(key+field, "%v", err)
			continue
		}
		if j, dup := hashes[hash]; dup {
			bad(key+field, "same key as %s", configcheck.Ref(fmt.Sprintf("[%d]", j)))
			continue
		}
		hashes[hash] = i
		entries = append(entries, entry{name: c.Name, hash: hash, class: c.Class, mayClaim: c.MayClaimInteractive})
	}
	if err := p.Err(); err != nil {
		return nil, err
	}
	return entries, nil
}

// callerHash returns the SHA-256 of c's key and the config field it came
// from (".key_sha256", ".key_env", or "" when neither or both are set).
// Its errors never include key material.
func callerHash(c Caller, getenv func(string) string) (hash [sha256.Size]byte, field string, err error) {
	switch {
	case (c.KeySHA256 == "") == (c.KeyEnv == ""):
		return hash, "", errors.New("set exactly one of key_sha256 and key_env")
	case c.KeySHA256 != "":
		if len(c.KeySHA256) != 2*sha256.Size {
			return hash, ".key_sha256", errors.New("must be 64 hex characters")
		}
		// The decode error would quote the offending character; drop it.
		if _, err := hex.Decode(hash[:], []byte(c.KeySHA256)); err != nil {
			return hash, ".key_sha256", errors.New("must be 64 hex characters")
		}
		if hash == emptyKeyHash {
			return hash, ".key_sha256", errors.New("is the hash of an empty key, which never matches")
		}
		return hash, ".key_sha256", nil
	default:
		v := strings.TrimSpace(getenv(c.KeyEnv))
		if v == "" {
			return hash, ".key_env", fmt.Errorf("environment variable %s is empty or unset", c.KeyEnv)
		}
		return sha256.Sum256([]byte(v)), ".key_env", nil
	}
}
