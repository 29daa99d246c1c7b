package usage

import (
	"bytes"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestStripUsageChunk(t *testing.T) {
	usageEvent := "event: usage\nid: 7\n: note\n" + chunkUsage
	tests := []struct {
		name, in, want string
	}{
		{"openai", chatStreamUsage, chatStreamNoUsage},
		{"CRLF", crlf(chatStreamUsage), crlf(chatStreamNoUsage)},
		{"lone CR", cr(chatStreamUsage), cr(chatStreamNoUsage)},
		{"data: without space", nospace(chatStreamUsage), nospace(chatStreamNoUsage)},
		{"no usage chunk", chatStreamNoUsage, chatStreamNoUsage},
		{"azure filter chunk kept", azureStreamUsage, sse(azureFilterNullUsage, azureContent, azureStop, chunkDone)},
		{"vllm: only the empty-choices chunk", vllmStream, sse(vllm1, vllm2, vllm3, vllm4, chunkDone)},
		{"comments and fields of the chunk's event go with it", sse(": hi", chunkHello, usageEvent, chunkDone), sse(": hi", chunkHello, chunkDone)},
		{"comment between events kept", sse(chunkHello) + ": keep-alive\n" + sse(chunkUsage, chunkDone), sse(chunkHello) + ": keep-alive\n" + sse(chunkDone)},
		{"two data lines kept", sse(chunkUsage + "\n" + chunkDone), sse(chunkUsage + "\n" + chunkDone)},
		{"multi-line JSON kept", sse(strings.Replace(chunkUsage, `,"usage":`, ",\ndata: \"usage\":", 1)), sse(strings.Replace(chunkUsage, `,"usage":`, ",\ndata: \"usage\":", 1))},
		{"usage null kept", sse(`data: {"object":"chat.completion.chunk","choices":[],"usage":null}`), sse(`data: {"object":"chat.completion.chunk","choices":[],"usage":null}`)},
		{"choices not empty kept", sse(vllm4), sse(vllm4)},
		{"other object kept", sse(`data: {"object":"response","choices":[],"usage":{"prompt_tokens":1}}`), sse(`data: {"object":"response","choices":[],"usage":{"prompt_tokens":1}}`)},
		{"invalid JSON kept", sse(`data: {"choices":[],"usage":{"prompt_tokens":1}`), sse(`data: {"choices":[],"usage":{"prompt_tokens":1}`)},
		{"spaced empty array", sse(`data: { "choices" : [ ], "usage" : {"prompt_tokens":1} }`, chunkDone), sse(chunkDone)},
		{"anthropic untouched", anthropicStream, anthropicStream},
		{"responses untouched", responsesStream, responsesStream},
		{"not an event stream", chatJSON, chatJSON},
		{"JSON error without newline", openAIErrorJSON, openAIErrorJSON},
		{"field name only starting like data", sse("data0", chunkUsage), sse("data0")},
		// A line no event-stream field starts passes its event at once, so
		// a body that is not an event stream is never held.
		{"unknown field before the chunk passes it", sse("x: y\n" + chunkUsage), sse("x: y\n" + chunkUsage)},
		{"unknown field after the chunk goes with it", sse(chunkUsage+"\nx: y", chunkDone), sse(chunkDone)},
		{"data without colon", sse("data", chunkUsage, chunkDone), sse("data", chunkDone)},
		{"empty", "", ""},
	}
	for _, tt := range tests {
		for _, size := range chunkSizes {
			t.Run(fmt.Sprintf("%s/%d", tt.name, size), func(t *testing.T) {
				var out bytes.Buffer
				if err := writeChunks(StripUsageChunk(&out), []byte(tt.in), size); err != nil {
					t.Fatal(err)
				}
				if got := out.String(); got != tt.want {
					t.Errorf("got\n%q\nwant\n%q", got, tt.want)
				}
			})
		}
	}
}

// TestStripUsageChunkPassesAtOnce checks that each event reaches w in the
// Write that completes it, and a line that cannot be the chunk at once.
func TestStripUsageChunkPassesAtOnce(t *testing.T) {
	var out bytes.Buffer
	w := StripUsageChunk(&out)
	want := ""
	for _, ev := range []string{": keep-alive\n", sse(chunkRole), sse(chunkHello), "event: x\n" + sse(chunkWorld), sse(chunkUsage), "data: [DO"} {
		if _, err := w.Write([]byte(ev)); err != nil {
			t.Fatal(err)
		}
		if ev != sse(chunkUsage) {
			want += ev
		}
		if out.String() != want {
			t.Fatalf("after %q: got\n%q\nwant\n%q", ev, out.String(), want)
		}
	}
}

// flushRecorder records writes and flushes in order.
type flushRecorder struct {
	bytes.Buffer
	log []string
}

func (f *flushRecorder) Flush() { f.log = append(f.log, fmt.Sprintf("flush@%d", f.Len())) }

func TestStripUsageChunkFlush(t *testing.T) {
	t.Run("flusher", func(t *testing.T) {
		rec := &flushRecorder{}
		w := StripUsageChunk(rec)
		for _, ev := range []string{sse(chunkHello), sse(chunkUsage), sse(chunkDone)} {
			_, _ = w.Write([]byte(ev))
			w.(interface{ Flush() }).Flush()
		}
		n1, n2 := len(sse(chunkHello)), len(sse(chunkHello))+len(sse(chunkDone))
		want := []string{fmt.Sprintf("flush@%d", n1), fmt.Sprintf("flush@%d", n1), fmt.Sprintf("flush@%d", n2)}
		if fmt.Sprint(rec.log) != fmt.Sprint(want) {
			t.Errorf("flushes %v, want %v", rec.log, want)
		}
	})
	t.Run("response writer", func(t *testing.T) {
		rec := httptest.NewRecorder()
		w := StripUsageChunk(rec)
		_, _ = w.Write([]byte(sse(chunkHello)))
		w.(interface{ Flush() }).Flush()
		if !rec.Flushed || rec.Body.String() != sse(chunkHello) {
			t.Errorf("flushed %v, body %q", rec.Flushed, rec.Body.String())
		}
	})
	t.Run("plain writer", func(t *testing.T) {
		var out bytes.Buffer
		w := StripUsageChunk(&out)
		w.(interface{ Flush() }).Flush() // nothing to flush: does nothing
		if _, err := w.Write([]byte(sse(chunkDone))); err != nil || out.String() != sse(chunkDone) {
			t.Errorf("after Flush: %v, %q", err, out.String())
		}
	})
}

// failWriter fails every write after the first n bytes.
type failWriter struct{ n int }

var errWrite = errors.New("client gone")

func (f *failWriter) Write(p []byte) (int, error) {
	if len(p) > f.n {
		return 0, errWrite
	}
	f.n -= len(p)
	return len(p), nil
}

func TestStripUsageChunkWriteError(t *testing.T) {
	w := StripUsageChunk(&failWriter{n: 10})
	if _, err := w.Write([]byte(sse(chunkHello))); !errors.Is(err, errWrite) {
		t.Fatalf("first write: %v", err)
	}
	if n, err := w.Write([]byte(sse(chunkDone))); n != 0 || !errors.Is(err, errWrite) {
		t.Errorf("after failure: %d, %v", n, err)
	}
}

func TestStripUsageChunkBounded(t *testing.T) {
	// A data line that may be the chunk is held only up to maxHold.
	var out bytes.Buffer
	s := StripUsageChunk(&out).(*stripper)
	long := []byte(`data: {"choices":[],"pad":"` + strings.Repeat("x", 2*maxHold))
	for i := 0; i < len(long); i += 4096 {
		_, _ = s.Write(long[i:min(i+4096, len(long))])
		if len(s.held) > maxHold+4096 || len(s.line.text) > maxHold+4096 {
			t.Fatalf("holding %d bytes, text %d", len(s.held), len(s.line.text))
		}
	}
	if out.Len()+len(s.held) != len(long) || out.Len() < len(long)-4096 {
		t.Errorf("passed %d of %d bytes", out.Len(), len(long))
	}
}
