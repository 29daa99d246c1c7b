package proxy

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// closeCounter is an upstream body that counts its Close calls.
type closeCounter struct {
	io.Reader
	closed atomic.Int32
}

func (c *closeCounter) Close() error { c.closed.Add(1); return nil }

// TestReadAheadCarriesACaughtUpClient: with no room at all in the body
// memory budget, a client that keeps taking is never cut off: the pump
// waits for it, and each chunk is charged past the budget once it has
// taken everything; the answer arrives whole; the upstream's end runs ended once, and Close
// gives every byte back.
func TestReadAheadCarriesACaughtUpClient(t *testing.T) {
	for _, size := range []int{0, 1, aheadChunk - 1, aheadChunk, 5*aheadChunk + 123} {
		want := strings.Repeat("abcdefg", size/7+1)[:size]
		budget := newMemBudget(0)
		src := &closeCounter{Reader: strings.NewReader(want)}
		var ended, cut atomic.Int32
		b := newReadAhead(src, budget, false, aheadHooks{stop: func() {},
			ends: endFuncs{onEnded: func() { ended.Add(1) }, onCut: func() { cut.Add(1) }}, grace: time.Minute})
		got, err := io.ReadAll(iotestOneByteAtATime(b))
		if err != nil || string(got) != want {
			t.Errorf("size %d: read %d bytes, %v; want the answer whole", size, len(got), err)
		}
		if err := b.Close(); err != nil {
			t.Error(err)
		}
		if ended.Load() != 1 || cut.Load() != 0 || src.closed.Load() != 1 || budget.inUse() != 0 || budget.ahead.Load() != 0 {
			t.Errorf("size %d: ended %d, cut %d, upstream closed %d, budget %d (ahead %d); want 1, 0, 1, 0 (0)",
				size, ended.Load(), cut.Load(), src.closed.Load(), budget.inUse(), budget.ahead.Load())
		}
	}
}

// iotestOneByteAtATime reads r a few bytes at a time, as a slow client
// that keeps taking does.
func iotestOneByteAtATime(r io.Reader) io.Reader {
	return readerFunc(func(p []byte) (int, error) { return r.Read(p[:min(len(p), 1000)]) })
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// TestReadAheadCutsAClientBehind: an answer larger than the answers'
// half of the budget, and a client that takes nothing: the pump reads
// until the budget is full, waits the grace, cuts the client off (cut,
// then ended, the upstream body closed) and gives the memory back; Read
// then says errSlowClient.
func TestReadAheadCutsAClientBehind(t *testing.T) {
	budget := newMemBudget(8 * aheadChunk) // 4 chunks for answers
	src := &closeCounter{Reader: bytes.NewReader(make([]byte, 1<<20))}
	ended, cut := make(chan struct{}), make(chan struct{})
	b := newReadAhead(src, budget, false, aheadHooks{stop: func() {},
		ends: endFuncs{onEnded: func() { close(ended) }, onCut: func() { close(cut) }}, grace: 10 * time.Millisecond})
	<-cut
	<-ended
	if n := budget.inUse(); n != 0 {
		t.Errorf("budget %d after the cut, want 0", n)
	}
	if n, err := b.Read(make([]byte, 10)); n != 0 || !errors.Is(err, errSlowClient) {
		t.Errorf("Read after the cut: %d, %v; want errSlowClient", n, err)
	}
	if err := b.Close(); err != nil || src.closed.Load() != 1 {
		t.Errorf("Close: %v, upstream closed %d times; want once", err, src.closed.Load())
	}
}

// endFuncs are a readAhead's aheadEnds as functions.
type endFuncs struct{ onEnded, onCut func() }

func (f endFuncs) ended() { f.onEnded() }
func (f endFuncs) cut()   { f.onCut() }
