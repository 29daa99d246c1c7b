package proxy

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/proxy/usage"
	"github.com/meterproxy/meterproxy/quota"
)

// TestProviderTable: every row of the path table, and paths near them,
// resolve to the API, admission kind, deployment, error shape and
// credential header of their path family, under every upstream.provider;
// the dialect (charging and refill) is the named provider's, else the
// family's own, else the host's. Before the table, provider: anthropic
// with /v1/chat/completions already charged as Anthropic and answered in
// OpenAI's shape with Authorization (route.anthropic and dialectAnthropic
// disagreed in name only); the one change is Azure's credential header.
func TestProviderTable(t *testing.T) {
	const (
		A, B, M    = routeMetered, routeBatch, routeUpload
		oa, az, an = familyOpenAI, familyAzure, familyAnthropic
		gc, gn     = familyGeminiOpenAI, familyGemini
	)
	paths := []struct {
		path       string
		api        usage.API
		kind       routeKind
		family     family
		deployment string
	}{
		{"/v1/chat/completions", usage.ChatCompletions, A, oa, ""},
		{"/v1/chat/completions/", usage.ChatCompletions, A, oa, ""},
		{"/v1/chat/completions/x", usage.Other, A, oa, ""},
		{"/v1/completions", usage.Completions, A, oa, ""},
		{"/v1/responses", usage.Responses, A, oa, ""},
		{"/v1/responses/resp_123", usage.Other, A, oa, ""},
		{"/v1/responses/input_tokens", usage.Other, A, oa, ""},
		{"/v1/responses/resp_123/cancel", usage.Other, A, oa, ""},
		{"/v1/embeddings", usage.Embeddings, A, oa, ""},
		{"/v1/moderations", usage.Other, A, oa, ""},
		{"/v1/realtime", usage.Realtime, A, oa, ""},
		{"/v1/realtime/calls", usage.Other, A, oa, ""},
		{"/v1/realtime/client_secrets", usage.Other, A, oa, ""},
		{"/v1/conversations/conv_1/items", usage.Other, A, oa, ""},
		{"/v1/images/generations", usage.Other, A, oa, ""},
		{"/v1/models", usage.Other, A, oa, ""},
		{"/chat/completions", usage.Other, A, oa, ""},
		{"/", usage.Other, A, oa, ""},
		{"/v1/batches", usage.Other, B, oa, ""},
		{"/v1/batches/batch_1/cancel", usage.Other, B, oa, ""},
		{"/v1/batchesx", usage.Other, A, oa, ""},
		{"/v1/files", usage.Other, M, oa, ""},
		{"/v1/files/file-1/content", usage.Other, M, oa, ""},
		{"/v1/uploads/upload_1/parts", usage.Other, M, oa, ""},
		{"/v1/messages", usage.Messages, A, an, ""},
		{"/v1/messages/batches", usage.Other, B, an, ""},
		{"/v1/messages/batches/msgbatch_1/results", usage.Other, B, an, ""},
		{"/v1/messages/count_tokens", usage.Other, A, an, ""},
		{"/v1/messages/other", usage.Other, A, an, ""},
		{"/v1/messagesx", usage.Other, A, oa, ""},
		{"/v1/complete", usage.Other, A, an, ""},
		{"/v1/completex", usage.Other, A, oa, ""},
		{"/openai/deployments/gpt-4o/chat/completions", usage.ChatCompletions, A, az, "gpt-4o"},
		{"/openai/deployments/GPT-4o/chat/completions", usage.ChatCompletions, A, az, "GPT-4o"},
		{"/openai/deployments/my.deploy-1/chat/completions", usage.ChatCompletions, A, az, "my.deploy-1"},
		{"/openai/deployments/ada/embeddings", usage.Embeddings, A, az, "ada"},
		{"/openai/deployments/gpt-4o/completions", usage.Completions, A, az, "gpt-4o"},
		{"/openai/deployments/dall-e-3/images/generations", usage.Other, A, az, "dall-e-3"},
		{"/openai/deployments/a/b/chat/completions", usage.Other, A, az, "a"},
		{"/openai/deployments/gpt-4o", usage.Other, A, az, "gpt-4o"},
		{"/openai/deployments", usage.Other, A, az, ""},
		{"/openai/v1/chat/completions", usage.ChatCompletions, A, az, ""},
		{"/openai/v1/completions", usage.Completions, A, az, ""},
		{"/openai/v1/responses", usage.Responses, A, az, ""},
		{"/openai/v1/responses/resp_1/cancel", usage.Other, A, az, ""},
		{"/openai/v1/embeddings", usage.Embeddings, A, az, ""},
		{"/openai/v1/files", usage.Other, A, az, ""},
		{"/openai/v1/realtime", usage.Realtime, A, az, ""},
		{"/openai/realtime", usage.Realtime, A, az, ""},
		{"/openai/realtime/x", usage.Other, A, az, ""},
		{"/openai/v1/models", usage.Other, A, az, ""},
		{"/openai/responses", usage.Responses, A, az, ""},
		{"/openai/responses/resp_1/cancel", usage.Other, A, az, ""},
		{"/openai/files/file-1", usage.Other, A, az, ""},
		{"/openai", usage.Other, A, az, ""},
		{"/openaix/v1/chat/completions", usage.Other, A, oa, ""},
		{"/v1beta/openai/chat/completions", usage.ChatCompletions, A, gc, ""},
		{"/v1beta/openai/chat/completions/", usage.ChatCompletions, A, gc, ""},
		{"/v1beta/openai/embeddings", usage.Embeddings, A, gc, ""},
		{"/v1beta/openai/models", usage.Other, A, gc, ""},
		{"/v1beta/openai/images/generations", usage.Other, A, gc, ""},
		{"/v1beta/openaix/chat/completions", usage.Other, A, gn, ""},
		{"/v1beta/models/gemini-2.5-flash:generateContent", usage.GenerateContent, A, gn, "gemini-2.5-flash"},
		{"/v1beta/models/gemini-2.5-flash:streamGenerateContent", usage.GenerateContent, A, gn, "gemini-2.5-flash"},
		{"/v1beta/models/gemini-2.0-flash:countTokens", usage.Other, A, gn, "gemini-2.0-flash"},
		{"/v1beta/models/gemini-embedding-001:embedContent", usage.EmbedContent, A, gn, "gemini-embedding-001"},
		{"/v1beta/models/gemini-embedding-001:batchEmbedContents", usage.EmbedContent, A, gn, "gemini-embedding-001"},
		{"/v1beta/models/gemini-2.5-flash:predict", usage.Other, A, gn, ""},
		{"/v1beta/models/:generateContent", usage.Other, A, gn, ""},
		{"/v1beta/models/gemini-2.5-flash", usage.Other, A, gn, ""},
		{"/v1beta/models", usage.Other, A, gn, ""},
		{"/v1beta/cachedContents", usage.Other, A, gn, ""},
		{"/v1beta", usage.Other, A, gn, ""},
		{"/v1/models/gemini-2.5-pro:generateContent", usage.GenerateContent, A, gn, "gemini-2.5-pro"},
		{"/v1/models/gemini-2.5-pro:streamGenerateContent", usage.GenerateContent, A, gn, "gemini-2.5-pro"},
		{"/v1/models/gemini-2.5-pro:countTokens", usage.Other, A, gn, "gemini-2.5-pro"},
		{"/v1/models/text-embedding-004:embedContent", usage.EmbedContent, A, gn, "text-embedding-004"},
		{"/v1/models/text-embedding-004:batchEmbedContents", usage.EmbedContent, A, gn, "text-embedding-004"},
		{"/v1/models/gpt-4o", usage.Other, A, oa, ""},
		{"/v1betax", usage.Other, A, oa, ""},
	}
	// dialects is the dialect of each family under each upstream.provider
	// (auto by upstream.url's host).
	dialects := []struct {
		provider Provider
		host     string
		want     [5]dialect // by family: OpenAI's, Azure's, Anthropic's, Gemini's OpenAI-compatible, Gemini's
	}{
		{ProviderAuto, "api.openai.com", [5]dialect{dialectOpenAI, dialectAzure, dialectAnthropic, dialectGemini, dialectGemini}},
		{ProviderAuto, "API.OpenAI.com:443", [5]dialect{dialectOpenAI, dialectAzure, dialectAnthropic, dialectGemini, dialectGemini}},
		{ProviderAuto, "my-resource.openai.azure.com", [5]dialect{dialectAzure, dialectAzure, dialectAnthropic, dialectGemini, dialectGemini}},
		{ProviderAuto, "api.anthropic.com", [5]dialect{dialectAnthropic, // its OpenAI-compatible endpoint, charged as Anthropic charges
			dialectAzure, dialectAnthropic, dialectGemini, dialectGemini}},
		{ProviderAuto, "generativelanguage.googleapis.com", [5]dialect{dialectGemini, dialectAzure, dialectAnthropic, dialectGemini, dialectGemini}},
		{ProviderAuto, "GenerativeLanguage.googleapis.com:443", [5]dialect{dialectGemini, dialectAzure, dialectAnthropic, dialectGemini, dialectGemini}},
		{ProviderAuto, "vllm:8000", [5]dialect{dialectCompatible, dialectAzure, dialectAnthropic, dialectGemini, dialectGemini}},
		{ProviderAuto, "api.openai.com.evil.example", [5]dialect{dialectCompatible, dialectAzure, dialectAnthropic, dialectGemini, dialectGemini}},
		{"openai", "gateway.internal", [5]dialect{dialectOpenAI, dialectOpenAI, dialectOpenAI, dialectOpenAI, dialectOpenAI}},
		{"azure", "gateway.internal", [5]dialect{dialectAzure, dialectAzure, dialectAzure, dialectAzure, dialectAzure}},
		{"anthropic", "gateway.internal", [5]dialect{dialectAnthropic, dialectAnthropic, dialectAnthropic, dialectAnthropic, dialectAnthropic}},
		{"openai-compatible", "api.openai.com", [5]dialect{dialectCompatible, dialectCompatible, dialectCompatible, dialectCompatible, dialectCompatible}},
		{"gemini", "gateway.internal", [5]dialect{dialectGemini, dialectGemini, dialectGemini, dialectGemini, dialectGemini}},
	}
	shapes := [5]errorShape{shapeOpenAI, shapeOpenAI, shapeAnthropic, shapeOpenAI, shapeGoogle}
	credentials := [5]string{"Authorization", "Api-Key", "X-Api-Key", "Authorization", "X-Goog-Api-Key"}
	for _, d := range dialects {
		up := newUpstreamProvider(d.provider, &url.URL{Scheme: "https", Host: d.host})
		for _, tt := range paths {
			rt, err := routeOf(&url.URL{Path: tt.path})
			if err != nil {
				t.Fatalf("%s: %v", tt.path, err)
			}
			ep := up.resolve(rt)
			got := []any{ep.rt.api, ep.rt.kind, ep.rt.family, ep.rt.deployment + ep.rt.model, ep.errorShape(), ep.credential(), ep.dialect}
			want := []any{tt.api, tt.kind, tt.family, tt.deployment, shapes[tt.family], credentials[tt.family], d.want[tt.family]}
			for i := range got {
				if got[i] != want[i] {
					t.Errorf("provider %s, host %s, %s: %v, want %v (api, kind, family, deployment, shape, credential, dialect)",
						d.provider, d.host, tt.path, got, want)
					break
				}
			}
			if familyOf(tt.path) != tt.family {
				t.Errorf("%s: familyOf %v, want %v", tt.path, familyOf(tt.path), tt.family)
			}
		}
	}
	for _, row := range pathTable { // every row is reached by a path above
		found := false
		for _, tt := range paths {
			if r, _, ok := lookup(trimSlash(tt.path)); ok && r == row {
				found = true
			}
		}
		if !found {
			t.Errorf("row %+v: no path of the test reaches it", row)
		}
	}
	var p Provider
	if err := p.UnmarshalText([]byte("bedrock")); err == nil {
		t.Error("upstream.provider: bedrock accepted")
	}
}

