package usage

import (
	"errors"
	"strings"
	"testing"
)

// TestReadRequestOutput: the output cap is the largest of the three
// fields, read from the top level only, rounded up and saturating.
func TestReadRequestOutput(t *testing.T) {
	for _, tt := range []struct {
		name, body string
		want       int64
	}{
		{"absent", `{"model":"gpt-4o"}`, 0},
		{"max_tokens", `{"model":"claude","max_tokens":1024}`, 1024},
		{"max_output_tokens", `{"model":"gpt-4.1","max_output_tokens":500}`, 500},
		{"max_completion_tokens", `{"max_completion_tokens":300,"stream":true}`, 300},
		{"largest of several", `{"max_tokens":100,"max_completion_tokens":300}`, 300},
		{"null", `{"max_tokens":null}`, 0},
		{"negative", `{"max_tokens":-1}`, 0},
		{"minus zero", `{"max_tokens":-0}`, 0},
		{"exponent", `{"max_tokens":1e3}`, 1000},
		{"float", `{"max_tokens":8000.0}`, 8000},
		{"fraction rounds up", `{"max_tokens":0.25}`, 1},
		{"1e300", `{"max_tokens":1e300}`, MaxTokens},
		{"beyond float64", `{"max_tokens":1e400}`, MaxTokens},
		{"2^48", `{"max_tokens":281474976710656}`, MaxTokens},
		{"2^63", `{"max_tokens":9223372036854775808}`, MaxTokens},
		{"just below the bound", `{"max_tokens":281474976710655}`, MaxTokens - 1},
		{"nested only", `{"generation":{"max_tokens":100}}`, 0},
		{"not an object", `[{"max_tokens":100}]`, 0},
		{"not JSON", `max_tokens=100`, 0},
		{"empty", ``, 0},
		{"NUL past the second byte", "{\"\x00\x00", 0},
		{"escaped key", `{"max_t\u006fkens":7}`, 7},
		{"key in another case", `{"MAX_TOKENS":7}`, 7},
		{"kelvin sign folds to k", "{\"max_to\u212Aens\":7}", 7},
	} {
		got, err := ReadRequest("application/json", []byte(tt.body))
		if err != nil || got.MaxOutput != tt.want {
			t.Errorf("%s: ReadRequest(%s) = %+v, %v; want MaxOutput %d", tt.name, tt.body, got, err, tt.want)
		}
	}
}

// TestReadRequestGenerations: n and best_of, the larger, at least 1, and
// the output ceiling they make with the cap.
func TestReadRequestGenerations(t *testing.T) {
	for _, tt := range []struct {
		body          string
		gens, ceiling int64
	}{
		{`{"max_tokens":100}`, 1, 100},
		{`{"max_tokens":100,"n":3}`, 3, 300},
		{`{"max_tokens":100,"best_of":5,"n":2}`, 5, 500},
		{`{"max_tokens":100,"n":0}`, 1, 100},
		{`{"max_tokens":100,"n":-4}`, 1, 100},
		{`{"max_tokens":100,"n":null}`, 1, 100},
		{`{"max_tokens":1e300,"n":1e300}`, MaxTokens, MaxTokens},
		{`{"max_tokens":281474976710655,"best_of":2}`, 2, MaxTokens},
		{`{"n":5}`, 5, 0},
	} {
		got, err := ReadRequest("", []byte(tt.body))
		if err != nil || got.Generations != tt.gens || got.OutputCeiling() != tt.ceiling {
			t.Errorf("ReadRequest(%s) = %+v (ceiling %d), %v; want %d generations, ceiling %d",
				tt.body, got, got.OutputCeiling(), err, tt.gens, tt.ceiling)
		}
	}
	if (Request{MaxOutput: 7}).OutputCeiling() != 7 {
		t.Error("the zero Generations does not read as 1")
	}
}

// TestReadRequestModel: the model field, at the top level, as a string of
// at most 512 bytes; a copy, not a view of the body.
func TestReadRequestModel(t *testing.T) {
	long := `{"model":"` + strings.Repeat("m", 513) + `"}`
	for _, tt := range []struct{ body, want string }{
		{`{"model":"gpt-4o","messages":[]}`, "gpt-4o"},
		{`{"messages":[{"role":"user","content":"hi","model":"x"}],"model":"claude-sonnet-4-5"}`, "claude-sonnet-4-5"},
		{`{"messages":[{"model":"nested"}]}`, ""},
		{`{"model":4}`, ""},
		{`{"model":null}`, ""},
		{`{"model":["gpt-4o"]}`, ""},
		{`["model","gpt-4o"]`, ""},
		{`not json`, ""},
		{``, ""},
		{`{"model":"gpt-4o"`, "gpt-4o"}, // truncated: the field is there; the upstream judges the rest
		{`{"model":"gpt\u002d4o"}`, "gpt-4o"},
		{`{"Model":"gpt-4o"}`, "gpt-4o"}, // Go's encoding/json reads it as model
		{long, ""},
	} {
		body := []byte(tt.body)
		got, err := ReadRequest("", body)
		if err != nil || got.Model != tt.want {
			t.Errorf("ReadRequest(%.40q) = %+v, %v; want model %q", tt.body, got, err, tt.want)
		}
		for i := range body {
			body[i] = 'x'
		}
		if got.Model != tt.want {
			t.Errorf("ReadRequest(%.40q): the model changed with the body's buffer to %q", tt.body, got.Model)
		}
	}
}

