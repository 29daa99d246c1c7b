package fakeprovider

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// Reply-shape request headers; see the package documentation.
const (
	// HeaderReplyBytes pads a chat reply's text to about this many bytes
	// (at most maxReplyBytes): a large answer.
	HeaderReplyBytes = "X-Fake-Reply-Bytes"
	// HeaderToolCall answers a chat request with a tool call whose
	// arguments carry the reply's text, instead of message content.
	HeaderToolCall = "X-Fake-Tool-Call"
	// HeaderHoldTail writes a JSON chat answer but its last HeldTail
	// bytes (where its usage is), then waits for the client to go away:
	// an answer held in flight with nearly all of it sent. The answer has
	// no Content-Length (a proxy passes each part on at once);
	// HeaderSentBytes says how much of it comes before the hold.
	HeaderHoldTail = "X-Fake-Hold-Tail"
	// HeaderSentBytes is the response header of a HeaderHoldTail answer:
	// the bytes it sends before holding the rest.
	HeaderSentBytes = "X-Fake-Sent-Bytes"
)

// HeldTail is how many bytes of a JSON answer HeaderHoldTail keeps back.
const HeldTail = 256

// maxReplyBytes bounds HeaderReplyBytes.
const maxReplyBytes = 16 << 20

// shape is how one chat reply is shaped: its size and whether it is a
// tool call.
type shape struct {
	bytes              int
	toolCall, holdTail bool
}

// parseShape reads the reply-shape headers from h.
func parseShape(h http.Header) (shape, error) {
	var s shape
	if v := h.Get(HeaderReplyBytes); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > maxReplyBytes {
			return s, fmt.Errorf("fakeprovider: header %s: %q is not a byte count up to %d", HeaderReplyBytes, v, maxReplyBytes)
		}
		s.bytes = n
	}
	for _, k := range []struct {
		name string
		dst  *bool
	}{{HeaderToolCall, &s.toolCall}, {HeaderHoldTail, &s.holdTail}} {
		if v := h.Get(k.name); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return s, fmt.Errorf("fakeprovider: header %s: %q is not a boolean", k.name, v)
			}
			*k.dst = b
		}
	}
	return s, nil
}

// writeJSONHoldingTail answers v with status 200, writes all of it except
// the last HeldTail bytes, then waits until the client goes away
// (HeaderHoldTail). No Content-Length is sent, so a reverse proxy passes
// every write on at once (httputil.ReverseProxy flushes an answer of
// unknown length as it comes, and buffers one of known length).
func (x *exchange) writeJSONHoldingTail(v any) {
	b, err := json.Marshal(v)
	if err != nil { // only our own types are marshalled; they always encode
		x.fail(http.StatusInternalServerError, "fakeprovider: encode failed")
		return
	}
	h := x.w.Header()
	sent := max(0, len(b)-HeldTail)
	h.Set("Content-Type", "application/json")
	h.Set(HeaderSentBytes, strconv.Itoa(sent))
	x.status = http.StatusOK
	x.w.WriteHeader(http.StatusOK)
	_, _ = x.w.Write(b[:sent])
	_ = http.NewResponseController(x.w).Flush()
	<-x.r.Context().Done()
}

// padded is rep with its text grown to about n bytes by repeating its
// filler words, each a completion token; rep itself when it is already
// that long. The chunks are re-split so a stream carries the padding too.
func (rep reply) padded(n, chunks int) reply {
	if n <= len(rep.text) {
		return rep
	}
	var b strings.Builder
	b.Grow(n + 16)
	b.WriteString(rep.text)
	words := rep.words
	for i := 0; b.Len() < n; i++ {
		w := filler[i%len(filler)]
		b.WriteString(" " + w)
		words = append(words, w)
	}
	out := reply{words: words, text: b.String(), truncated: rep.truncated}
	k := max(chunks, 1)
	for i := range k {
		out.chunks = append(out.chunks, out.text[i*len(out.text)/k:(i+1)*len(out.text)/k])
	}
	return out
}

// maxOutputFields are the request fields that ask for output tokens.
var maxOutputFields = [...]string{"max_tokens", "max_completion_tokens", "max_output_tokens"}

// checkMaxOutput answers, as OpenAI does, a request whose output limit is
// not an integer a model can produce: not a whole number, negative, or
// above limit (Config.MaxOutputTokens; 0: above 2^31−1). Of duplicate keys
// the last counts, as it does for the provider. It reports whether the
// request may go on.
func (x *exchange) checkMaxOutput(limit int) bool {
	var fields map[string]json.RawMessage
	if json.Unmarshal(x.body, &fields) != nil {
		return true // answered by the caller's own decode
	}
	if limit <= 0 {
		limit = 1<<31 - 1
	}
	for _, name := range maxOutputFields {
		raw, ok := fields[name]
		if !ok || bytes.Equal(raw, []byte("null")) {
			continue
		}
		n, err := strconv.ParseInt(string(raw), 10, 64)
		switch {
		case err != nil || n < 0:
			x.fail(http.StatusBadRequest, fmt.Sprintf("Invalid '%s': expected an integer, got %s.", name, raw))
			return false
		case n > int64(limit):
			x.fail(http.StatusBadRequest, fmt.Sprintf("%s is too large: %d. This model supports at most %d completion tokens.", name, n, limit))
			return false
		}
	}
	return true
}
