package proxy

import (
	"bytes"
	"fmt"
	"io"
	"mime/multipart"
	"strings"
	"testing"

	"github.com/meterproxy/meterproxy/quota/price"
)

// line is one batch input file line for model, capped at maxTokens
// (none when 0), its body padded to about pad bytes.
func line(model string, maxTokens, pad int) string {
	limit := ""
	if maxTokens > 0 {
		limit = fmt.Sprintf(`"max_tokens":%d,`, maxTokens)
	}
	return fmt.Sprintf(`{"custom_id":"x","method":"POST","url":"/v1/chat/completions","body":{"model":%q,%s"messages":[{"role":"user","content":%q}]}}`,
		model, limit, strings.Repeat("a", pad))
}

// form is an upload's multipart body: purpose, then the file.
func form(purpose, file string) (body []byte, contentType string) {
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	_ = w.WriteField("purpose", purpose)
	fw, _ := w.CreateFormFile("file", "in.jsonl")
	_, _ = fw.Write([]byte(file))
	_ = w.Close()
	return b.Bytes(), w.FormDataContentType()
}

// meterUpload feeds body to an upload meter in reads of chunk bytes, as
// the transport reads it, and returns what it metered.
func meterUpload(t *testing.T, body []byte, contentType string, chunk int, budget *memBudget) (price.BatchFile, bool) {
	t.Helper()
	m := newUploadMeter(contentType, budget)
	if m == nil {
		t.Fatal("no meter for a multipart form")
	}
	for len(body) > 0 {
		n := min(chunk, len(body))
		m.feed(body[:n], nil)
		body = body[n:]
	}
	m.feed(nil, io.EOF)
	return m.result()
}

// TestUploadMeter: an upload's file is metered line by line as it streams
// through, whatever the reads' sizes: by model, each line's input
// estimate (its body's bytes / 4), its output cap or none. A line longer
// than maxBatchLine, a repeated key, a body the proxy and the provider
// could read differently, or no memory for a line leave the file
// unmetered; a purpose other than batch, or a form cut short, keep
// nothing; the memory a line held is given back.
func TestUploadMeter(t *testing.T) {
	two := line("gpt-4o", 100, 10) + "\n\n" + line("gpt-4o", 0, 20) + "\r\n" + line("gpt-4o-mini", 50, 0) // no final newline
	tests := []struct {
		name      string
		purpose   string
		file      string
		memory    int64
		want      []price.BatchModel // nil: not kept
		unmetered string
	}{
		{"three lines, two models", "batch", two, 64 << 20, []price.BatchModel{
			{Model: "gpt-4o", Lines: 2, Output: 100, Uncapped: 1},
			{Model: "gpt-4o-mini", Lines: 1, Output: 50},
		}, ""},
		{"another purpose", "fine-tune", two, 64 << 20, nil, ""},
		{"a line too long", "batch", line("gpt-4o", 10, maxBatchLine) + "\n" + line("gpt-4o", 10, 0), 64 << 20, []price.BatchModel{
			{Model: "gpt-4o", Lines: 1, Output: 10},
		}, "line 1 is"},
		{"body twice", "batch", `{"body":{"model":"gpt-4o-mini","max_tokens":1},"body":{"model":"gpt-4o","max_tokens":100000}}`, 64 << 20,
			[]price.BatchModel{}, `line 1: a key is repeated: "body"`},
		{"max_tokens twice", "batch", `{"body":{"model":"gpt-4o","max_tokens":1,"max_tokens":100000}}`, 64 << 20,
			[]price.BatchModel{}, "line 1:"},
		{"no memory for a line", "batch", two, 1024, []price.BatchModel{}, "no memory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			budget := newMemBudget(tt.memory)
			body, ct := form(tt.purpose, tt.file)
			for _, chunk := range []int{1, 7, 4096, len(body)} {
				if chunk == 1 && len(body) > 1<<20 {
					continue // a byte a read of megabytes is slow under -race, and says nothing more
				}
				f, ok := meterUpload(t, body, ct, chunk, budget)
				if ok != (tt.want != nil) {
					t.Fatalf("chunk %d: kept %v, want %v", chunk, ok, tt.want != nil)
				}
				if !ok {
					continue
				}
				if !strings.Contains(f.Unmetered, tt.unmetered) || (tt.unmetered == "") != (f.Unmetered == "") {
					t.Errorf("chunk %d: unmetered %q, want %q", chunk, f.Unmetered, tt.unmetered)
				}
				if len(f.Models) != len(tt.want) {
					t.Fatalf("chunk %d: models %+v, want %+v", chunk, f.Models, tt.want)
				}
				for i, m := range f.Models {
					w := tt.want[i]
					if m.Model != w.Model || m.Lines != w.Lines || m.Output != w.Output || m.Uncapped != w.Uncapped || m.Input <= 0 {
						t.Errorf("chunk %d: model %+v, want %+v with input counted", chunk, m, w)
					}
				}
				if n := budget.inUse(); n != 0 {
					t.Errorf("chunk %d: %d bytes still charged to the memory budget", chunk, n)
				}
			}
		})
	}
}

