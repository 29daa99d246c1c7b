package usage

import (
	"bytes"
	"io"
	"net/http"
	"strings"
)

// StripUsageChunk wraps w: an SSE stream passes through unchanged except
// the event whose data is a chat completion chunk with an empty "choices"
// array and a non-null "usage" (the chunk stream_options.include_usage
// adds), which is dropped whole, its blank line included.
//
// Bytes are passed on in the Write that brings them, except the current
// event while it may still be the usage chunk: from its first field line
// (comment lines before it pass at once) until its data line is whole and
// shows otherwise — a data line not starting with "{" passes at once. Other
// lines (not data, event, id, retry or a comment) pass at once, so a body
// that is not an event stream is not held. At most about maxHold (64 KiB)
// is held; beyond that the event passes. An event the stream ends inside, without
// its blank line, is not passed on if it was held (event-stream clients
// discard such an event anyway).
//
// The writer's Flush flushes w when w is an http.Flusher (or an
// http.ResponseWriter that can flush). After w fails, Write returns that
// error. The writer is for one goroutine at a time.
func StripUsageChunk(w io.Writer) io.Writer { return &stripper{w: w} }

// stripEvent is the stripper's view of the current event.
type stripEvent uint8

const (
	evFresh stripEvent = iota // nothing of the event held
	evHeld                    // field lines held, no data line yet
	evCand                    // held, with one data line that is the usage chunk
	evPass                    // passed on as it arrives, to its blank line
)

// lineKind is what the current line is, once its start shows it.
type lineKind uint8

const (
	kindUnknown lineKind = iota // too little seen yet
	kindComment                 // starts with ':'
	kindData                    // the data field
	kindMeta                    // the event, id or retry field
	kindOther                   // anything else: ignored by event-stream readers
)

// dest is where bytes go.
type dest uint8

const (
	destHold dest = iota
	destForward
	destDrop
)

// stripLine is the stripper's view of the current line: its kind, where
// its bytes go, whether it has any content (else it is the blank line
// ending the event), and its content while that is needed to classify it
// or to read a data line. The zero value is a line of which nothing has
// arrived.
type stripLine struct {
	kind    lineKind
	dest    dest
	started bool
	text    []byte
}

// stripper is the writer StripUsageChunk returns.
type stripper struct {
	w     io.Writer
	split lineSplitter
	ev    stripEvent

	// line is the current line.
	line stripLine
	// endDest is where the previous line's end went, for the LF of a CRLF
	// that arrives in the next Write.
	endDest dest

	// held is the current event's bytes kept back, at most maxHold and
	// the piece that passed it.
	held []byte

	// p and [run0, run1) are the bytes of the current Write passed on but
	// not yet written to w, so one Write makes few writes.
	p          []byte
	run0, run1 int

	err error
}

var _ http.Flusher = (*stripper)(nil)

// Write implements io.Writer. It returns len(p), or 0 and w's error.
func (s *stripper) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	s.p, s.run0, s.run1 = p, 0, 0
	for i := 0; i < len(p) && s.err == nil; {
		text, n, end := s.split.cut(p[i:])
		s.piece(text, i, i+n, end)
		i += n
	}
	s.writeRun()
	s.p = nil
	if s.err != nil {
		return 0, s.err
	}
	return len(p), nil
}

// Flush implements http.Flusher, flushing w. Held bytes stay held.
func (s *stripper) Flush() {
	switch w := s.w.(type) {
	case http.Flusher:
		w.Flush()
	case http.ResponseWriter:
		_ = http.NewResponseController(w).Flush()
	}
}

// piece routes p[i:j], a piece of a line whose content part is text.
func (s *stripper) piece(text []byte, i, j int, end lineEnd) {
	if end == lineLF {
		s.route(s.endDest, i, j)
		return
	}
	if len(text) > 0 {
		s.line.started = true
	}
	if s.ev != evPass {
		s.classify(text, end == lineDone)
	}
	if s.ev == evPass {
		s.line.dest = destForward
	}
	s.route(s.line.dest, i, j)
	if len(s.held) > maxHold {
		s.pass()
	}
	if end == lineDone {
		s.lineEnd()
	}
}

