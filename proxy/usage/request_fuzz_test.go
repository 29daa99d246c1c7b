package usage

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// fuzzContentTypes are the media types FuzzReadRequest reads bodies as,
// by the fuzzer's pick.
var fuzzContentTypes = []string{"", "application/json", "multipart/form-data; boundary=b", "application/x-www-form-urlencoded"}

// FuzzReadRequest feeds arbitrary bodies to the top-level walk and the
// form readers: it must not panic; it must allocate within a bound linear
// in the body; a duplicate it reports must be one (two top-level keys
// that encoding/json maps to the same field); and when the body is valid
// JSON it refuses nothing else in, its reading must be encoding/json's
// (which reads the last of duplicate keys, matching case-insensitively,
// as the providers' parsers do).
func FuzzReadRequest(f *testing.F) {
	for _, seed := range []string{
		`{"model":"gpt-4o-mini","model":"gpt-4o"}`,
		`{"max_tokens":1,"max_tokens":8000}`,
		`{"mod\u0065l":"a","model":"b"}`,
		`{"MODEL":"a","model":"b"}`,
		"{\"max_to\u212Aens\":1}",
		`{"model":"m","max_tokens":1e300,"n":128}`,
		`{"max_tokens":-0,"best_of":281474976710656}`,
		`{"max_tokens":"8000"}`,
		`{"max_completion_tokens":0.5,"max_output_tokens":12}`,
		`{"stream":true,"stream_options":{"include_usage":true},"service_tier":"flex"}`,
		"\xEF\xBB\xBF{\"model\":\"gpt-4o\"}",
		`{"x":` + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + `,"model":"a","model":"b"}`,
		`{"model":"a","x":{"model":"b","model":"c"}}`,
		`{"model":"gpt-4o"`,
		`[1,2]`,
		`{"model":"gpt-4.1","previous_response_id":"resp_1","input":"more"}`,
		`{"prompt":{"id":"pmpt_1"},"conversation":null}`,
		`{"input":[{"role":"user","content":[{"type":"input_text","text":"x"},{"type":"input_image","file_id":"f"}]}]}`,
		`{"messages":[{"role":"user","content":[{"type":"tool_result","content":[{"TYPE":"image","source":{}}]}]}]}`,
		`{"tools":[{"type":"function"},{"type":"web_search_20250305"}],"mcp_servers":[]}`,
		`{"input":` + strings.Repeat("[", 7) + `{"type":"input_file"}` + strings.Repeat("]", 7) + `}`,
		`{"contents":[{"parts":[{"inlineData":{"data":"AA"}}]}],"generationConfig":{"maxOutputTokens":50,"candidateCount":2},"max_tokens":9}`,
		`{"generation_config":{"max_output_tokens":1e300},"GenerationConfig":{"candidateCount":"3"},"cachedContent":"c"}`,
	} {
		f.Add([]byte(seed), uint8(0))
	}
	f.Add([]byte("--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper-1\r\n--b--\r\n"), uint8(2))
	f.Add([]byte("--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\na\r\n--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nb\r\n--b--\r\n"), uint8(2))
	f.Add([]byte("model=a&model=b"), uint8(3))
	f.Fuzz(func(t *testing.T, body []byte, pick uint8) {
		contentType := fuzzContentTypes[int(pick)%len(fuzzContentTypes)]
		req, err := readBounded(t, contentType, body)
		if req.MaxOutput < 0 || req.MaxOutput > MaxTokens || req.Generations < 0 || req.Generations > MaxTokens ||
			req.OutputCeiling() < 0 || req.OutputCeiling() > MaxTokens || len(req.Model) > maxModel {
			t.Fatalf("out of bounds: %+v", req)
		}
		if contentType == "" || contentType == "application/json" {
			checkAgainstEncodingJSON(t, body, req, err)
		}
	})
}

