package fakeprovider

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
)

// defaultModel is reported when a request names no model.
const defaultModel = "fake-model"

// filler are the fixed words after "echo: <n> messages".
var filler = [...]string{"this", "is", "a", "deterministic", "fake", "reply"}

// reply is the deterministic text of one answer.
type reply struct {
	words     []string // one completion token each
	chunks    []string // the text split for streaming; they concatenate to text
	text      string
	truncated bool // cut to the request's output-token limit
}

// newReply builds "echo: <n> messages" plus filler, at least chunks words
// long, then cut to limit words when limit > 0.
func newReply(n, limit, chunks int) reply {
	words := []string{"echo:", strconv.Itoa(n), "messages"}
	for i := 0; len(words) < 3+len(filler) || len(words) < chunks; i++ {
		words = append(words, filler[i%len(filler)])
	}
	r := reply{}
	if limit > 0 && limit < len(words) {
		words, r.truncated = words[:limit], true
	}
	r.words = words
	r.text = strings.Join(words, " ")
	k := min(chunks, len(words))
	for i := range k {
		part := strings.Join(words[i*len(words)/k:(i+1)*len(words)/k], " ")
		if i > 0 {
			part = " " + part
		}
		r.chunks = append(r.chunks, part)
	}
	return r
}

// promptTokens estimates input tokens as a quarter of the body bytes, at
// least one.
func promptTokens(body []byte) int {
	return max((len(body)+3)/4, 1)
}

// bodyID is a deterministic id: prefix plus 24 hex digits of the body's
// SHA-256.
func bodyID(prefix string, body []byte) string {
	sum := sha256.Sum256(body)
	return prefix + hex.EncodeToString(sum[:12])
}

// decodeLenient unmarshals a JSON object into v. Fields of the wrong type
// are left zero; only a body that is not a JSON object is an error.
func decodeLenient(body []byte, v any) error {
	err := json.Unmarshal(body, v)
	if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok && te.Field != "" {
		return nil
	}
	if t := bytes.TrimSpace(body); err == nil && (len(t) == 0 || t[0] != '{') {
		return errors.New("the body is not a JSON object")
	}
	return err
}

// countItems counts a string-or-array field: a string is one item, an
// array its length, anything else none.
func countItems(raw json.RawMessage) int {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0:
		return 0
	case raw[0] == '"':
		return 1
	case raw[0] == '[':
		var items []json.RawMessage
		if json.Unmarshal(raw, &items) != nil {
			return 0
		}
		return len(items)
	}
	return 0
}

// reasoningOf is the part of output tokens a reply of model reports as
// reasoning (completion_tokens_details / output_tokens_details
// reasoning_tokens): half, rounded down, for OpenAI's reasoning models —
// the o-series ("o1", "o3-mini", "o4-mini-2025-04-16", …) and "gpt-5…" —
// and none for the others. The reasoning is counted within the output, as
// OpenAI counts it, not added to it.
func reasoningOf(model string, output int) int {
	o := len(model) > 1 && model[0] == 'o' && '0' <= model[1] && model[1] <= '9'
	if o || strings.HasPrefix(model, "gpt-5") {
		return output / 2
	}
	return 0
}

func modelOr(m string) string {
	if m == "" {
		return defaultModel
	}
	return m
}
