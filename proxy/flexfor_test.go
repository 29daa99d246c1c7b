package proxy

import (
	"net/http"
	"testing"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/proxy/usage"
	"github.com/meterproxy/meterproxy/quota"
)

// TestFlexForAsksQuota: whether a request goes at flex has one owner,
// quota (Config.FlexFor, by class and model): for every request that can
// carry the tier the proxy answers exactly what quota does, and for the
// rest (a WebSocket turn, mode: shadow, Anthropic, another
// OpenAI-compatible server, an API without the tier) nothing, without
// asking. A WebSocket turn was once told apart in the handler, beside
// flexFor.
func TestFlexForAsksQuota(t *testing.T) {
	p := flexProxy(t, http.NotFoundHandler(), "openai", nil)
	h := p.handler
	carried := func() *exchange {
		ex := &exchange{live: h.live.Load(), res: classify.Result{Class: classify.Bulk}, ask: asked{model: quota.Model{Name: "gpt-4o"}}}
		ex.dialect, ex.rt.api = dialectOpenAI, usage.ChatCompletions
		return ex
	}
	for _, tt := range []struct {
		name   string
		change func(*exchange)
	}{
		{"openai chat, a flex model", func(*exchange) {}},
		{"azure responses", func(ex *exchange) { ex.dialect, ex.rt.api = dialectAzure, usage.Responses }},
		{"a model flex_models does not list", func(ex *exchange) { ex.ask.model = quota.Model{Name: "gpt-4.1"} }},
		{"interactive", func(ex *exchange) { ex.res.Class = classify.Interactive }},
		{"no model", func(ex *exchange) { ex.ask.model = quota.Model{} }},
	} {
		ex := carried()
		tt.change(ex)
		got, ok := h.metering.flexFor(ex)
		want, wantOK := p.admitter.FlexFor(ex.res.Class, func() quota.Model { return ex.ask.model })
		if got != want || ok != wantOK {
			t.Errorf("%s: the proxy says %+v, %v; quota %+v, %v", tt.name, got, ok, want, wantOK)
		}
	}
	if _, ok := h.metering.flexFor(carried()); !ok {
		t.Fatal("an OpenAI chat completion for gpt-4o from bulk is not sent at flex")
	}
	shadow := *h.live.Load()
	shadow.Shadow = true
	for _, tt := range []struct {
		name   string
		change func(*exchange)
	}{
		{"a WebSocket turn", func(ex *exchange) { ex.ask.socket = true }},
		{"mode: shadow", func(ex *exchange) { ex.live = &shadow }},
		{"anthropic", func(ex *exchange) { ex.dialect, ex.rt.api = dialectAnthropic, usage.Messages }},
		{"an OpenAI-compatible server", func(ex *exchange) { ex.dialect = dialectCompatible }},
		{"embeddings", func(ex *exchange) { ex.rt.api = usage.Embeddings }},
	} {
		ex := carried()
		tt.change(ex)
		if f, ok := h.metering.flexFor(ex); ok {
			t.Errorf("%s: sent at flex (%+v); it cannot carry the tier", tt.name, f)
		}
	}
}