func trimSlash(p string) string {
	if len(p) > 1 && p[len(p)-1] == '/' {
		return p[:len(p)-1]
	}
	return p
}

// TestProviderCombinations: through the handler, for every
// upstream.provider and every path family, a caller without a key gets the
// provider key in the header its path's API reads, and a refusal comes in
// that API's error shape: the path says what the caller's SDK speaks,
// whoever serves it. Before the provider table, an Azure deployment path
// got Authorization: Bearer, which Azure's deployment API does not read a
// resource key from.
func TestProviderCombinations(t *testing.T) {
	families := []struct {
		path       string
		credential func(seen) string
		shape      errorShape
	}{
		{"/v1/chat/completions", func(s seen) string { return s.Authorization }, shapeOpenAI},
		{"/v1/responses", func(s seen) string { return s.Authorization }, shapeOpenAI},
		{"/v1/messages", func(s seen) string { return s.XAPIKey }, shapeAnthropic},
		{"/openai/deployments/gpt-4o/chat/completions", func(s seen) string { return s.APIKey }, shapeOpenAI},
		{"/openai/v1/chat/completions", func(s seen) string { return s.APIKey }, shapeOpenAI},
		{"/v1beta/openai/chat/completions", func(s seen) string { return s.Authorization }, shapeOpenAI},
		{"/v1beta/models/gemini-2.0-flash:generateContent", func(s seen) string { return s.XGoogAPIKey }, shapeGoogle},
	}
	for _, provider := range providers {
		t.Run(string(provider), func(t *testing.T) {
			p := newTestProxy(t, proxyOpts{upstream: echoUpstream(), mutate: func(c *Config, _ *quota.Config, _ *classify.Config, _ *[]classify.Caller) {
				c.Upstream.APIKey, c.Upstream.KeyForUnknownCallers, c.Upstream.Provider = "sk-upstream", true, provider
			}})
			for _, f := range families {
				status, _, raw := do(t, newRequest(t, http.MethodPost, p.URL+f.path, `{"model":"m"}`))
				var got seen
				if err := json.Unmarshal(raw, &got); err != nil || status != http.StatusOK {
					t.Fatalf("%s: %d %s: %v", f.path, status, raw, err)
				}
				want := "sk-upstream"
				if f.path == "/v1/chat/completions" || f.path == "/v1/responses" || f.path == "/v1beta/openai/chat/completions" {
					want = "Bearer sk-upstream"
				}
				if c := f.credential(got); c != want {
					t.Errorf("%s: the upstream saw %+v, want the key as %q in the path's own header", f.path, got, want)
				}
				status, _, raw = do(t, newRequest(t, http.MethodPost, p.URL+f.path, `{"model":"a","model":"b"}`))
				if status != http.StatusBadRequest {
					t.Fatalf("%s: a repeated key answered %d %s", f.path, status, raw)
				}
				switch f.shape {
				case shapeAnthropic:
					anthropicShape("invalid_request_error")(t, raw)
				case shapeGoogle:
					if e := googleErrorOf(t, raw); e.Error.Status != "INVALID_ARGUMENT" || e.Error.Code != http.StatusBadRequest || e.reason() != reasonDuplicateKey {
						t.Errorf("%s: %s, want Google's INVALID_ARGUMENT naming duplicate_key", f.path, raw)
					}
				default:
					openAIShape("invalid_request_error", reasonDuplicateKey)(t, raw)
				}
			}
		})
	}
}

