package fakeprovider

import (
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
)

// imageList is an images answer as DALL·E's are: the image in base64, no
// usage.
type imageList struct {
	Created int64       `json:"created"`
	Data    []imageItem `json:"data"`
}

type imageItem struct {
	B64JSON string `json:"b64_json"`
}

// image answers POST /v1/images/generations with one "image": bytes
// derived from the request body, in base64.
func (x *exchange) image() {
	sum := sha256.Sum256(x.body)
	x.writeJSON(http.StatusOK, imageList{Created: x.now.Unix(), Data: []imageItem{{B64JSON: base64.StdEncoding.EncodeToString(sum[:])}}})
}

// speech answers POST /v1/audio/speech as OpenAI does: the audio itself
// (audio/mpeg), no JSON and no usage — here bytes derived from the body.
func (x *exchange) speech() {
	sum := sha256.Sum256(x.body)
	audio := append([]byte("ID3"), sum[:]...)
	h := x.w.Header()
	h.Set("Content-Type", "audio/mpeg")
	h.Set("Content-Length", strconv.Itoa(len(audio)))
	x.status = http.StatusOK
	x.w.WriteHeader(http.StatusOK)
	_, _ = x.w.Write(audio) // a client gone away is not the provider's problem
}
