package usage

import (
	"strings"
	"testing"
)

// deepBody is a request body nested far past any sane depth: 7 MB of '['
// after a few real fields, as a hostile caller would send.
func deepBody(prefix string) []byte {
	return []byte(prefix + strings.Repeat("[", 7<<20))
}

// TestDeepNestingIsBounded: every parser the request path runs on an
// untrusted body returns on 7 MB of nesting instead of overflowing the
// stack (gjson.Valid recursed once per level: "fatal error: stack
// overflow", which no recover catches and which ended the process).
func TestDeepNestingIsBounded(t *testing.T) {
	body := deepBody(`{"stream":true,"max_tokens":5,"x":`)
	if out, injected := InjectStreamUsage(body); injected || len(out) != len(body) {
		t.Errorf("InjectStreamUsage changed an invalid, deeply nested body (injected %v)", injected)
	}
	if got := MaxOutput(body); got != 5 {
		t.Errorf("MaxOutput = %d, want 5 (the field before the nesting)", got)
	}
	if got := Model(deepBody(`{"model":"gpt-4o","x":`)); got != "gpt-4o" {
		t.Errorf("Model = %q, want gpt-4o (the field before the nesting)", got)
	}
	if got := Model(deepBody(`{"x":`)); got != "" {
		t.Errorf("Model = %q past the nesting, want none", got)
	}
	if got := EstimateInput(body); got != int64(len(body)+3)/4 {
		t.Errorf("EstimateInput = %d", got)
	}
	// The same nesting inside a usage chunk from the upstream.
	if isUsageChunk(deepBody(`{"choices":[],"usage":{},"x":`)) {
		t.Error("isUsageChunk accepted an invalid chunk")
	}
}
