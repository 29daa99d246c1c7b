package fakeprovider

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
)

// defaultEmbeddingDims is the vector length when a request names none.
const defaultEmbeddingDims = 8

// embeddingRequest is the part of an embeddings request the fake reads.
type embeddingRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	Dimensions     int             `json:"dimensions"`
	EncodingFormat string          `json:"encoding_format"`
}

type embeddingList struct {
	Object string          `json:"object"`
	Data   []embeddingItem `json:"data"`
	Model  string          `json:"model"`
	Usage  embeddingUsage  `json:"usage"`
}

type embeddingItem struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"` // []float32, or a base64 string
}

type embeddingUsage struct {
	PromptTokens int `json:"prompt_tokens"`
	TotalTokens  int `json:"total_tokens"`
}

// embeddings answers POST /v1/embeddings with one vector per input,
// derived from the input's bytes.
func (x *exchange) embeddings() {
	var req embeddingRequest
	if err := decodeLenient(x.body, &req); err != nil {
		x.failJSON(err)
		return
	}
	dims := req.Dimensions
	if dims <= 0 || dims > 4096 {
		dims = defaultEmbeddingDims
	}
	in := promptTokens(x.body)
	out := embeddingList{Object: "list", Model: modelOr(req.Model), Usage: embeddingUsage{in, in}}
	for i, item := range embeddingInputs(req.Input) {
		v := vector(item, dims)
		out.Data = append(out.Data, embeddingItem{Object: "embedding", Index: i, Embedding: encodeVector(v, req.EncodingFormat)})
	}
	if out.Data == nil {
		out.Data = []embeddingItem{}
	}
	x.writeJSON(http.StatusOK, out)
}

// embeddingInputs splits input into its items: a string or token array is
// one item, an array of those one each.
func embeddingInputs(raw json.RawMessage) []json.RawMessage {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '[' {
		if countItems(raw) == 0 {
			return nil
		}
		return []json.RawMessage{raw}
	}
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil || len(items) == 0 {
		return nil
	}
	if first := bytes.TrimSpace(items[0]); len(first) > 0 && first[0] != '"' && first[0] != '[' {
		return []json.RawMessage{raw} // one array of token ids
	}
	return items
}

// vector derives dims values in [-1, 1] from the item's bytes.
func vector(item []byte, dims int) []float32 {
	v := make([]float32, dims)
	sum := sha256.Sum256(item)
	for i := range v {
		if i > 0 && i%16 == 0 {
			sum = sha256.Sum256(sum[:])
		}
		u := binary.BigEndian.Uint16(sum[2*(i%16):])
		v[i] = float32(math.Round((float64(u)/32767.5-1)*1e4) / 1e4)
	}
	return v
}

// encodeVector returns v as a float array, or as base64 of little-endian
// float32s when format is "base64".
func encodeVector(v []float32, format string) any {
	if format != "base64" {
		return v
	}
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return base64.StdEncoding.EncodeToString(b)
}
