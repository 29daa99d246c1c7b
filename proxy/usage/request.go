package usage

import (
	"errors"
	"math"
	"mime"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// Request is what the proxy reads of a request body before admission: the
// fields that decide its pool and its token charge. The zero value is a
// body that names nothing (Generations counts as 1).
type Request struct {
	// Model is the model field, or "" when it is absent, not a string, or
	// longer than maxModel bytes.
	Model string
	// MaxOutput is the largest of max_tokens, max_completion_tokens and
	// max_output_tokens (and a Gemini generationConfig's maxOutputTokens,
	// geminirequest.go), in tokens, rounded up and within [0, maxCount];
	// 0 when none is set.
	MaxOutput int64
	// Generations is how many completions the provider generates for the
	// request: the larger of n (choices returned) and best_of (legacy
	// completions: candidates generated server-side, best_of ≥ n), or a
	// Gemini generationConfig's candidateCount, within [1, maxCount]. 0
	// reads as 1.
	Generations int64
	// Background is a Responses request's background: true. The provider
	// then answers at once (status queued, no usage) and generates after
	// the answer, so the answer says nothing of what the request costs.
	Background bool
	// Stream is the request's stream: true, an answer asked for as an
	// event stream.
	Stream bool
	// HiddenInput says the provider may bill input the body does not
	// show, so that its bytes ÷ 4 (EstimateInput) do not bound it: a
	// previous_response_id, a conversation or a stored prompt (input kept
	// server-side), an image, file, document or audio part (by reference,
	// or inline where its size says nothing of its tokens), or a tool the
	// provider runs itself (file_search, web_search, …). See hidden.go.
	HiddenInput bool
}

// OutputCeiling is the most output the request allows, in tokens:
// MaxOutput per generation, times Generations, saturating at maxCount.
func (r Request) OutputCeiling() int64 { return MulTokens(r.MaxOutput, max(r.Generations, 1)) }

// Errors of ReadRequest, each wrapped in a *FieldError when a field is at
// fault.
var (
	// ErrDuplicateKey: the body repeats a key the proxy reads or the
	// provider charges by. The proxy would read one value and the provider
	// another (gjson the first, the providers the last).
	ErrDuplicateKey = errors.New("usage: duplicate key")
	// ErrFieldType: a field the proxy charges by is not of the type the
	// provider takes (a string for max_tokens). Providers refuse it, or
	// coerce it (pydantic's lax mode reads "8000" as 8000) where the proxy
	// would read nothing.
	ErrFieldType = errors.New("usage: field of the wrong type")
	// ErrEncoding: the body starts with a byte order mark or is UTF-16 or
	// UTF-32 (a NUL in its first two bytes). Python's json.loads reads
	// such bytes; the proxy would read nothing.
	ErrEncoding = errors.New("usage: body is not UTF-8 JSON without a byte order mark")
	// ErrMalformedForm: a multipart/form-data or
	// application/x-www-form-urlencoded body that does not parse, or has
	// more than maxFormParts parts.
	ErrMalformedForm = errors.New("usage: malformed form body")
)

// FieldError is a ReadRequest error about one field. Key is the field's
// name as the proxy knows it ("model"), never the spelling the body used.
type FieldError struct {
	Key string
	// Want is the type the field must have, for ErrFieldType.
	Want string
	Err  error
}

func (e *FieldError) Error() string {
	if e.Want != "" {
		return e.Err.Error() + ": " + strconv.Quote(e.Key) + " must be " + e.Want
	}
	return e.Err.Error() + ": " + strconv.Quote(e.Key)
}

func (e *FieldError) Unwrap() error { return e.Err }

// ReadRequest reads a request body the proxy holds whole, once: a
// multipart/form-data or application/x-www-form-urlencoded body (by
// contentType) for its model field, anything else as JSON, walking the
// top-level object for model, the output caps, n, best_of and background,
// and for what hides input (HiddenInput; looking at most maxPartDepth
// levels into input and messages). It returns an error the request must
// be refused for when the proxy and the provider could read the body
// differently: a repeated key (ErrDuplicateKey), a
// number field of another type (ErrFieldType), a byte order mark
// (ErrEncoding), a form that does not parse (ErrMalformedForm). A body
// that is not a JSON object (or not JSON) reads as Request{} without
// error: the provider refuses it, and it names nothing to charge.
func ReadRequest(contentType string, body []byte) (Request, error) {
	if contentType == "application/json" { // the usual one, read without the parameters' map
		return readJSON(body)
	}
	mediaType, params, err := mime.ParseMediaType(contentType)
	if err != nil && !errors.Is(err, mime.ErrInvalidMediaParameter) {
		// Unparseable: read as JSON, unless it names a form, which a
		// lenient parser at the provider might still read as one.
		mediaType = ""
		if names := strings.ToLower(contentType); strings.Contains(names, "multipart/form-data") ||
			strings.Contains(names, "x-www-form-urlencoded") {
			return Request{}, ErrMalformedForm
		}
	}
	switch mediaType {
	case "multipart/form-data":
		return readMultipart(body, params["boundary"])
	case "application/x-www-form-urlencoded":
		return readURLEncoded(body)
	}
	return readJSON(body)
}

// maxModel bounds the model name a Request holds: a longer one is no
// model any pool names (quota bounds its patterns shorter), and matching
// it would cost time for nothing.
const maxModel = 512

// field is a top-level key ReadRequest reads or refuses to see twice.
type field uint8

const (
	fieldModel field = iota
	fieldMaxTokens
	fieldMaxCompletionTokens
	fieldMaxOutputTokens
	fieldN
	fieldBestOf
	fieldStream
	fieldStreamOptions
	fieldServiceTier
	fieldBackground
	numFields
)

// fieldNames are the keys, by field: every key the proxy reads or the
// provider charges by.
var fieldNames = [numFields]string{
	"model", "max_tokens", "max_completion_tokens", "max_output_tokens", "n", "best_of",
	"stream", "stream_options", "service_tier", "background",
}

// maxKeyLen bounds the length of a key that can name a field: the longest
// name, each byte of which may fold from a rune of up to 3 bytes (K from
// the Kelvin sign U+212A).
const maxKeyLen = 3 * len("max_completion_tokens")

// fieldOf is the field key names, compared as Go's encoding/json matches
// struct fields (strings.EqualFold: "Model" and "MODEL" are model), the
// widest reading any provider makes; ok is false for any other key. key
// is unescaped ("mod\u0065l" is model).
func fieldOf(key string) (f field, ok bool) {
	if key == "" || len(key) > maxKeyLen {
		return 0, false
	}
	for i, name := range fieldNames {
		if strings.EqualFold(key, name) {
			return field(i), true
		}
	}
	return 0, false
}

// readJSON walks body's top-level object once with gjson, which skips
// every nested value without parsing it (iteratively: no depth reaches the
// stack), and reads each field the first time its key appears; a second
// time is ErrDuplicateKey.
func readJSON(body []byte) (Request, error) {
	if err := checkEncoding(body); err != nil {
		return Request{}, err
	}
	doc := gjson.Parse(view(body))
	req := Request{Generations: 1}
	if !doc.IsObject() {
		return req, nil
	}
	var seen [numFields]bool
	var err error
	doc.ForEach(func(k, v gjson.Result) bool {
		f, ok := fieldOf(k.Str)
		switch {
		case !ok && isGeminiConfig(k.Str):
			req.readGeminiConfig(v)
			return true
		case !ok:
			req.HiddenInput = req.HiddenInput || hidesInput(k.Str, v)
			return true
		case seen[f]:
			err = &FieldError{Key: fieldNames[f], Err: ErrDuplicateKey}
			return false
		}
		seen[f] = true
		err = req.set(f, v)
		return err == nil
	})
	return req, err
}

// set records field f's value v.
func (r *Request) set(f field, v gjson.Result) error {
	switch f {
	case fieldModel:
		if v.Type != gjson.String {
			return nil // no provider takes it; the default pool, and the provider refuses it
		}
		model, err := modelValue(v.Str)
		r.Model = strings.Clone(model) // v.Str may view the body's buffer
		return err
	case fieldMaxTokens, fieldMaxCompletionTokens, fieldMaxOutputTokens, fieldN, fieldBestOf:
		if v.Type != gjson.Number && v.Type != gjson.Null {
			return &FieldError{Key: fieldNames[f], Want: "a number", Err: ErrFieldType}
		}
		n := tokens(v)
		if f == fieldN || f == fieldBestOf {
			r.Generations = max(r.Generations, n)
		} else {
			r.MaxOutput = max(r.MaxOutput, n)
		}
	case fieldStream, fieldBackground:
		if v.Type != gjson.True && v.Type != gjson.False && v.Type != gjson.Null {
			return &FieldError{Key: fieldNames[f], Want: "true or false", Err: ErrFieldType}
		}
		if f == fieldBackground {
			r.Background = v.Type == gjson.True
		} else {
			r.Stream = v.Type == gjson.True
		}
	}
	return nil
}

// modelValue is a model field's value as a Request holds it: "" when it
// is longer than maxModel (no pool is worth matching it against), and an
// ErrFieldType when it is not UTF-8, which providers read differently
// (Python's refuses it, Go's encoding/json reads U+FFFD for each bad
// byte) and so could match another pool.
func modelValue(s string) (string, error) {
	switch {
	case len(s) > maxModel:
		return "", nil
	case !utf8.ValidString(s):
		return "", &FieldError{Key: "model", Want: "a UTF-8 string", Err: ErrFieldType}
	}
	return s, nil
}

// tokens reads a JSON number as a count of tokens: rounded up, 0 for
// anything not above 0 (null, -0, negatives), maxCount for anything at or
// above it (1e300, 2^48).
func tokens(v gjson.Result) int64 {
	f := v.Num
	switch {
	case v.Type != gjson.Number || !(f > 0): // NaN too
		return 0
	case f >= maxCount:
		return maxCount
	}
	return int64(math.Ceil(f))
}

// checkEncoding refuses a body that Python's json.loads (detect_encoding)
// would decode as anything but plain UTF-8: a byte order mark (UTF-8,
// UTF-16 or UTF-32), or a NUL in the first or second byte (UTF-16 or
// UTF-32 without one, RFC 4627 section 3). The provider may read such a
// body; gjson does not.
func checkEncoding(body []byte) error {
	s := string(body[:min(len(body), 4)])
	switch {
	case strings.HasPrefix(s, "\xEF\xBB\xBF"), strings.HasPrefix(s, "\xFE\xFF"), strings.HasPrefix(s, "\xFF\xFE"),
		(len(s) == 4 || len(s) == 2) && (s[0] == 0 || s[1] == 0):
		return ErrEncoding
	}
	return nil
}
