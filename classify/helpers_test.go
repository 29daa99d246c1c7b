package classify

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"
)

// Test keys. They are long enough to be recognisable in an error string.
const (
	chatKey    = "sk-chat-0123456789abcdefghijklmnopqrstuvwxyz"
	importKey  = "sk-import-0123456789abcdefghijklmnopqrstuvwxyz"
	adminKey   = "sk-admin-0123456789abcdefghijklmnopqrstuvwxyz"
	strangeKey = "sk-stranger-0123456789abcdefghijklmnopqrstuvwxyz"
)

// hashOf returns the lower-case hex SHA-256 of key, as key_sha256 holds it.
func hashOf(key string) string {
	s := sha256.Sum256([]byte(key))
	return hex.EncodeToString(s[:])
}

// env returns a getenv over m.
func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// testCallers is the callers list most tests use: one by hash (upper case,
// to pin case-insensitivity), one by environment, one allowed to claim.
func testCallers() []Caller {
	return []Caller{
		{Name: "chat-frontend", KeySHA256: strings.ToUpper(hashOf(chatKey)), Class: Interactive},
		{Name: "nightly-import", KeyEnv: "IMPORT_KEY", Class: Bulk},
		{Name: "admin-tool", KeySHA256: hashOf(adminKey), Class: Bulk, MayClaimInteractive: true},
	}
}

var testEnv = env(map[string]string{"IMPORT_KEY": " " + importKey + "\n"})

// newTestClassifier builds a Classifier from DefaultConfig, adjusted by mod.
func newTestClassifier(tb testing.TB, mod func(*Config)) *Classifier {
	tb.Helper()
	cfg := DefaultConfig()
	if mod != nil {
		mod(&cfg)
	}
	c, err := New(cfg, testCallers(), testEnv)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	return c
}

// header builds an http.Header from name/value pairs, canonicalising names
// as net/http does for incoming requests.
func header(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// assertNoSecrets fails if s contains any key, hash, or a sizeable piece of one.
func assertNoSecrets(t *testing.T, s string) {
	t.Helper()
	for _, key := range []string{chatKey, importKey, adminKey, strangeKey} {
		for _, secret := range []string{key, hashOf(key), strings.ToUpper(hashOf(key))} {
			for _, part := range []string{secret, secret[:16], secret[len(secret)-16:]} {
				if strings.Contains(s, part) {
					t.Errorf("error text contains secret material %q:\n%s", part, s)
				}
			}
		}
	}
}