// TestReadRequestRefuses: what the proxy and a provider could read
// differently is an error naming the field as the proxy knows it.
func TestReadRequestRefuses(t *testing.T) {
	for _, tt := range []struct {
		name, contentType, body string
		want                    error
		key                     string
	}{
		{"repeated model", "", `{"model":"gpt-4o-mini","model":"gpt-4o"}`, ErrDuplicateKey, "model"},
		{"repeated max_tokens", "", `{"max_tokens":1,"max_tokens":8000}`, ErrDuplicateKey, "max_tokens"},
		{"escaped repeat", "", `{"model":"a","mod\u0065l":"b"}`, ErrDuplicateKey, "model"},
		{"repeat in another case", "", `{"stream":true,"Stream":false}`, ErrDuplicateKey, "stream"},
		{"repeat with Kelvin sign", "", "{\"max_tokens\":1,\"max_to\u212Aens\":9}", ErrDuplicateKey, "max_tokens"},
		{"every read key", "", `{"max_completion_tokens":1,"max_completion_tokens":1}`, ErrDuplicateKey, "max_completion_tokens"},
		{"max_output_tokens", "", `{"max_output_tokens":1,"x":{},"max_output_tokens":1}`, ErrDuplicateKey, "max_output_tokens"},
		{"n", "", `{"n":1,"n":2}`, ErrDuplicateKey, "n"},
		{"best_of", "", `{"best_of":1,"best_of":2}`, ErrDuplicateKey, "best_of"},
		{"stream_options", "", `{"stream_options":{},"stream_options":null}`, ErrDuplicateKey, "stream_options"},
		{"service_tier", "", `{"service_tier":"flex","service_tier":"priority"}`, ErrDuplicateKey, "service_tier"},
		{"background", "", `{"background":false,"background":true}`, ErrDuplicateKey, "background"},
		{"string for background", "", `{"background":"true"}`, ErrFieldType, "background"},
		{"repeat of equal values", "", `{"model":"a","model":"a"}`, ErrDuplicateKey, "model"},
		{"string for max_tokens", "", `{"max_tokens":"8000"}`, ErrFieldType, "max_tokens"},
		{"bool for n", "", `{"n":true}`, ErrFieldType, "n"},
		{"object for best_of", "", `{"best_of":{}}`, ErrFieldType, "best_of"},
		{"string for stream", "", `{"stream":"true"}`, ErrFieldType, "stream"},
		{"model not UTF-8", "", "{\"model\":\"gpt-4o\xff\"}", ErrFieldType, "model"},
		{"form model not UTF-8", "application/x-www-form-urlencoded", "model=gpt-4o%FF", ErrFieldType, "model"},
		{"UTF-8 BOM", "", "\xEF\xBB\xBF{\"model\":\"gpt-4o\"}", ErrEncoding, ""},
		{"UTF-16LE BOM", "", "\xFF\xFE{\x00}\x00", ErrEncoding, ""},
		{"UTF-16BE BOM", "", "\xFE\xFF\x00{\x00}", ErrEncoding, ""},
		{"UTF-16LE", "", "{\x00}\x00", ErrEncoding, ""},
		{"UTF-32BE", "", "\x00\x00\x00{", ErrEncoding, ""},
		{"UTF-32LE", "", "{\x00\x00\x00", ErrEncoding, ""},
		{"UTF-16BE, two bytes", "", "\x00{", ErrEncoding, ""},
		{"two form models", "multipart/form-data; boundary=b",
			"--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\na\r\n--b\r\nContent-Disposition: form-data; name=model\r\n\r\nb\r\n--b--\r\n", ErrDuplicateKey, "model"},
		{"form without boundary", "multipart/form-data", "--b--\r\n", ErrMalformedForm, ""},
		{"unfinished form", "multipart/form-data; boundary=b", "--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\na", ErrMalformedForm, ""},
		{"two dispositions", "multipart/form-data; boundary=b",
			"--b\r\nContent-Disposition: form-data; name=\"x\"\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\na\r\n--b--\r\n", ErrMalformedForm, ""},
		{"bad disposition", "multipart/form-data; boundary=b",
			"--b\r\nContent-Disposition: form-data; name=\"model\"; name=\"x\"\r\n\r\na\r\n--b--\r\n", ErrMalformedForm, ""},
		{"quoted-printable model", "multipart/form-data; boundary=b",
			"--b\r\nContent-Disposition: form-data; name=\"model\"\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\ngpt=2D4o\r\n--b--\r\n", ErrMalformedForm, ""},
		{"too many parts", "multipart/form-data; boundary=b",
			strings.Repeat("--b\r\nContent-Disposition: form-data; name=\"x\"\r\n\r\n1\r\n", maxFormParts+1) + "--b--\r\n", ErrMalformedForm, ""},
		{"unparseable form type", "multipart/form-data boundary=b", "", ErrMalformedForm, ""},
		{"two urlencoded models", "application/x-www-form-urlencoded", "model=a&x=1&model=b", ErrDuplicateKey, "model"},
		{"bad urlencoding", "application/x-www-form-urlencoded", "model=a&x=%zz", ErrMalformedForm, ""},
	} {
		_, err := ReadRequest(tt.contentType, []byte(tt.body))
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
			continue
		}
		fe, isField := errors.AsType[*FieldError](err)
		if tt.key != "" && (!isField || fe.Key != tt.key) {
			t.Errorf("%s: %v, want it to name %q", tt.name, err, tt.key)
		}
	}
}

