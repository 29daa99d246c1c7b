package proxy

import (
	"bufio"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
	"github.com/tidwall/gjson"
)

// TestAccessLogServedModelAndReasoning: a line's model_served and
// reasoning_tokens are what the provider answered — the real fake
// provider, chat and Responses, JSON and streamed, a reasoning model and
// one without reasoning — and its output_tokens include the reasoning.
func TestAccessLogServedModelAndReasoning(t *testing.T) {
	out := &syncBuffer{}
	p, access := accessProxy(t, fakeprovider.New(fakeprovider.Config{}), streamOut{out}, accessQueue)
	tests := []struct {
		name, path, body string
		stream           bool
		output, reason   string // gjson paths of the output and reasoning counts, in the body or the stream's event carrying them
		model            string // gjson path of the model served
	}{
		{"chat o3-mini", "/v1/chat/completions", `{"model":"o3-mini","messages":[{"role":"user","content":"hi"}]}`, false,
			"usage.completion_tokens", "usage.completion_tokens_details.reasoning_tokens", "model"},
		{"chat gpt-5 streamed", "/v1/chat/completions", `{"model":"gpt-5","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`, true,
			"usage.completion_tokens", "usage.completion_tokens_details.reasoning_tokens", "model"},
		{"chat gpt-4o", "/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`, false,
			"usage.completion_tokens", "usage.completion_tokens_details.reasoning_tokens", "model"},
		{"responses o4-mini", "/v1/responses", `{"model":"o4-mini","input":"hello"}`, false,
			"usage.output_tokens", "usage.output_tokens_details.reasoning_tokens", "model"},
		{"responses gpt-5 streamed", "/v1/responses", `{"model":"gpt-5","input":"hello","stream":true}`, true,
			"response.usage.output_tokens", "response.usage.output_tokens_details.reasoning_tokens", "response.model"},
	}
	type answer struct{ model, output, reasoning string }
	answered := make([]answer, 0, len(tests))
	for _, tc := range tests {
		req := newRequest(t, http.MethodPost, p.URL+tc.path, tc.body)
		req.Header.Set("Authorization", "Bearer sk-import")
		req.Header.Set("Content-Type", "application/json")
		status, _, body := do(t, req)
		if status != http.StatusOK {
			t.Fatalf("%s: status %d: %s", tc.name, status, body)
		}
		doc := string(body)
		if tc.stream { // the event that carries the usage
			doc = ""
			for sc := bufio.NewScanner(strings.NewReader(string(body))); sc.Scan(); {
				if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok && gjson.Get(data, tc.output).Exists() {
					doc = data
				}
			}
		}
		a := answer{gjson.Get(doc, tc.model).Str, gjson.Get(doc, tc.output).Raw, gjson.Get(doc, tc.reason).Raw}
		if a.model == "" || a.output == "" || a.reasoning == "" {
			t.Fatalf("%s: the fake answered no model, output or reasoning: %s", tc.name, body)
		}
		answered = append(answered, a)
	}
	waitFor(t, "a line a request", func() bool { return len(lines(out.String())) == len(tests) })
	if err := access.Close(); err != nil {
		t.Fatal(err)
	}
	reasoned := false
	for i, l := range lines(out.String()) {
		line, a := checkAccessLine(t, l), answered[i]
		got := answer{line["model_served"].(string), integer(line["output_tokens"]), integer(line["reasoning_tokens"])}
		if got != a || line["estimated"] != false {
			t.Errorf("%s: the line says served by %q, %s output tokens, %s reasoning (estimated %v); the provider answered %q, %s, %s",
				tests[i].name, got.model, got.output, got.reasoning, line["estimated"], a.model, a.output, a.reasoning)
		}
		reasoned = reasoned || got.reasoning != "0"
	}
	if !reasoned {
		t.Errorf("no line has reasoning tokens: the test shows nothing")
	}
}

// integer writes a decoded JSON number as an integer's JSON text.
func integer(v any) string {
	f, _ := v.(float64)
	return strconv.FormatInt(int64(f), 10)
}