// classify reads the new text of the current line, deciding its kind and
// where its bytes go, and passing the event on once it cannot be the usage
// chunk. done says text ends the line.
func (s *stripper) classify(text []byte, done bool) {
	if !s.line.started {
		if done && s.ev != evCand {
			s.line.dest = destForward // the blank line of an event that passes
		}
		return
	}
	line := text
	if s.line.kind == kindUnknown || s.line.kind == kindData {
		// A line that comes whole in one piece is read where it is.
		if len(s.line.text) > 0 || !done {
			s.line.text = append(s.line.text, text...)
			line = s.line.text
		}
	}
	if s.line.kind == kindUnknown {
		s.line.kind = lineKindOf(line, done)
		switch {
		case s.line.kind == kindComment && s.ev == evFresh:
			s.line.dest = destForward
		case s.line.kind == kindOther && s.ev != evCand:
			s.pass()
		case s.line.kind == kindData && s.ev == evCand:
			s.pass() // a second data line: the event's data is not the chunk
		}
	}
	if s.line.kind == kindData && s.ev != evPass {
		value := dataValue(line)
		if !mayBeChunk(value) || done && !isUsageChunk(value) {
			s.pass()
		}
	}
}

// lineEnd ends the current line, and the event at a blank line.
func (s *stripper) lineEnd() {
	blank := !s.line.started
	switch {
	case blank && s.ev == evCand:
		s.held, s.endDest = s.held[:0], destDrop
	case blank:
		s.flushHeld()
		s.endDest = destForward
	default:
		if s.ev != evPass {
			switch s.line.kind {
			case kindData: // classify found the usage chunk
				s.ev = evCand
			case kindMeta:
				if s.ev == evFresh {
					s.ev = evHeld
				}
			}
		}
		s.endDest = s.line.dest
	}
	if blank {
		s.ev, s.held = evFresh, shrink(s.held)
	}
	s.line = stripLine{kind: kindUnknown, dest: destHold, text: shrink(s.line.text)}
}

// pass gives up holding the current event: what is held is written, and
// the rest of the event passes on as it arrives.
func (s *stripper) pass() {
	s.flushHeld()
	s.ev, s.line.dest = evPass, destForward
}

// route sends p[i:j] to d.
func (s *stripper) route(d dest, i, j int) {
	switch d {
	case destForward:
		s.flushHeld()
		if s.run1 != i {
			s.writeRun()
			s.run0 = i
		}
		s.run1 = j
	case destHold:
		s.held = append(s.held, s.p[i:j]...)
	}
}

// flushHeld writes the held bytes, after the pending run they follow.
func (s *stripper) flushHeld() {
	if len(s.held) == 0 {
		return
	}
	s.writeRun()
	s.write(s.held)
	s.held = s.held[:0]
}

// writeRun writes the pending run of the current Write.
func (s *stripper) writeRun() {
	if s.run1 > s.run0 {
		s.write(s.p[s.run0:s.run1])
	}
	s.run0 = s.run1
}

func (s *stripper) write(b []byte) {
	if s.err != nil {
		return
	}
	if _, err := s.w.Write(b); err != nil {
		s.err = err
	}
}

// lineKindOf classifies a line from its start; done says the line is whole.
func lineKindOf(line []byte, done bool) lineKind {
	if line[0] == ':' {
		return kindComment
	}
	name, _, colon := bytes.Cut(line, []byte{':'})
	if !colon && !done {
		for _, field := range [...]string{"data", "event", "id", "retry"} {
			if strings.HasPrefix(field, string(name)) {
				return kindUnknown // the name may go on
			}
		}
		return kindOther
	}
	switch string(name) {
	case "data":
		return kindData
	case "event", "id", "retry":
		return kindMeta
	}
	return kindOther
}

// maxHold is the most of an event a stripper holds back while it may be
// the usage chunk (under 1 KiB on the wire); a longer event passes. Its
// buffers are released after an event that grew them past it.
const maxHold = 64 << 10

// shrink empties b for reuse, releasing it if one large event grew it.
func shrink(b []byte) []byte {
	if cap(b) > maxHold {
		return nil
	}
	return b[:0]
}

// dataValue returns the value of a data line: after "data:" and one
// optional space.
func dataValue(line []byte) []byte {
	_, value, _ := bytes.Cut(line, []byte{':'})
	if len(value) > 0 && value[0] == ' ' {
		value = value[1:]
	}
	return value
}

// mayBeChunk reports whether the start of a data value may still be a JSON
// object.
func mayBeChunk(value []byte) bool {
	value = bytes.TrimLeft(value, " \t")
	return len(value) == 0 || value[0] == '{'
}
