package proxy

import (
	"net/url"
	"strings"
	"testing"

	"github.com/meterproxy/meterproxy/proxy/usage"
)

func TestRouteOf(t *testing.T) {
	tests := []struct {
		path      string
		ok        bool
		api       usage.API
		kind      routeKind
		anthropic bool
	}{
		{"/v1/chat/completions", true, usage.ChatCompletions, routeMetered, false},
		{"/v1/chat/completions/", true, usage.ChatCompletions, routeMetered, false},
		{"/v1/messages", true, usage.Messages, routeMetered, true},
		{"/v1/messages/count_tokens", true, usage.Other, routeMetered, true},
		{"/v1/messages/batches", true, usage.Other, routeBatch, true},
		{"/v1/messages/batches/msgbatch_1/results", true, usage.Other, routeBatch, true},
		{"/v1/batches", true, usage.Other, routeBatch, false},
		{"/v1/batches/batch_1/cancel", true, usage.Other, routeBatch, false},
		{"/v1/batchesx", true, usage.Other, routeMetered, false},
		{"/v1/files", true, usage.Other, routeUpload, false},
		{"/v1/files/file-1/content", true, usage.Other, routeUpload, false},
		{"/v1/uploads/upload_1/parts", true, usage.Other, routeUpload, false},
		{"/openai/deployments/gpt/chat/completions", true, usage.ChatCompletions, routeMetered, false},
		{"/", true, usage.Other, routeMetered, false},
		{"", false, 0, 0, false},
		{"*", false, 0, 0, false},
		{"/v1/batches/../chat/completions", false, 0, 0, false},
		{"/v1/./chat/completions", false, 0, 0, false},
		{"/v1/chat/completions/.", false, 0, 0, false},
		{"//v1/chat/completions", false, 0, 0, false},
		{"/v1//chat/completions", false, 0, 0, false},
		{"/v1/chat/completions//", false, 0, 0, false},
		{"/v1/batches%2F..%2Fchat/completions", false, 0, 0, false},
		{"/v1/batches%2f..%2fchat/completions", false, 0, 0, false},
		{"/v1/batches%5C..%5Cchat/completions", false, 0, 0, false},
		{"/v1/batches\\..\\chat/completions", false, 0, 0, false},
		{"/v1/%2e%2e/chat/completions", false, 0, 0, false},
	}
	for _, tt := range tests {
		u := &url.URL{Path: tt.path}
		if raw, err := url.ParseRequestURI(tt.path); err == nil {
			u = raw
		}
		rt, err := routeOf(u)
		if ok := err == nil; ok != tt.ok {
			t.Errorf("%q: canonical %v, want %v", tt.path, ok, tt.ok)
			continue
		}
		if tt.ok && (rt.api != tt.api || rt.kind != tt.kind || rt.anthropic != tt.anthropic) {
			t.Errorf("%q: %+v, want api %v kind %v anthropic %v", tt.path, rt, tt.api, tt.kind, tt.anthropic)
		}
	}
}

// FuzzRouteOf: any request target either is refused or resolves to a
// route from a path with no dot segment, no empty segment and no encoded
// or literal separator other than "/".
func FuzzRouteOf(f *testing.F) {
	for _, s := range []string{"/v1/chat/completions", "/v1/batches/../x", "//a", "/a%2Fb", "/v1/files/x/", "/%2e%2e/", "/a\\b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, target string) {
		u, err := url.ParseRequestURI(target)
		if err != nil {
			return
		}
		if _, err := routeOf(u); err != nil {
			return
		}
		p := strings.TrimSuffix(u.Path, "/")
		if strings.Contains(p, "//") || strings.Contains(u.Path, "\\") || hasEncodedSeparator(u.EscapedPath()) {
			t.Fatalf("%q accepted with path %q", target, u.Path)
		}
		for seg := range strings.SplitSeq(p, "/") {
			if seg == "." || seg == ".." {
				t.Fatalf("%q accepted with a dot segment", target)
			}
		}
	})
}

// TestModelOf: the model a request is for, which picks its pool — an
// Azure deployment from the path, else the body's top-level model field.
func TestModelOf(t *testing.T) {
	tests := []struct{ path, body, want string }{
		{"/v1/chat/completions", `{"model":"gpt-4o","messages":[]}`, "gpt-4o"},
		{"/v1/responses", `{"model":"gpt-4.1","input":"hi"}`, "gpt-4.1"},
		{"/v1/embeddings", `{"model":"text-embedding-3-small","input":"hi"}`, "text-embedding-3-small"},
		{"/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":10}`, "claude-sonnet-4-5"},
		{"/openai/deployments/chat-prod/chat/completions", `{"messages":[]}`, "chat-prod"},
		{"/openai/deployments/chat-prod/chat/completions", `{"model":"ignored","messages":[]}`, "chat-prod"},
		{"/openai/v1/chat/completions", `{"model":"my-deployment","messages":[]}`, "my-deployment"},
		{"/v1/models", ``, ""},
		{"/v1/chat/completions", `{"model":7}`, ""},
		{"/v1/chat/completions", `{not json`, ""},
	}
	for _, tt := range tests {
		u, err := url.ParseRequestURI(tt.path)
		if err != nil {
			t.Fatal(err)
		}
		rt, err := routeOf(u)
		if err != nil {
			t.Fatalf("%s: %v", tt.path, err)
		}
		if got := modelOf(rt, []byte(tt.body)); got != tt.want {
			t.Errorf("%s %s: model %q, want %q", tt.path, tt.body, got, tt.want)
		}
	}
}

// FuzzModelOf: any path and body resolve to a model without panicking,
// and never to more than the 512 bytes a pool could match.
func FuzzModelOf(f *testing.F) {
	f.Add("/v1/chat/completions", []byte(`{"model":"gpt-4o"}`))
	f.Add("/openai/deployments/d/chat/completions", []byte(`{}`))
	f.Add("/v1/messages", []byte(`{"model":"claude","messages":[[[[[`))
	f.Fuzz(func(t *testing.T, path string, body []byte) {
		u, err := url.ParseRequestURI(path)
		if err != nil {
			return
		}
		rt, err := routeOf(u)
		if err != nil {
			return
		}
		if m := modelOf(rt, body); len(m) > 512 && rt.deployment == "" {
			t.Fatalf("model of %d bytes from the body", len(m))
		}
	})
}
