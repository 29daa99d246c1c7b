package usage

import "bytes"

// Bounds of what a stream may make the meter hold besides its event's
// data (a window).
const (
	// maxFieldName is the longest field name read: "event", "data", "id"
	// and "retry" are shorter, so a line whose first bytes hold no colon
	// is a field no reader knows, and is skipped.
	maxFieldName = 8
	// maxEventName is the longest event name kept; a longer one is
	// truncated, and so names no event the meter reads.
	maxEventName = 64
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
// event: field (empty when absent), data the data: lines joined with LF,
// whole or in part (see window). Both are valid only during the call.
type eventHandler interface {
	event(name []byte, data *window)
}

// fieldKind is what the current line of a stream is, once its field name
// is known.
type fieldKind uint8

const (
	fieldUnknown fieldKind = iota // the name is still arriving
	fieldData                     // data: its value joins the event's data
	fieldEvent                    // event: its value names the event
	fieldSkip                     // a comment, id:, retry: or a field no reader knows
)

// sseReader assembles server-sent events from pieces of a stream, holding
// at most the start of a line (maxFieldName bytes), an event name
// (maxEventName) and one event's data in a window — its value bytes go
// straight there, so no line is kept whole. The zero value is ready at the
// start of a stream.
type sseReader struct {
	split lineSplitter
	// kind is the current line's field; start its first bytes until the
	// name is known. inLine says part of the line has arrived; space that
	// the optional space after the colon may still come.
	kind  fieldKind
	start []byte
	inLine,
	space bool
	// name and data are the current event's fields; hasData says a data
	// line was seen (data may be empty).
	name    []byte
	data    window
	hasData bool
}

// feed reads p, dispatching each event that ends in it to h.
func (r *sseReader) feed(p []byte, h eventHandler) {
	for len(p) > 0 {
		text, n, end := r.split.cut(p)
		p = p[n:]
		if end == lineLF {
			continue
		}
		r.piece(text)
		if end == lineDone {
			r.lineEnd(h)
		}
	}
}

// piece reads text, the next bytes of the current line.
func (r *sseReader) piece(text []byte) {
	if len(text) == 0 {
		return
	}
	r.inLine = true
	if r.kind == fieldUnknown {
		name, value, colon := bytes.Cut(text, []byte{':'})
		if len(r.start)+len(name) > maxFieldName {
			r.kind = fieldSkip
			return
		}
		r.start = append(r.start, name...)
		if !colon {
			return
		}
		r.startField(r.start)
		text = value
	}
	r.value(text)
}

// startField begins a line's value once its field name is known.
func (r *sseReader) startField(name []byte) {
	switch string(name) {
	case "data":
		r.kind = fieldData
		if r.hasData {
			r.data.write([]byte{'\n'})
		}
		r.hasData = true
	case "event":
		r.kind = fieldEvent
		r.name = r.name[:0]
	default: // comments (an empty name), id:, retry: and unknown fields say nothing about usage
		r.kind = fieldSkip
	}
	r.space = true
}

// value reads text, the next bytes of the current line's value.
func (r *sseReader) value(text []byte) {
	if r.space && len(text) > 0 {
		r.space = false
		if text[0] == ' ' {
			text = text[1:]
		}
	}
	switch r.kind {
	case fieldData:
		r.data.write(text)
	case fieldEvent:
		r.name = append(r.name, text[:min(len(text), maxEventName-len(r.name))]...)
	}
}

// lineEnd ends the current line, and at a blank line the event.
func (r *sseReader) lineEnd(h eventHandler) {
	switch {
	case !r.inLine:
		r.dispatch(h)
	case r.kind == fieldUnknown: // a name without a colon: the field with an empty value
		r.startField(r.start)
	}
	r.kind, r.start, r.inLine, r.space = fieldUnknown, r.start[:0], false, false
}

// end is called at a clean end of stream. A final event whose blank line
// never came is dispatched anyway if its last line was whole; providers end
// every event properly, and a lenient reader loses nothing by it.
func (r *sseReader) end(h eventHandler) {
	if !r.inLine {
		r.dispatch(h)
	}
}

// dispatch ends the current event, passing it to h when it has data.
func (r *sseReader) dispatch(h eventHandler) {
	if r.hasData {
		h.event(r.name, &r.data)
	}
	r.name, r.hasData = r.name[:0], false
	r.data.reset()
}

// held returns the bytes the reader's buffers take.
func (r *sseReader) held() int { return cap(r.start) + cap(r.name) + r.data.held() }
