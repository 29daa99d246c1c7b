package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/meterproxy/meterproxy/proxy/usage"
	"github.com/meterproxy/meterproxy/quota/price"
)

// maxBatchObject bounds what the proxy reads of an upload's or a batch's
// answer to learn its id, status and usage: each is a small JSON object
// (a failed batch's errors included); a larger answer passes unread.
const maxBatchObject = 1 << 20

// readSmall reads resp's body whole if it is at most limit bytes, leaving
// resp to pass on the same bytes; nil when it is longer (it then passes
// on as it came).
func readSmall(resp *http.Response, limit int64) []byte {
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	rest := resp.Body
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b), rest), rest}
	if err != nil || int64(len(b)) > limit {
		return nil
	}
	return b
}

// answer reads a successful answer of the batch and file endpoints,
// and reports whether it wrapped the body: an upload's answer names the
// file the meter read (kept for the batches that name it), a creation's
// the batch its reservation goes to, a batch object its status and usage
// (ended: settled), an Anthropic batch's results their usage.
func (b *batches) answer(resp *http.Response, ex *exchange) {
	path := strings.TrimSuffix(resp.Request.URL.Path, "/")
	switch {
	case ex.upload.meter != nil:
		b.keepFile(resp, ex)
	case ex.tally.batch != nil:
		ex.tally.batch.Bind(gjson.GetBytes(readSmall(resp, maxBatchObject), "id").Str)
	case ex.rt.family == familyAnthropic && strings.HasSuffix(path, "/results"):
		b.meterResults(resp, strings.TrimSuffix(strings.TrimPrefix(path, anthropicBatchesPath+"/"), "/results"))
	case strings.HasPrefix(path, openAIBatchesPath+"/") || strings.HasPrefix(path, anthropicBatchesPath+"/"):
		b.object(readSmall(resp, maxBatchObject))
	}
}

// keepFile keeps what the meter read of an upload as the file the
// answer names, before the answer goes on: a batch created on it right
// after finds it.
func (b *batches) keepFile(resp *http.Response, ex *exchange) {
	id := gjson.GetBytes(readSmall(resp, maxBatchObject), "id").Str
	f, ok := ex.upload.meter.result()
	if !ok || id == "" {
		return
	}
	ctx := context.WithoutCancel(resp.Request.Context())
	if err := b.admitter.PutBatchFile(ctx, id, f); err != nil {
		b.log.Warn("budget_store_failed", slog.String("error", err.Error()))
	}
}

// openAIBatchObject is what the proxy reads of an OpenAI batch object.
type openAIBatchObject struct {
	ID            string `json:"id"`
	Object        string `json:"object"`
	Status        string `json:"status"`
	RequestCounts struct {
		Completed int64 `json:"completed"`
	} `json:"request_counts"`
	Usage *struct {
		InputTokens        int64 `json:"input_tokens"`
		OutputTokens       int64 `json:"output_tokens"`
		InputTokensDetails struct {
			CachedTokens int64 `json:"cached_tokens"`
		} `json:"input_tokens_details"`
	} `json:"usage"`
	// Type and ProcessingStatus are an Anthropic message_batch's.
	Type             string `json:"type"`
	ProcessingStatus string `json:"processing_status"`
}

// object ends the batch a batch object (OpenAI's or Anthropic's)
// reports ended: at the usage it reports; with none, at nothing if no
// request of it ran (failed, expired, cancelled, or Anthropic's batch
// ended without a success). One that ran requests and reports no usage
// keeps its reservation (Anthropic's until its results are read).
func (b *batches) object(obj []byte) {
	var o openAIBatchObject
	if obj == nil || json.Unmarshal(obj, &o) != nil {
		return
	}
	switch {
	case o.Object == "batch" && o.Usage != nil && batchEnded(o.Status):
		b.admitter.EndBatch(o.ID, &price.Usage{Input: o.Usage.InputTokens, CacheRead: o.Usage.InputTokensDetails.CachedTokens,
			Output: o.Usage.OutputTokens})
	case o.Object == "batch" && batchEnded(o.Status) && o.Status != "completed" && o.RequestCounts.Completed == 0:
		b.admitter.EndBatch(o.ID, nil)
	case o.Type == "message_batch" && o.ProcessingStatus == "ended" && gjson.GetBytes(obj, "request_counts.succeeded").Int() == 0:
		b.admitter.EndBatch(o.ID, nil)
	}
}

// batchEnded reports whether an OpenAI batch status is final.
func batchEnded(status string) bool {
	switch status {
	case "completed", "failed", "expired", "cancelled":
		return true
	}
	return false
}

// meterResults sums the usage of an Anthropic batch's results (JSONL, one
// line a request: result.type succeeded carries its message and usage)
// as they pass, and ends batch id at that usage once they were read to
// the end; results cut short, or with a line too long to read, end
// nothing.
func (b *batches) meterResults(resp *http.Response, id string) {
	var sum price.Usage
	whole := true
	ls := newLineSplitter(b.bodies.budget, func(line []byte) {
		r := gjson.GetBytes(line, "result")
		if r.Get("type").Str != "succeeded" {
			return
		}
		m := usage.NewMeter(usage.Messages, "application/json", 0)
		_, _ = m.Write([]byte(r.Get("message").Raw))
		u := m.Finish(true)
		if u.Estimated {
			whole = false
			return
		}
		sum.Input, sum.CacheRead = usage.AddTokens(sum.Input, u.Input), usage.AddTokens(sum.CacheRead, u.CacheRead)
		sum.CacheWrite, sum.Output = usage.AddTokens(sum.CacheWrite, u.CacheWrite), usage.AddTokens(sum.Output, u.Output)
	}, func(int64) { whole = false })
	resp.Body = &meteredLines{ReadCloser: resp.Body, lines: ls, done: func(complete bool) {
		if complete && whole && ls.failed == nil {
			b.admitter.EndBatch(id, &sum)
		}
	}}
}

// meteredLines passes a response body to a lineSplitter as it is read,
// and reports once whether it was read to the end.
type meteredLines struct {
	io.ReadCloser
	lines *lineSplitter
	done  func(complete bool)
	ended bool
}

// Read implements io.Reader.
func (b *meteredLines) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		_, _ = b.lines.Write(p[:n])
	}
	if err == io.EOF && !b.ended {
		b.ended = true
		_ = b.lines.Close()
		b.done(true)
	}
	return n, err
}

// Close implements io.Closer.
func (b *meteredLines) Close() error {
	if !b.ended {
		b.ended = true
		_ = b.lines.Close()
		b.done(false)
	}
	return b.ReadCloser.Close()
}
