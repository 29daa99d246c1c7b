package usage

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/tidwall/gjson"
)

func TestInjectServiceTier(t *testing.T) {
	tests := []struct {
		name, body, want string
		injected         bool
	}{
		{"chat", `{"model":"gpt-4o","messages":[]}`, `{"model":"gpt-4o","messages":[],"service_tier":"flex"}`, true},
		{"empty object", `{}`, `{"service_tier":"flex"}`, true},
		{"formatting kept", "{\n  \"model\": \"o3\"\n}", "{\n  \"model\": \"o3\"\n,\"service_tier\":\"flex\"}", true},
		{"the caller's auto wins", `{"model":"gpt-4o","service_tier":"auto"}`, `{"model":"gpt-4o","service_tier":"auto"}`, false},
		{"the caller's default wins", `{"service_tier":"default"}`, `{"service_tier":"default"}`, false},
		{"the caller's flex kept", `{"service_tier":"flex"}`, `{"service_tier":"flex"}`, false},
		{"the caller's null wins", `{"service_tier":null}`, `{"service_tier":null}`, false},
		{"an escaped key is the caller's", `{"service\u005ftier":"priority"}`, `{"service\u005ftier":"priority"}`, false},
		{"a nested service_tier is not the request's", `{"metadata":{"service_tier":"x"}}`, `{"metadata":{"service_tier":"x"},"service_tier":"flex"}`, true},
		{"invalid JSON", `{"model":`, `{"model":`, false},
		{"trailing garbage", `{"model":"o3"} x`, `{"model":"o3"} x`, false},
		{"not an object", `[{"model":"o3"}]`, `[{"model":"o3"}]`, false},
		{"empty", ``, ``, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := []byte(tt.body)
			orig := bytes.Clone(in)
			out, injected := InjectServiceTier(in, "flex")
			if string(out) != tt.want || injected != tt.injected {
				t.Errorf("InjectServiceTier(%s) = %s, %v; want %s, %v", tt.body, out, injected, tt.want, tt.injected)
			}
			if !bytes.Equal(in, orig) {
				t.Errorf("the input was modified: %s", in)
			}
		})
	}
}

// FuzzInjectServiceTier: never a panic; the input is never modified; an
// injected body is valid JSON whose top-level service_tier is "flex" and
// whose other top-level fields are the input's; a body not injected is
// returned as it came.
func FuzzInjectServiceTier(f *testing.F) {
	for _, s := range []string{`{"model":"gpt-4o","messages":[]}`, `{"service_tier":"auto"}`, `{}`, `[]`, `{"a":{"service_tier":1}}`,
		`{"service\u005ftier":1}`, "{\"model\":\"o3\"\n}", `{"model":"o3"`, `{"model":"o3","model":"x"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		orig := bytes.Clone(body)
		out, injected := InjectServiceTier(body, "flex")
		if !bytes.Equal(body, orig) {
			t.Fatalf("the input was modified")
		}
		if !injected {
			if !bytes.Equal(out, body) {
				t.Fatalf("not injected, but the body changed: %q -> %q", body, out)
			}
			return
		}
		if !json.Valid(out) || gjson.GetBytes(out, "service_tier").String() != "flex" {
			t.Fatalf("injected body %q: not valid JSON with service_tier flex", out)
		}
		if gjson.GetBytes(body, "service_tier").Exists() {
			t.Fatalf("injected into %q, which names a service_tier", body)
		}
		before, after := topLevel(body), topLevel(out)
		if len(after) != len(before)+1 || after[len(before)] != `"service_tier"="flex"` {
			t.Fatalf("injected %q -> %q: want the same fields and service_tier last", body, out)
		}
		for i := range before {
			if before[i] != after[i] {
				t.Fatalf("field %d was %s, is %s", i, before[i], after[i])
			}
		}
	})
}

// topLevel lists a JSON object's top-level fields as key=value, in order.
func topLevel(b []byte) []string {
	var fields []string
	gjson.ParseBytes(b).ForEach(func(k, v gjson.Result) bool {
		fields = append(fields, k.Raw+"="+v.Raw)
		return true
	})
	return fields
}
