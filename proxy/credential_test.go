package proxy

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota"
)

// selectorUpstream answers with the OpenAI-Organization and
// OpenAI-Project headers it received (every value of each).
func selectorUpstream() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string][]string{
			"organization": r.Header.Values("OpenAI-Organization"),
			"project":      r.Header.Values("OpenAI-Project"),
		})
	})
}

// TestCredentialReplacementDropsAccountSelectors: OpenAI-Organization and
// OpenAI-Project choose which of a key's organizations and projects a
// request is charged to and limited under. When the proxy puts its own
// provider key on a request, a caller's selectors would choose among the
// proxy key's organizations and projects (issue 21, item 8): they are
// dropped, in any spelling. With the caller's own key passing through,
// they are the caller's to choose and pass untouched.
func TestCredentialReplacementDropsAccountSelectors(t *testing.T) {
	selectors := map[string]string{"OpenAI-Organization": "org-other", "openai-project": "proj_other"}
	for _, tt := range []struct {
		name   string
		apiKey string
		want   map[string][]string
	}{
		{"provider key", "sk-upstream", map[string][]string{"organization": nil, "project": nil}},
		{"pass-through", "", map[string][]string{"organization": {"org-other"}, "project": {"proj_other"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := newTestProxy(t, proxyOpts{upstream: selectorUpstream(), mutate: func(c *Config, _ *quota.Config, _ *classify.Config, _ *[]classify.Caller) {
				c.Upstream.APIKey = tt.apiKey
				c.Upstream.KeyForUnknownCallers = tt.apiKey != ""
			}})
			for _, path := range []string{"/v1/chat/completions", "/v1/responses"} {
				req := newRequest(t, http.MethodPost, p.URL+path, `{"model":"gpt-4o-mini"}`)
				req.Header.Set("Authorization", "Bearer sk-caller")
				for k, v := range selectors {
					req.Header[k] = []string{v} // as sent, not canonicalised
				}
				status, _, raw := do(t, req)
				var got map[string][]string
				if err := json.Unmarshal(raw, &got); err != nil || status != http.StatusOK {
					t.Fatalf("%s: %d %s: %v", path, status, raw, err)
				}
				for k, want := range tt.want {
					if len(got[k]) != len(want) || (len(want) > 0 && got[k][0] != want[0]) {
						t.Errorf("%s: the upstream saw %s %q, want %q", path, k, got[k], want)
					}
				}
			}
		})
	}
}