// TestUploadMeterForms: a form cut short, a body that is no form, a form
// of too many parts are not metered.
func TestUploadMeterForms(t *testing.T) {
	two := line("gpt-4o", 100, 10) + "\n" + line("gpt-4o", 0, 20)
	t.Run("cut short", func(t *testing.T) {
		body, ct := form("batch", two)
		m := newUploadMeter(ct, newMemBudget(64<<20))
		m.feed(body[:len(body)/2], nil)
		m.feed(nil, errBodyTimeout)
		if _, ok := m.result(); ok {
			t.Error("a form cut short was kept")
		}
	})
	t.Run("not a form", func(t *testing.T) {
		if m := newUploadMeter("application/jsonl", newMemBudget(1)); m != nil {
			t.Error("a meter for a body that is no multipart form")
		}
	})
	t.Run("too many parts", func(t *testing.T) {
		var b bytes.Buffer
		w := multipart.NewWriter(&b)
		for i := range maxUploadParts + 1 {
			_ = w.WriteField(fmt.Sprint("f", i), "x")
		}
		_ = w.WriteField("purpose", "batch")
		fw, _ := w.CreateFormFile("file", "in.jsonl")
		_, _ = fw.Write([]byte(two))
		_ = w.Close()
		if _, ok := meterUpload(t, b.Bytes(), w.FormDataContentType(), 512, newMemBudget(64<<20)); ok {
			t.Error("a form of too many parts was kept")
		}
	})
}

// TestMeterAnthropicBatch: an Anthropic batch's body is metered by its
// requests' params; a body the proxy could read otherwise than the
// provider is unmetered.
func TestMeterAnthropicBatch(t *testing.T) {
	tests := []struct {
		name, body string
		lines      int64
		unmetered  bool
	}{
		{"two", `{"requests":[{"custom_id":"a","params":{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[]}},{"custom_id":"b","params":{"model":"claude-sonnet-4-5","max_tokens":5}}]}`, 2, false},
		{"requests twice", `{"requests":[],"requests":[{"params":{"model":"m","max_tokens":9}}]}`, 0, true},
		{"params twice", `{"requests":[{"params":{"model":"m","max_tokens":1},"params":{"model":"m","max_tokens":9999}}]}`, 0, true},
		{"no params", `{"requests":[{"custom_id":"a"}]}`, 0, true},
		{"not json", `{"requests":`, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := meterAnthropicBatch([]byte(tt.body))
			if f.Lines() != tt.lines || (f.Unmetered != "") != tt.unmetered {
				t.Errorf("%+v, want %d lines, unmetered %v", f, tt.lines, tt.unmetered)
			}
			if !tt.unmetered && f.Models[0].Output != 15 {
				t.Errorf("output caps %d, want 15", f.Models[0].Output)
			}
		})
	}
}
