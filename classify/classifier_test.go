package classify

import (
	"errors"
	"net/http"
	"slices"
	"testing"
)

func TestClassify(t *testing.T) {
	const cls = "X-Meterproxy-Class"
	bearer := func(key string) string { return "Bearer " + key }
	tests := []struct {
		name   string
		reject bool
		h      http.Header
		path   string
		want   Result
		err    error
	}{
		// Identity, by each credential header.
		{name: "known by bearer", h: header("Authorization", bearer(chatKey)), path: "/v1/chat/completions",
			want: Result{Caller: "chat-frontend", Known: true, Class: Interactive}},
		{name: "bearer scheme case-insensitive", h: header("Authorization", "bEARer  "+chatKey+" "), path: "/v1/chat/completions",
			want: Result{Caller: "chat-frontend", Known: true, Class: Interactive}},
		{name: "known by api-key", h: header("api-key", chatKey), path: "/openai/deployments/x/chat/completions",
			want: Result{Caller: "chat-frontend", Known: true, Class: Interactive}},
		{name: "known by x-api-key", h: header("x-api-key", chatKey), path: "/v1/messages",
			want: Result{Caller: "chat-frontend", Known: true, Class: Interactive}},
		{name: "known by key_env (value trimmed)", h: header("Authorization", bearer(importKey)), path: "/v1/embeddings",
			want: Result{Caller: "nightly-import", Known: true, Class: Bulk}},
		{name: "unknown key", h: header("Authorization", bearer(strangeKey)), path: "/v1/models",
			want: Result{Caller: UnknownCaller, Class: Bulk}},
		{name: "no key", h: header(), path: "/v1/models",
			want: Result{Caller: UnknownCaller, Class: Bulk}},
		{name: "key is case-sensitive", h: header("Authorization", bearer("SK-CHAT-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ")), path: "/",
			want: Result{Caller: UnknownCaller, Class: Bulk}},
		{name: "authorization wins over x-api-key", h: header("Authorization", bearer(importKey), "X-Api-Key", chatKey), path: "/",
			want: Result{Caller: "nightly-import", Known: true, Class: Bulk}},

		// (1) header bulk downgrades anyone.
		{name: "bulk header downgrades interactive caller", h: header("Authorization", bearer(chatKey), cls, "bulk"), path: "/",
			want: Result{Caller: "chat-frontend", Known: true, Class: Bulk}},
		{name: "bulk header case and space", h: header("Authorization", bearer(chatKey), "x-meterproxy-class", "  BuLK "), path: "/",
			want: Result{Caller: "chat-frontend", Known: true, Class: Bulk}},
		{name: "bulk header for unknown caller", h: header(cls, "bulk"), path: "/",
			want: Result{Caller: UnknownCaller, Class: Bulk}},

		// (2) header interactive: allowed or denied.
		{name: "claim allowed", h: header("Authorization", bearer(adminKey), cls, "interactive"), path: "/v1/batches",
			want: Result{Caller: "admin-tool", Known: true, Class: Interactive}},
		{name: "claim allowed, case-insensitive", h: header("X-Api-Key", adminKey, cls, " Interactive"), path: "/",
			want: Result{Caller: "admin-tool", Known: true, Class: Interactive}},
		{name: "claim denied to known caller", h: header("Authorization", bearer(importKey), cls, "interactive"), path: "/",
			want: Result{Caller: "nightly-import", Known: true, Class: Bulk, ClaimDenied: true}},
		{name: "claim denied to interactive caller keeps its class", h: header("Authorization", bearer(chatKey), cls, "interactive"), path: "/",
			want: Result{Caller: "chat-frontend", Known: true, Class: Interactive, ClaimDenied: true}},
		{name: "claim denied to unknown caller", h: header(cls, "interactive"), path: "/v1/models",
			want: Result{Caller: UnknownCaller, Class: Bulk, ClaimDenied: true}},
		{name: "other header value ignored", h: header("Authorization", bearer(chatKey), cls, "urgent"), path: "/",
			want: Result{Caller: "chat-frontend", Known: true, Class: Interactive}},

		// (3) a known caller's class beats path rules.
		{name: "known caller beats path rule", h: header("Authorization", bearer(chatKey)), path: "/v1/batches",
			want: Result{Caller: "chat-frontend", Known: true, Class: Interactive}},

		// (4) path rules, (5) default.
		{name: "path rule", h: header(), path: "/v1/chat/x",
			want: Result{Caller: UnknownCaller, Class: Interactive}},
		{name: "first path rule wins", h: header(), path: "/v1/chat/completions",
			want: Result{Caller: UnknownCaller, Class: Interactive}},
		{name: "later path rule", h: header(), path: "/v1/batches/b1",
			want: Result{Caller: UnknownCaller, Class: Bulk}},
		{name: "default class", h: header(), path: "/v1/models",
			want: Result{Caller: UnknownCaller, Class: Bulk}},
		{name: "bulk header beats path rule", h: header(cls, "bulk"), path: "/v1/chat/completions",
			want: Result{Caller: UnknownCaller, Class: Bulk}},

		// unknown_callers: reject.
		{name: "reject unknown", reject: true, h: header("Authorization", bearer(strangeKey)), path: "/v1/chat/x",
			want: Result{Caller: UnknownCaller, Class: Interactive}, err: ErrUnknownCaller},
		{name: "reject no key", reject: true, h: header(cls, "bulk"), path: "/",
			want: Result{Caller: UnknownCaller, Class: Bulk}, err: ErrUnknownCaller},
		{name: "reject passes known", reject: true, h: header("Authorization", bearer(chatKey)), path: "/",
			want: Result{Caller: "chat-frontend", Known: true, Class: Interactive}},
	}
	forward := newTestClassifier(t, testPaths)
	reject := newTestClassifier(t, func(c *Config) { testPaths(c); c.UnknownCallers = UnknownReject })
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := forward
			if tt.reject {
				c = reject
			}
			got, err := c.Classify(tt.h, tt.path)
			if !errors.Is(err, tt.err) || (tt.err == nil && err != nil) {
				t.Errorf("Classify() error = %v, want %v", err, tt.err)
			}
			_, _, hasKey := Credential(tt.h)
			if anon := got.Anonymous != 0; anon != (hasKey && !got.Known) {
				t.Errorf("Classify().Anonymous = %d; want it set exactly for an unknown caller with a credential", got.Anonymous)
			}
			got.Anonymous = 0
			if got != tt.want {
				t.Errorf("Classify() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// testPaths sets path rules with an interactive rule before a bulk one and
// the default class to bulk.
func testPaths(c *Config) {
	c.DefaultClass = Bulk
	c.Paths = []PathRule{
		{Prefix: "/v1/chat/", Class: Interactive},
		{Prefix: "/v1/batches", Class: Bulk},
	}
}

// TestAnonymousCallersApart: unknown callers are told apart by their
// credential, whichever header carries it, and the same key is the same
// caller.
func TestAnonymousCallersApart(t *testing.T) {
	c := newTestClassifier(t, nil)
	id := func(h http.Header) uint64 {
		t.Helper()
		res, err := c.Classify(h, "/v1/chat/completions")
		if err != nil || res.Known {
			t.Fatalf("Classify() = %+v, %v; want an unknown caller", res, err)
		}
		return res.Anonymous
	}
	a, b := id(header("Authorization", "Bearer "+strangeKey)), id(header("Authorization", "Bearer "+strangeKey+"2"))
	if a == 0 || b == 0 || a == b {
		t.Errorf("two unknown keys: Anonymous %d and %d; want two different non-zero values", a, b)
	}
	if again := id(header("X-Api-Key", strangeKey)); again != a {
		t.Errorf("the same key in x-api-key: Anonymous %d; want %d as by bearer", again, a)
	}
}

func TestClassifyDefaultInteractive(t *testing.T) {
	c := newTestClassifier(t, func(c *Config) { c.DefaultClass = Interactive })
	got, err := c.Classify(header(), "/v1/models")
	if err != nil || got.Class != Interactive {
		t.Errorf("Classify() = %+v, %v; want Interactive by default", got, err)
	}
	got, _ = c.Classify(header(), "/v1/batches")
	if got.Class != Bulk {
		t.Errorf("Classify(/v1/batches) = %+v; want the default path rule's Bulk", got)
	}
}

func TestClassifyCustomHeader(t *testing.T) {
	c := newTestClassifier(t, func(c *Config) { c.Header = "x-priority" })
	got, _ := c.Classify(header("Authorization", "Bearer "+adminKey, "X-Priority", "interactive"), "/")
	if got.Class != Interactive {
		t.Errorf("Classify() = %+v; want the custom header honoured", got)
	}
	got, _ = c.Classify(header("Authorization", "Bearer "+adminKey, "X-Meterproxy-Class", "interactive"), "/")
	if got.Class != Bulk || got.ClaimDenied {
		t.Errorf("Classify() = %+v; want the default header name ignored", got)
	}
}

func TestNewCopiesConfig(t *testing.T) {
	cfg := DefaultConfig()
	c, err := New(cfg, testCallers(), testEnv)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Paths[0].Class = Interactive
	if got, _ := c.Classify(header(), "/v1/batches"); got.Class != Bulk {
		t.Errorf("mutating cfg.Paths after New changed classification: %+v", got)
	}
}

func TestCallers(t *testing.T) {
	c := newTestClassifier(t, nil)
	want := []string{"chat-frontend", "nightly-import", "admin-tool"}
	got := c.Callers()
	if !slices.Equal(got, want) {
		t.Fatalf("Callers() = %q, want %q", got, want)
	}
	got[0] = "changed"
	if c.Callers()[0] != "chat-frontend" {
		t.Error("Callers() returned the Classifier's own slice")
	}
	empty, err := New(DefaultConfig(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(empty.Callers()); n != 0 {
		t.Errorf("Callers() with no callers has %d names", n)
	}
}

func TestClassifyConcurrent(t *testing.T) {
	c := newTestClassifier(t, nil)
	h := header("Authorization", "Bearer "+chatKey)
	done := make(chan struct{})
	for range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 1000 {
				if r, _ := c.Classify(h, "/v1/chat/completions"); r.Caller != "chat-frontend" {
					t.Errorf("Classify() = %+v", r)
					return
				}
			}
		}()
	}
	for range 8 {
		<-done
	}
}

func BenchmarkClassify(b *testing.B) {
	c := newTestClassifier(b, nil)
	cases := []struct {
		name string
		h    http.Header
		path string
	}{
		{"known", header("Authorization", "Bearer "+chatKey), "/v1/chat/completions"},
		{"known_claim", header("X-Api-Key", adminKey, "X-Meterproxy-Class", "interactive"), "/v1/messages"},
		{"unknown", header("Authorization", "Bearer "+strangeKey), "/v1/batches"},
		{"no_key", header(), "/v1/models"},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Classify(bc.h, bc.path); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
