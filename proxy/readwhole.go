package proxy

import (
	"errors"
	"io"
)

// An answer whose length is declared and fits one read-ahead chunk is
// read whole before its client reads any (readWhole), on the goroutine
// that forwards it, rather than by a pump of its own (readahead.go): the
// upstream has sent it all by the time its headers are read, as a
// provider's JSON answer is, so a goroutine and its hand-offs per request
// would buy nothing. It ends the request's hold on its slot as the pump
// would, when the upstream's body ends, whatever the client does next;
// it is charged to the body memory budget as one chunk, past the budget if
// need be (the pump's rule for a client that has taken everything).

// errLongerThanDeclared is what an answer read whole ends with when its
// body is longer than its Content-Length said (the transport does not let
// one be).
var errLongerThanDeclared = errors.New("proxy: the upstream's answer is longer than its Content-Length")

// wholeAnswer is an answer read whole (readWhole): what the client has not
// taken yet, then how the upstream's body ended. Read and Close are for
// one goroutine (ReverseProxy's).
type wholeAnswer struct {
	chunk  *[aheadChunk]byte // nil once given back
	unread []byte
	end    error // io.EOF when the body came whole
	budget *memBudget
}

// readWhole reads src, an answer of declared length below aheadChunk,
// to its end into a chunk charged to budget, closes it and tells ends
// it ended; the answer comes back as a reader of what was read.
func readWhole(src io.ReadCloser, budget *memBudget, interactive bool, ends aheadEnds) *wholeAnswer {
	if !budget.takeAhead(aheadChunk, interactive) {
		budget.forceAhead(aheadChunk)
	}
	c := aheadChunks.Get().(*[aheadChunk]byte)
	n, err := 0, error(nil)
	for err == nil {
		if n == len(c) {
			err = errLongerThanDeclared
			break
		}
		var k int
		k, err = src.Read(c[n:])
		n += k
	}
	_ = src.Close() // before ended: a body cut before its end settles as cut (meteredBody)
	ends.ended()
	return &wholeAnswer{chunk: c, unread: c[:n], end: err, budget: budget}
}

// Read implements io.Reader.
func (w *wholeAnswer) Read(p []byte) (int, error) {
	if len(w.unread) == 0 {
		return 0, w.end
	}
	n := copy(p, w.unread)
	w.unread = w.unread[n:]
	return n, nil
}

// Close implements io.Closer: it gives the chunk back, once.
func (w *wholeAnswer) Close() error {
	if w.chunk != nil {
		w.unread = nil
		aheadChunks.Put(w.chunk)
		w.budget.giveAhead(aheadChunk)
		w.chunk = nil
	}
	return nil
}
