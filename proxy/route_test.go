package proxy

import (
	"errors"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/meterproxy/meterproxy/proxy/usage"
	"github.com/meterproxy/meterproxy/quota"
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
		// Path parameters: a hop that strips ";x" (a Java server, a
		// CDN) would serve chat completions the proxy took for another API.
		{"/v1/chat/completions;x", false, 0, 0, false},
		{"/v1/chat;v=1/completions", false, 0, 0, false},
		{"/v1/chat/completions%3Bx", false, 0, 0, false},
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
		if tt.ok && (rt.api != tt.api || rt.kind != tt.kind || (rt.family == familyAnthropic) != tt.anthropic) {
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
// Azure deployment from the path (matched as Azure compares it,
// case-insensitively), else the body's top-level model field.
func TestModelOf(t *testing.T) {
	tests := []struct {
		path, body, want string
		deployment       bool
	}{
		{"/v1/chat/completions", `{"model":"gpt-4o","messages":[]}`, "gpt-4o", false},
		{"/v1/responses", `{"model":"gpt-4.1","input":"hi"}`, "gpt-4.1", false},
		{"/v1/embeddings", `{"model":"text-embedding-3-small","input":"hi"}`, "text-embedding-3-small", false},
		{"/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":10}`, "claude-sonnet-4-5", false},
		{"/openai/deployments/chat-prod/chat/completions", `{"messages":[]}`, "chat-prod", true},
		{"/openai/deployments/Chat-Prod/chat/completions", `{"messages":[]}`, "Chat-Prod", true},
		{"/openai/deployments/chat-prod/chat/completions", `{"model":"ignored","messages":[]}`, "chat-prod", true},
		{"/openai/v1/chat/completions", `{"model":"my-deployment","messages":[]}`, "my-deployment", false},
		{"/v1/models", ``, "", false},
		{"/v1/chat/completions", `{"model":7}`, "", false},
		{"/v1/chat/completions", `{not json`, "", false},
		{"/v1beta/models/gemini-2.5-flash:generateContent", `{"model":"ignored","contents":[]}`, "gemini-2.5-flash", false},
		{"/v1/models/gemini-2.5-pro:streamGenerateContent?alt=sse", `{"contents":[]}`, "gemini-2.5-pro", false},
		{"/v1beta/openai/chat/completions", `{"model":"gemini-2.0-flash","messages":[]}`, "gemini-2.0-flash", false},
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
		req, err := usage.ReadRequest("application/json", []byte(tt.body))
		if err != nil {
			t.Fatalf("%s: %v", tt.body, err)
		}
		if got, want := modelOf(rt, req), (quota.Model{Name: tt.want, Deployment: tt.deployment}); got != want {
			t.Errorf("%s %s: model %+v, want %+v", tt.path, tt.body, got, want)
		}
	}
}

// TestAzureDeploymentSpellings: a deployment segment Azure could read as
// another name than the pool's — a trailing dot, ";params",
// percent-encoding of any byte — is refused as a non-canonical path.
func TestAzureDeploymentSpellings(t *testing.T) {
	for _, tt := range []struct {
		target string
		ok     bool
	}{
		{"/openai/deployments/gpt-4o_mini.v2/chat/completions", true},
		{"/openai/deployments/GPT-4O/embeddings", true},
		{"/openai/deployments/gpt-4o/", true},
		{"/openai/deployments/gpt-4o./chat/completions", false},
		{"/openai/deployments/gpt-4o%2E/chat/completions", false},
		{"/openai/deployments/gpt-4o%2e/chat/completions", false},
		{"/openai/deployments/gpt%2D4o/chat/completions", false},
		{"/openai/deployments/gpt-4o;v=1/chat/completions", false},
		{"/openai/deployments/gpt-4o%3Bv=1/chat/completions", false},
		{"/openai/deployments/gpt-4o%20/chat/completions", false},
		{"/openai/deployments/gpt~4o/chat/completions", false},
		{"/openai/deploym%65nts/gpt-4o/chat/completions", false},
		{"/openai/deployments/gpt-4o", true},
	} {
		u, err := url.ParseRequestURI(tt.target)
		if err != nil {
			t.Fatal(err)
		}
		rt, err := routeOf(u)
		if ok := err == nil; ok != tt.ok {
			t.Errorf("%s: accepted %v, want %v (%v)", tt.target, ok, tt.ok, err)
		}
		if !tt.ok && !errors.Is(err, errNonCanonicalPath) {
			t.Errorf("%s: %v, want a non-canonical path", tt.target, err)
		}
		if tt.ok && rt.deployment == "" {
			t.Errorf("%s: no deployment", tt.target)
		}
	}
}

// FuzzModelOf: any path and body resolve to a model without panicking,
// never to more than the 512 bytes a pool could match, and a deployment
// only when it is one Azure reads as the proxy does.
func FuzzModelOf(f *testing.F) {
	f.Add("/v1/chat/completions", []byte(`{"model":"gpt-4o"}`))
	f.Add("/openai/deployments/d/chat/completions", []byte(`{}`))
	f.Add("/openai/deployments/d%2E/chat/completions", []byte(`{}`))
	f.Add("/v1/messages", []byte(`{"model":"claude","messages":[[[[[`))
	f.Add("/v1beta/models/gemini-2.5-flash:generateContent", []byte(`{}`))
	f.Add("/v1beta/models/a%3Ab:generateContent", []byte(`{}`))
	f.Fuzz(func(t *testing.T, path string, body []byte) {
		u, err := url.ParseRequestURI(path)
		if err != nil {
			return
		}
		rt, err := routeOf(u)
		if err != nil {
			return
		}
		req, err := usage.ReadRequest("application/json", body)
		if err != nil {
			return
		}
		m := modelOf(rt, req)
		if len(m.Name) > 512 && !m.Deployment {
			t.Fatalf("model of %d bytes from the body", len(m.Name))
		}
		if m.Deployment && (!usage.ValidDeployment(m.Name) || !under(u.EscapedPath(), "/openai/deployments/"+m.Name)) {
			t.Fatalf("deployment %q from %q", m.Name, path)
		}
		if rt.model != "" && (!usage.ValidDeployment(rt.model) || !strings.Contains(u.EscapedPath(), "/models/"+rt.model+":") || m.Name != rt.model) {
			t.Fatalf("Gemini model %q from %q", rt.model, path)
		}
	})
}

// TestGenerates: which requests may cost money (pathTable's rule), and
// which of those are on an API meterproxy cannot price. A write (POST,
// PUT, PATCH) generates on any path whose row is not free, a path no row
// names included; a read or a delete never does. Before, a request
// generated when its body or path named a model, so a Responses request
// with a stored prompt and no model passed budgets free, and a token
// count that named its model reserved like a generation.
func TestGenerates(t *testing.T) {
	const gen, unmetered, free = 1, 2, 0
	for _, tt := range []struct {
		method, path string
		want         int
	}{
		{"POST", "/v1/chat/completions", gen},
		{"POST", "/v1/completions", gen},
		{"POST", "/v1/responses", gen},
		{"POST", "/v1/embeddings", gen},
		{"POST", "/v1/messages", gen},
		{"POST", "/openai/v1/chat/completions", gen},
		{"POST", "/openai/v1/responses", gen},
		{"POST", "/openai/v1/embeddings", gen},
		{"POST", "/openai/responses", gen},
		{"POST", "/openai/deployments/gpt-4o/completions", gen},
		// Writes the providers charge that meterproxy cannot price.
		{"POST", "/v1/images/generations", unmetered},
		{"POST", "/v1/images/edits", unmetered},
		{"POST", "/v1/audio/speech", unmetered},
		{"POST", "/v1/audio/transcriptions", unmetered},
		{"POST", "/v1/responses/compact", unmetered},
		{"POST", "/v1/realtime/client_secrets", unmetered},
		{"POST", "/v1/threads/thread_1/runs", unmetered},
		{"POST", "/v1/fine_tuning/jobs", unmetered},
		{"POST", "/v1/complete", unmetered},
		{"POST", "/v1/messages/other", unmetered},
		{"POST", "/openai/deployments/dall-e-3/images/generations", unmetered},
		{"POST", "/openai/v1/images/generations", unmetered},
		{"PUT", "/v1/anything", unmetered},
		{"PATCH", "/v1/anything", unmetered},
		// Free writes.
		{"POST", "/v1/messages/count_tokens", free},
		{"POST", "/v1/responses/input_tokens", free},
		{"POST", "/v1/responses/resp_1/cancel", free},
		{"POST", "/openai/v1/responses/resp_1/cancel", free},
		{"POST", "/openai/responses/resp_1/cancel", free},
		{"POST", "/v1/chat/completions/chatcmpl-1", free},
		{"POST", "/v1/moderations", free},
		{"POST", "/v1/conversations", free},
		{"POST", "/v1/conversations/conv_1/items", free},
		{"POST", "/openai/files", free},
		{"POST", "/openai/v1/files", free},
		// Reads and deletes.
		{"GET", "/v1/models", free},
		{"GET", "/v1/responses/resp_1", free},
		{"GET", "/v1/responses/resp_1/input_items", free},
		{"DELETE", "/v1/responses/resp_1", free},
		{"GET", "/openai/deployments/gpt-4o", free},
		{"GET", "/v1/chat/completions", free},
		{"HEAD", "/v1/images/generations", free},
		{"OPTIONS", "/v1/chat/completions", free},
	} {
		r := httptest.NewRequest(tt.method, tt.path, nil)
		rt, bad := inspect(r)
		if bad != nil {
			t.Fatalf("%s %s refused: %+v", tt.method, tt.path, bad)
		}
		got := free
		switch {
		case rt.unmetered():
			got = unmetered
		case rt.generates:
			got = gen
		}
		if got != tt.want {
			t.Errorf("%s %s: %d, want %d (0 free, 1 generates, 2 generates unmetered)", tt.method, tt.path, got, tt.want)
		}
	}
}
