package usage

import "slices"

// Bounds of what a window keeps.
const (
	// windowSize is the most bytes a window keeps: all of what was
	// written while it fits, then the last windowSize bytes. Provider
	// usage sits in the last few hundred bytes of an answer or an event;
	// a Responses answer ends with its usage, user and metadata (at most
	// 16 pairs of 64 + 512 bytes), well inside.
	windowSize = 64 << 10
	// windowHead is how many of the first bytes a window keeps once it
	// overflows: enough for an event's "type", which providers send first.
	windowHead = 512
)

// window keeps a bounded view of bytes written to it piece by piece: all
// of them while they fit in windowSize bytes; past that, the first
// windowHead bytes and the last windowSize. It holds at most windowSize +
// windowHead bytes, allocated as they arrive. The zero value is empty and
// ready; a window is for one goroutine at a time.
type window struct {
	// buf holds every byte while the window has not overflowed; after,
	// it is a ring of windowSize bytes whose next write goes at pos.
	buf []byte
	pos int
	// head is the first windowHead bytes, kept when the window overflows.
	head []byte
	// size is every byte written, kept or not.
	size int64
	over bool
}

// write appends p.
func (w *window) write(p []byte) {
	w.size += int64(len(p))
	if !w.over {
		if len(w.buf)+len(p) <= windowSize {
			w.buf = appendBounded(w.buf, p, windowSize)
			return
		}
		w.overflow(p)
	}
	if len(p) >= windowSize {
		copy(w.buf, p[len(p)-windowSize:])
		w.pos = 0
		return
	}
	n := copy(w.buf[w.pos:], p)
	copy(w.buf, p[n:])
	w.pos = (w.pos + len(p)) % windowSize
}

// overflow turns the kept bytes into the head and the start of the ring,
// before p, the write that does not fit, is written. The ring is full from
// that write on: the bytes kept so far sit at its start, and p fills it.
func (w *window) overflow(p []byte) {
	w.head = appendBounded(w.head[:0], w.buf[:min(len(w.buf), windowHead)], windowHead)
	w.head = appendBounded(w.head, p[:min(len(p), windowHead-len(w.head))], windowHead)
	w.pos = len(w.buf)
	if cap(w.buf) < windowSize {
		w.buf = append(make([]byte, 0, windowSize), w.buf...)
	}
	w.buf = w.buf[:windowSize]
	w.over = true
}

// whole returns every byte written when they all were kept.
func (w *window) whole() ([]byte, bool) { return w.buf, !w.over }

// start returns the first bytes written: all of them, or windowHead.
func (w *window) start() []byte {
	if w.over {
		return w.head
	}
	return w.buf
}

// tail returns the last bytes written, in order: all of them, or
// windowSize. It rotates the ring in place; the window stays usable.
func (w *window) tail() []byte {
	if w.over && w.pos != 0 {
		// The oldest byte is at pos: rotate it to the start.
		slices.Reverse(w.buf[:w.pos])
		slices.Reverse(w.buf[w.pos:])
		slices.Reverse(w.buf)
		w.pos = 0
	}
	return w.buf
}

// reset empties the window for reuse, keeping its buffers.
func (w *window) reset() {
	w.buf, w.head = w.buf[:0], w.head[:0]
	w.pos, w.size, w.over = 0, 0, false
}

// held returns the bytes the window's buffers take.
func (w *window) held() int { return cap(w.buf) + cap(w.head) }

// appendBounded appends p to b, growing b's capacity as append would but
// never past limit, which len(b)+len(p) must not exceed.
func appendBounded(b, p []byte, limit int) []byte {
	if need := len(b) + len(p); need > cap(b) {
		grown := make([]byte, len(b), min(max(2*cap(b), need), limit))
		copy(grown, b)
		b = grown
	}
	return append(b, p...)
}
