package usage

import "bytes"

// Bounds of what a stream may make the meter hold.
const (
	// maxLine is the longest SSE line kept; a longer one is skipped and its
	// event dropped. Provider events are a few KiB.
	maxLine = 1 << 20
	// maxEventData bounds the joined data lines of one event, so many
	// lines under maxLine cannot add up without limit.
	maxEventData = 1 << 20
	// keepCap is the buffer capacity kept between events; a buffer grown
	// beyond it by one large event is released after that event.
	keepCap = 64 << 10
)

// lineEnd says how a piece cut by lineSplitter.cut ends.
type lineEnd uint8

const (
	// lineOpen means the input ran out inside a line: the piece continues it.
	lineOpen lineEnd = iota
	// lineDone means the piece ends its line, with LF, CRLF or a lone CR.
	lineDone
	// lineLF means the piece is only the LF completing a CRLF whose CR
	// ended the previous piece; it belongs to that line's end.
	lineLF
)

// lineSplitter cuts a byte stream into SSE lines, which end with CRLF, LF or
// a lone CR, wherever the stream was split into writes. The zero value is
// ready at the start of a stream.
type lineSplitter struct {
	// afterCR says the last piece ended with a CR at the end of its input,
	// so an LF starting the next input completes that line end.
	afterCR bool
}

// cut returns the first piece of p, which must not be empty: text is the
// line content in it (the line end excluded), n the bytes of p it spans.
func (s *lineSplitter) cut(p []byte) (text []byte, n int, end lineEnd) {
	if s.afterCR {
		s.afterCR = false
		if p[0] == '\n' {
			return nil, 1, lineLF
		}
	}
	line := p
	lf := bytes.IndexByte(p, '\n')
	if lf >= 0 {
		line = p[:lf]
	}
	if cr := bytes.IndexByte(line, '\r'); cr >= 0 {
		switch {
		case cr+1 == len(p):
			s.afterCR = true
			return p[:cr], cr + 1, lineDone
		case p[cr+1] == '\n':
			return p[:cr], cr + 2, lineDone
		default:
			return p[:cr], cr + 1, lineDone
		}
	}
	if lf >= 0 {
		return p[:lf], lf + 1, lineDone
	}
	return p, len(p), lineOpen
}

// eventHandler receives the events an sseReader assembles. name is the
// event: field (empty when absent), data the data: lines joined with LF.
// Both are valid only during the call.
type eventHandler interface {
	event(name, data []byte)
}

// sseReader assembles server-sent events from pieces of a stream, holding
// at most one line and one event's data, each bounded. The zero value is
// ready at the start of a stream.
type sseReader struct {
	split lineSplitter
	// line is the start of the current line when it spans writes.
	line []byte
	// skip says the current line outgrew maxLine: the rest of it is dropped.
	skip bool
	// name and data are the current event's fields; hasData says a data
	// line was seen (data may be empty).
	name, data []byte
	hasData    bool
	// broken says the event lost a line to a bound; it is not dispatched.
	broken bool
}

// feed reads p, dispatching each event that ends in it to h.
func (r *sseReader) feed(p []byte, h eventHandler) {
	for len(p) > 0 {
		text, n, end := r.split.cut(p)
		p = p[n:]
		switch {
		case end == lineLF:
		case r.skip:
			if end == lineDone {
				r.skip = false
			}
		case len(r.line)+len(text) > maxLine:
			r.line, r.broken = shrink(r.line), true
			r.skip = end == lineOpen
		case end == lineOpen:
			r.line = append(r.line, text...)
		case len(r.line) > 0:
			r.line = append(r.line, text...)
			r.field(r.line, h)
			r.line = shrink(r.line)
		default:
			r.field(text, h)
		}
	}
}

// end is called at a clean end of stream. A final event whose blank line
// never came is dispatched anyway if its last line was whole; providers end
// every event properly, and a lenient reader loses nothing by it.
func (r *sseReader) end(h eventHandler) {
	if !r.skip && len(r.line) == 0 {
		r.dispatch(h)
	}
}

// field applies one whole line of the stream.
func (r *sseReader) field(line []byte, h eventHandler) {
	if len(line) == 0 {
		r.dispatch(h)
		return
	}
	name, value := line, []byte(nil)
	if i := bytes.IndexByte(line, ':'); i >= 0 {
		name, value = line[:i], line[i+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	switch string(name) {
	case "data":
		if r.hasData {
			if len(r.data)+1+len(value) > maxEventData {
				r.broken = true
				return
			}
			r.data = append(r.data, '\n')
		}
		r.data, r.hasData = append(r.data, value...), true
	case "event":
		r.name = append(r.name[:0], value...)
	}
	// Comments (an empty name), id:, retry: and unknown fields say nothing
	// about usage.
}

// dispatch ends the current event, passing it to h when it is whole.
func (r *sseReader) dispatch(h eventHandler) {
	if r.hasData && !r.broken {
		h.event(r.name, r.data)
	}
	r.name, r.data = shrink(r.name), shrink(r.data)
	r.hasData, r.broken = false, false
}

// shrink empties b for reuse, releasing it if one large use grew it.
func shrink(b []byte) []byte {
	if cap(b) > keepCap {
		return nil
	}
	return b[:0]
}