// readBounded is ReadRequest, checked to allocate at most 64 KiB plus 16
// bytes for every byte of the body.
func readBounded(t *testing.T, contentType string, body []byte) (Request, error) {
	t.Helper()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	req, err := ReadRequest(contentType, body)
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 64<<10+16*uint64(len(body)) {
		t.Fatalf("%d bytes allocated for a body of %d", n, len(body))
	}
	return req, err
}

// jsonFields is how encoding/json reads the fields ReadRequest reads: the
// last of keys that fold to the same name.
type jsonFields struct {
	Model               json.RawMessage `json:"model"`
	MaxTokens           json.RawMessage `json:"max_tokens"`
	MaxCompletionTokens json.RawMessage `json:"max_completion_tokens"`
	MaxOutputTokens     json.RawMessage `json:"max_output_tokens"`
	N                   json.RawMessage `json:"n"`
	BestOf              json.RawMessage `json:"best_of"`
	Stream              json.RawMessage `json:"stream"`
}

// checkAgainstEncodingJSON checks ReadRequest's reading of a JSON body
// against encoding/json's, when the body is valid JSON.
func checkAgainstEncodingJSON(t *testing.T, body []byte, req Request, err error) {
	t.Helper()
	if !json.Valid(body) {
		return
	}
	keys, isObject := topLevelKeys(t, body)
	if fe, ok := errors.AsType[*FieldError](err); ok && errors.Is(err, ErrDuplicateKey) {
		n := 0
		for _, k := range keys {
			if strings.EqualFold(k, fe.Key) {
				n++
			}
		}
		if n < 2 {
			t.Fatalf("duplicate %q reported; the keys are %q", fe.Key, keys)
		}
		return
	}
	if err != nil || !isObject {
		return // refused for a type or encoding, or nothing to read
	}
	var ref jsonFields
	if err := json.Unmarshal(body, &ref); err != nil {
		t.Fatalf("encoding/json: %v", err)
	}
	want := Request{Generations: max(1, jsonTokens(ref.N), jsonTokens(ref.BestOf)),
		MaxOutput: max(jsonTokens(ref.MaxTokens), jsonTokens(ref.MaxCompletionTokens), jsonTokens(ref.MaxOutputTokens))}
	_ = json.Unmarshal(ref.Stream, &want.Stream) // true only for a JSON true
	var model string
	if json.Unmarshal(ref.Model, &model) == nil && len(model) <= maxModel {
		want.Model = model
	}
	// Background and HiddenInput are not compared: encoding/json has no
	// reading of its own of what hides input, and either only raises
	// what a request is charged.
	want.Background, want.HiddenInput = req.Background, req.HiddenInput
	// A Gemini generationConfig only raises the output cap and the
	// generations (geminirequest.go), never below encoding/json's reading
	// of the fields beside it.
	if slices.ContainsFunc(keys, isGeminiConfig) && req.MaxOutput >= want.MaxOutput && req.Generations >= want.Generations {
		want.MaxOutput, want.Generations = req.MaxOutput, req.Generations
	}
	if req != want {
		t.Fatalf("read %+v, encoding/json reads %+v", req, want)
	}
}

// topLevelKeys lists a valid JSON document's top-level keys, unescaped,
// with encoding/json's tokenizer; isObject is false for any other value.
func topLevelKeys(t *testing.T, doc []byte) (keys []string, isObject bool) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(doc))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("tokenizer: %v", err)
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil && !errors.Is(err, io.EOF) {
			t.Fatalf("tokenizer: %v", err)
		}
	}
	return keys, true
}

// jsonTokens is a count of tokens as encoding/json reads the number raw:
// rounded up, within [0, MaxTokens]; 0 for null or absent.
func jsonTokens(raw json.RawMessage) int64 {
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil {
		if len(raw) > 0 && raw[0] != '-' && raw[0] != 'n' { // a number beyond float64
			return MaxTokens
		}
		return 0
	}
	switch {
	case !(f > 0):
		return 0
	case f >= MaxTokens:
		return MaxTokens
	}
	return int64(math.Ceil(f))
}
