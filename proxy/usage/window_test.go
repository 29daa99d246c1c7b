package usage

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestWindow: written in pieces of every size, a window keeps all the
// bytes while they fit and then exactly the first windowHead and the last
// windowSize, within its bound.
func TestWindow(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2)) //nolint:gosec // G404: seeded, reproducible bytes, not security
	for _, total := range []int{0, 1, windowHead, windowSize - 1, windowSize, windowSize + 1, 3*windowSize + 17} {
		for _, piece := range []int{1, 7, 4096, windowSize - 3, windowSize, 2 * windowSize} {
			all := make([]byte, total)
			for i := range all {
				all[i] = "abcdefghijklmnopqrstuvwxyz0123456789"[rng.IntN(36)]
			}
			var w window
			for p := all; len(p) > 0; {
				n := min(piece, len(p))
				w.write(p[:n])
				p = p[n:]
				if w.held() > windowSize+windowHead {
					t.Fatalf("total %d in pieces of %d: holding %d", total, piece, w.held())
				}
			}
			if w.size != int64(total) {
				t.Fatalf("size %d, want %d", w.size, total)
			}
			got, whole := w.whole()
			if whole != (total <= windowSize) || whole && !bytes.Equal(got, all) {
				t.Fatalf("total %d in pieces of %d: whole %v", total, piece, whole)
			}
			if start := w.start(); !bytes.Equal(start, all[:len(start)]) || !whole && len(start) != windowHead {
				t.Errorf("total %d in pieces of %d: start of %d bytes wrong", total, piece, len(start))
			}
			if tail := w.tail(); !bytes.Equal(tail, all[max(0, total-windowSize):]) {
				t.Errorf("total %d in pieces of %d: tail of %d bytes wrong", total, piece, len(tail))
			}
			// The window stays usable after tail.
			w.write([]byte("xyz"))
			if tail := w.tail(); !bytes.HasSuffix(tail, []byte("xyz")) {
				t.Errorf("total %d in pieces of %d: write after tail lost", total, piece)
			}
		}
	}
}
