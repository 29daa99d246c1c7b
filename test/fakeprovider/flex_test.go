package fakeprovider_test

import (
	"net/http"
	"testing"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
)

// TestFlexUnavailable: with a share of flex requests unavailable, exactly
// that share of the flex requests (chat completions and Responses, OpenAI
// and Azure) is answered 429 in OpenAI's error shape with code
// resource_unavailable, counted in Stats.FlexUnavailable and not in
// RateLimited; requests at other tiers, and Anthropic's, are served.
func TestFlexUnavailable(t *testing.T) {
	const flexChat = `{"model":"gpt-4o","service_tier":"flex","messages":[{"role":"user","content":"hi"}]}`
	tests := []struct {
		name       string
		share      float64
		path, body string
		refused    int // of 4
		wantTierOK string
	}{
		{"all refused", 1, "/v1/chat/completions", flexChat, 4, ""},
		{"none refused", 0, "/v1/chat/completions", flexChat, 0, "flex"},
		{"every second", 0.5, "/v1/chat/completions", flexChat, 2, "flex"},
		{"responses", 1, "/v1/responses", `{"model":"gpt-4o","service_tier":"flex","input":"hi"}`, 4, ""},
		{"azure", 1, "/openai/deployments/gpt-4o/chat/completions", flexChat, 4, ""},
		{"the default tier is served", 1, "/v1/chat/completions", `{"model":"gpt-4o","messages":[]}`, 0, "default"},
		{"priority is served", 1, "/v1/chat/completions", `{"model":"gpt-4o","service_tier":"priority","messages":[]}`, 0, "priority"},
		{"anthropic is served", 1, "/v1/messages", `{"model":"claude","service_tier":"flex","max_tokens":5,"messages":[]}`, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, srv := newServer(t, fakeprovider.Config{})
			p.SetFlexUnavailable(tt.share)
			refused := 0
			for range 4 {
				status, _, b := post(t, srv, tt.path, tt.body)
				switch status {
				case http.StatusTooManyRequests:
					refused++
					e := decode[struct {
						Error struct{ Message, Type, Code string }
					}](t, b)
					if e.Error.Code != "resource_unavailable" || e.Error.Type != "resource_unavailable" || e.Error.Message == "" {
						t.Errorf("429 body %s: want code and type resource_unavailable and a message", b)
					}
				case http.StatusOK:
					if tt.wantTierOK != "" {
						if got := decode[struct {
							ServiceTier string `json:"service_tier"`
						}](t, b).ServiceTier; got != tt.wantTierOK {
							t.Errorf("served at %q, want %q", got, tt.wantTierOK)
						}
					}
				default:
					t.Fatalf("status %d: %s", status, b)
				}
			}
			if refused != tt.refused {
				t.Errorf("refused %d of 4, want %d", refused, tt.refused)
			}
			st := p.Stats()
			if st.FlexUnavailable != tt.refused || st.RateLimited != 0 || st.Served != 4-tt.refused {
				t.Errorf("Stats: FlexUnavailable %d, RateLimited %d, Served %d; want %d, 0, %d",
					st.FlexUnavailable, st.RateLimited, st.Served, tt.refused, 4-tt.refused)
			}
		})
	}
}

// TestFlexUnavailableValidate: the share is a fraction.
func TestFlexUnavailableValidate(t *testing.T) {
	for _, share := range []float64{-0.1, 1.5} {
		if err := (fakeprovider.Config{FlexUnavailable: share}).Validate(); err == nil {
			t.Errorf("Validate(FlexUnavailable %v) passed", share)
		}
	}
	if err := (fakeprovider.Config{FlexUnavailable: 0.25}).Validate(); err != nil {
		t.Errorf("Validate(FlexUnavailable 0.25): %v", err)
	}
}