// TestDoubledPrefix: an upstream URL whose path ends in the prefix every
// forwarded path begins with is named; a compatible server under a path
// of its own is not (Groq's base is https://api.groq.com/openai/v1: the
// proxy's upstream.url is https://api.groq.com/openai).
func TestDoubledPrefix(t *testing.T) {
	for _, tt := range []struct {
		url      string
		provider Provider
		want     string
	}{
		{"https://api.openai.com", ProviderAuto, ""},
		{"https://api.openai.com/v1", ProviderAuto, "/v1"},
		{"https://api.anthropic.com/v1/", "anthropic", "/v1"},
		{"http://vllm.local:8000/v1", "openai-compatible", "/v1"},
		{"https://api.groq.com/openai", ProviderAuto, ""},
		{"https://res.openai.azure.com/openai", ProviderAuto, "/openai"},
		{"https://gateway.internal/openai", "azure", "/openai"},
		{"https://gateway.internal/v1beta", ProviderAuto, ""},
		{"https://generativelanguage.googleapis.com", ProviderAuto, ""},
		{"https://generativelanguage.googleapis.com/v1beta", ProviderAuto, "/v1beta"},
		{"https://generativelanguage.googleapis.com/v1beta/openai/", ProviderAuto, "/v1beta/openai"},
		{"https://gateway.internal/v1beta/openai", "gemini", "/v1beta/openai"},
		{"https://gateway.internal/v1beta/", "gemini", "/v1beta"},
		{"https://gateway.internal/v1beta/openai", ProviderAuto, ""},
		{"https://generativelanguage.googleapis.com/openai", ProviderAuto, ""},
	} {
		u, err := url.Parse(tt.url)
		if err != nil {
			t.Fatal(err)
		}
		if got := doubledPrefix(u, tt.provider); got != tt.want {
			t.Errorf("doubledPrefix(%s, %s) = %q, want %q", tt.url, tt.provider, got, tt.want)
		}
	}
}