// TestReadRequestForms: a form's model field, exactly named, whatever the
// parts around it; one field named model and the rest not.
func TestReadRequestForms(t *testing.T) {
	multipart := "preamble\r\n--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"model\"\r\nContent-Type: audio/wav\r\n\r\nRIFF\x00\x00model\r\n" +
		"--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\ngpt-4o-transcribe\r\n" +
		"--b\r\nContent-Disposition: form-data; name=\"Model\"\r\n\r\nother\r\n--b--\r\nepilogue"
	for _, tt := range []struct{ contentType, body, want string }{
		{"multipart/form-data; boundary=b", multipart, "gpt-4o-transcribe"},
		{"Multipart/Form-Data; boundary=\"b\"", multipart, "gpt-4o-transcribe"},
		{"multipart/form-data; boundary=b", "--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\n" + strings.Repeat("m", 513) + "\r\n--b--\r\n", ""},
		{"multipart/form-data; boundary=b", "--b--\r\n", ""},
		{"application/x-www-form-urlencoded", "model=whisper-1&language=en", "whisper-1"},
		{"application/x-www-form-urlencoded; charset=utf-8", "language=en", ""},
	} {
		got, err := ReadRequest(tt.contentType, []byte(tt.body))
		if err != nil || got.Model != tt.want {
			t.Errorf("%s %.50q: %+v, %v; want model %q", tt.contentType, tt.body, got, err, tt.want)
		}
	}
}

// TestTokenArithmetic: sums and products of token counts saturate at
// MaxTokens and never wrap.
func TestTokenArithmetic(t *testing.T) {
	for _, tt := range []struct{ a, b, sum, product int64 }{
		{0, 0, 0, 0},
		{2, 3, 5, 6},
		{MaxTokens, 1, MaxTokens, MaxTokens},
		{MaxTokens, MaxTokens, MaxTokens, MaxTokens},
		{MaxTokens - 1, 1, MaxTokens, MaxTokens - 1},
		{1 << 30, 1 << 30, 1 << 31, MaxTokens},
		{-5, 7, 7, 0},
		{1 << 62, 1 << 62, MaxTokens, MaxTokens},
	} {
		if got := AddTokens(tt.a, tt.b); got != tt.sum {
			t.Errorf("AddTokens(%d, %d) = %d, want %d", tt.a, tt.b, got, tt.sum)
		}
		if got := MulTokens(tt.a, tt.b); got != tt.product {
			t.Errorf("MulTokens(%d, %d) = %d, want %d", tt.a, tt.b, got, tt.product)
		}
	}
}

// BenchmarkReadRequest reads a 64 KiB chat request (a long conversation
// before the fields) in one walk.
func BenchmarkReadRequest(b *testing.B) {
	turn := `{"role":"user","content":"` + strings.Repeat("lorem ipsum ", 40) + `"},`
	body := []byte(`{"messages":[` + strings.Repeat(turn, 130) + `{"role":"user","content":"hi"}],"model":"gpt-4o","max_tokens":512,"n":2,"stream":true}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if req, err := ReadRequest("application/json", body); err != nil || req.OutputCeiling() != 1024 {
			b.Fatalf("%+v, %v", req, err)
		}
	}
}

// TestReadRequestBackground: background: true at the top level, read in
// the one walk; nested, false or absent is not.
func TestReadRequestBackground(t *testing.T) {
	for _, tt := range []struct {
		body string
		want bool
	}{
		{`{"model":"m","background":true}`, true},
		{`{"model":"m","background":false}`, false},
		{`{"model":"m","background":null}`, false},
		{`{"model":"m"}`, false},
		{`{"metadata":{"background":true}}`, false}, // nested: not the request's
		{`{"backgr\u006fund":true}`, true},          // escaped as the provider unescapes
		{`[{"background":true}]`, false},
		{`not json`, false},
	} {
		got, err := ReadRequest("application/json", []byte(tt.body))
		if err != nil || got.Background != tt.want {
			t.Errorf("ReadRequest(%s).Background = %v, %v; want %v", tt.body, got.Background, err, tt.want)
		}
	}
}
