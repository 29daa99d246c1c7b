package usage

import (
	"errors"
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
	if got, err := ReadRequest("", body); got.MaxOutput != 5 || err != nil {
		t.Errorf("ReadRequest = %+v, %v, want MaxOutput 5 (the field before the nesting)", got, err)
	}
	if got, err := ReadRequest("", deepBody(`{"model":"gpt-4o","x":`)); got.Model != "gpt-4o" || err != nil {
		t.Errorf("ReadRequest = %+v, %v, want model gpt-4o (the field before the nesting)", got, err)
	}
	if got, err := ReadRequest("", deepBody(`{"x":`)); got.Model != "" || err != nil {
		t.Errorf("ReadRequest = %+v, %v past the nesting, want no model", got, err)
	}
	// Under input and messages the walk for hidden parts looks a few
	// levels in, no deeper.
	for _, key := range []string{"input", "messages"} {
		if got, err := ReadRequest("", deepBody(`{"max_tokens":5,"`+key+`":`)); got.MaxOutput != 5 || got.HiddenInput || err != nil {
			t.Errorf("ReadRequest = %+v, %v on 7 MB of nesting under %s, want MaxOutput 5 and nothing hidden", got, err, key)
		}
	}
	// A repeat past a deep nested value is still seen: the walk skips the
	// value whole, without a depth limit of its own.
	deep := `{"model":"a","x":` + strings.Repeat("[", 1<<20) + strings.Repeat("]", 1<<20) + `,"model":"b"}`
	if _, err := ReadRequest("", []byte(deep)); !errors.Is(err, ErrDuplicateKey) {
		t.Errorf("a repeat after 1 Mi levels of nesting: %v, want ErrDuplicateKey", err)
	}
	if got := EstimateInput(body); got != int64(len(body)+3)/4 {
		t.Errorf("EstimateInput = %d", got)
	}
	// The same nesting inside a usage chunk from the upstream.
	if isUsageChunk(deepBody(`{"choices":[],"usage":{},"x":`)) {
		t.Error("isUsageChunk accepted an invalid chunk")
	}
}
