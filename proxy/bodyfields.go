package proxy

import (
	"errors"
	"net/http"
	"strings"

	"github.com/meterproxy/meterproxy/proxy/usage"
)

// encodingRefusal is the answer to a metered request whose body comes in a
// Content-Encoding (gzip, deflate, br, …; anything but identity): the
// proxy could read neither its model nor its charge, and would estimate
// its tokens from the compressed size. nil when the body is not encoded.
// Batches and uploads stream through unread and are not asked.
func encodingRefusal(h http.Header) *refusal {
	for _, v := range h.Values("Content-Encoding") {
		for coding := range strings.SplitSeq(v, ",") {
			if c := strings.TrimSpace(coding); c != "" && !strings.EqualFold(c, "identity") {
				return &refusal{status: http.StatusUnsupportedMediaType, reason: reasonUnsupportedEncoding, kind: "invalid_request_error",
					message: "meterproxy: a request body with a Content-Encoding cannot be metered; send it uncompressed"}
			}
		}
	}
	return nil
}

// readFields reads what admission needs of a metered request's body
// (usage.ReadRequest), or the answer to give when the proxy and the
// provider could read it differently: 400 duplicate_key for a repeated
// key, 400 bad_request for a number field of another type, a byte order
// mark or a form that does not parse. The message names the field as the
// proxy knows it, never the body's spelling.
func readFields(contentType string, body []byte) (usage.Request, *refusal) {
	req, err := usage.ReadRequest(contentType, body)
	if err == nil {
		return req, nil
	}
	f := &refusal{status: http.StatusBadRequest, reason: reasonBadRequest, kind: "invalid_request_error"}
	fe, isField := errors.AsType[*usage.FieldError](err)
	switch {
	case errors.Is(err, usage.ErrDuplicateKey) && isField:
		f.reason = reasonDuplicateKey
		f.message = `meterproxy: the request body repeats the key "` + fe.Key +
			`" (spellings that differ in case or escapes count as one): meterproxy and the provider could read different values; send it once`
	case errors.Is(err, usage.ErrFieldType) && isField:
		f.message = `meterproxy: "` + fe.Key + `" must be ` + fe.Want
	case errors.Is(err, usage.ErrEncoding):
		f.message = "meterproxy: the request body must be UTF-8 JSON without a byte order mark"
	default: // usage.ErrMalformedForm
		f.message = "meterproxy: the form body (multipart/form-data or application/x-www-form-urlencoded) could not be read"
	}
	return req, f
}

// longContextBeta starts the anthropic-beta value that gives a Claude
// request the 1M-token context (context-1m-2025-08-07).
const longContextBeta = "context-1m"

// longContext reports whether an Anthropic request asks for the long
// context: an anthropic-beta header (comma-separated, any of its values)
// naming longContextBeta. Its hidden input is then reserved at up to
// price.FallbackMaxInput rather than Claude's 200,000 (an unset
// max_input).
func longContext(h http.Header) bool {
	for _, v := range h.Values("Anthropic-Beta") {
		for beta := range strings.SplitSeq(v, ",") {
			if b := strings.TrimSpace(beta); len(b) >= len(longContextBeta) && strings.EqualFold(b[:len(longContextBeta)], longContextBeta) {
				return true
			}
		}
	}
	return false
}
