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
