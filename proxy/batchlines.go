package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/meterproxy/meterproxy/proxy/usage"
	"github.com/meterproxy/meterproxy/quota/price"
	"github.com/tidwall/gjson"
)

// maxBatchLine is the longest line of a batch file (or of a batch's
// results) the proxy reads: 8 MiB, a request of some two million tokens
// of text. Its bytes are charged to server.max_body_memory_bytes as the
// line arrives; a longer line is not read, and a file that has one is
// not metered (a budgeted batch on it is refused).
const maxBatchLine = 8 << 20

// lineSplitter hands each line of a stream, without its newline, to line,
// holding at most maxBatchLine bytes of one line at a time, charged to the
// bodies' memory budget as a bulk body's are. A longer line goes to
// overlong instead, by its length; once memory is refused, nothing more
// is read (failed). Close hands the last line and gives the memory back.
type lineSplitter struct {
	buf      *body
	line     func([]byte)
	overlong func(n int64)
	skipped  int64 // bytes of an overlong line so far; -1 when not in one
	failed   error
}

func newLineSplitter(budget *memBudget, line func([]byte), overlong func(int64)) *lineSplitter {
	return &lineSplitter{buf: &body{budget: budget}, line: line, overlong: overlong, skipped: -1}
}

// Write implements io.Writer; it never fails (a failure is kept in failed).
func (s *lineSplitter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 && s.failed == nil {
		chunk, rest, ended := bytes.Cut(p, []byte{'\n'})
		s.add(chunk)
		if ended {
			s.end()
		}
		p = rest
	}
	return n, nil
}

// add appends chunk to the line being read, or counts it past the limit.
func (s *lineSplitter) add(chunk []byte) {
	if s.skipped >= 0 {
		s.skipped += int64(len(chunk))
		return
	}
	b := s.buf
	for cap(b.buf)-len(b.buf) < len(chunk) {
		if cap(b.buf) >= maxBatchLine {
			s.skipped = int64(len(b.buf) + len(chunk))
			b.buf = b.buf[:0]
			return
		}
		if err := b.grow(maxBatchLine, false); err != nil {
			s.failed = err
			return
		}
	}
	b.buf = append(b.buf, chunk...)
}

// end hands the line read so far to line, or its length to overlong.
func (s *lineSplitter) end() {
	if s.skipped >= 0 {
		s.overlong(s.skipped)
		s.skipped = -1
		return
	}
	if line := bytes.TrimSpace(s.buf.buf); len(line) > 0 {
		s.line(line)
	}
	s.buf.buf = s.buf.buf[:0]
}

// Close hands the last line, unless reading failed, and releases the
// buffer's memory.
func (s *lineSplitter) Close() error {
	if s.failed == nil {
		s.end()
	}
	s.buf.release()
	s.buf.buf = nil
	return nil
}

// fileMeter meters an OpenAI batch input file's JSONL lines as they pass
// (/v1/files, purpose batch): each line's request body's model, output cap
// and size (usage.ReadRequest, usage.EstimateInput), into a BatchFile.
type fileMeter struct {
	file  price.BatchFile
	lines int64
	// unit names a request in a reason: "line" (an input file's), or
	// "request" (a batch body's).
	unit string
}

// meterLine meters one line: {"custom_id", "method", "url", "body"}.
func (m *fileMeter) meterLine(line []byte) {
	m.lines++
	keys, err := topLevel(line, "body", "url")
	if err != nil {
		m.file.Fail(fmt.Sprintf("line %d: %v", m.lines, err))
		return
	}
	m.meterRequest(keys[0], strings.HasSuffix(keys[1].Str, "/embeddings"))
}

// overlong marks the file unmetered for a line longer than maxBatchLine.
func (m *fileMeter) overlong(n int64) {
	m.lines++
	m.file.Fail(fmt.Sprintf("line %d is %d bytes, longer than the %d the proxy reads", m.lines, n, maxBatchLine))
}

// meterRequest counts one request body (a line's body, an Anthropic
// batch request's params); embedding says it generates no output.
func (m *fileMeter) meterRequest(body gjson.Result, embedding bool) {
	if !body.IsObject() {
		m.file.Fail(fmt.Sprintf("%s %d has no JSON object body", m.unitName(), m.lines))
		return
	}
	req, err := usage.ReadRequest("application/json", []byte(body.Raw))
	if err != nil {
		m.file.Fail(fmt.Sprintf("%s %d: %v", m.unitName(), m.lines, err))
		return
	}
	output := req.OutputCeiling()
	if embedding {
		output = -1
	}
	m.file.Add(req.Model, usage.EstimateInput([]byte(body.Raw)), output)
}

// unitName is what a reason calls one of the meter's requests.
func (m *fileMeter) unitName() string {
	if m.unit == "" {
		return "line"
	}
	return m.unit
}

// errDuplicate is a key a line or body names twice, which the proxy and
// the provider could read differently (the first, the last).
var errDuplicate = errors.New("a key is repeated")

// topLevel returns the values of names at the top level of the JSON
// object doc, each compared as encoding/json matches keys (regardless of
// case); an error when doc is not an object or names one twice.
func topLevel(doc []byte, names ...string) ([]gjson.Result, error) {
	d := gjson.ParseBytes(doc)
	if !d.IsObject() {
		return nil, errors.New("not a JSON object")
	}
	out := make([]gjson.Result, len(names))
	seen := make([]bool, len(names))
	var err error
	d.ForEach(func(k, v gjson.Result) bool {
		for i, name := range names {
			if strings.EqualFold(k.Str, name) {
				if seen[i] {
					err = fmt.Errorf("%w: %q", errDuplicate, name)
					return false
				}
				seen[i], out[i] = true, v
			}
		}
		return true
	})
	return out, err
}

// meterAnthropicBatch meters an Anthropic batch's body, held whole:
// {"requests": [{"custom_id", "params": {model, max_tokens, …}}, …]}.
func meterAnthropicBatch(body []byte) price.BatchFile {
	m := fileMeter{unit: "request"}
	keys, err := topLevel(body, "requests")
	if err != nil || !keys[0].IsArray() {
		m.file.Fail("the body has no requests array the proxy could read")
		return m.file
	}
	keys[0].ForEach(func(_, r gjson.Result) bool {
		m.lines++
		params, err := topLevel([]byte(r.Raw), "params")
		if err != nil {
			m.file.Fail(fmt.Sprintf("request %d: %v", m.lines, err))
			return false
		}
		m.meterRequest(params[0], false)
		return m.file.Unmetered == ""
	})
	return m.file
}
