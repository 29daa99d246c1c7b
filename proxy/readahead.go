package proxy

import (
	"errors"
	"io"
	"sync"
	"time"
)

// aheadChunk is the size of the buffers an answer is read ahead into, as
// ReverseProxy's copy buffer; a read goes into the last one while it has
// minAheadRead free, else into a new one.
const (
	aheadChunk   = 32 << 10
	minAheadRead = 4 << 10
)

// aheadGrace is how long a client behind its answer may take nothing
// while the body memory budget is full before it is cut off.
const aheadGrace = time.Second

// aheadChunks recycles the chunks, as pointers to their arrays: a chunk
// goes back without a pointer made for it.
var aheadChunks = sync.Pool{New: func() any { return new([aheadChunk]byte) }}

// errSlowClient is what the client's side of an answer reads once the
// client was cut off: it was behind the answer when the body memory budget
// could hold no more of it.
var errSlowClient = errors.New("proxy: the client reads the answer slower than server.max_body_memory_bytes can hold it")

// readAhead is an upstream answer's body read ahead of its client. Its
// pump reads the upstream as fast as the upstream sends, into chunks
// charged to the body memory budget (memBudget.takeAhead), while the
// client's side (Read, ReverseProxy's copy) takes from them as fast as the
// client accepts. So the upstream's answer ends at the upstream's pace,
// whatever the client's, and ended runs then: the request's slot is
// released and its usage settled while a slow client still reads.
//
// A client that keeps up holds the chunk being read into; one that lags
// holds what it has not taken yet. When the budget can hold no more, a
// client behind its answer is waited for (its request keeps its slot
// meanwhile), and one that takes nothing for aheadGrace is cut off: the
// pump stops, runs cut (which fails the write the client holds up), and
// Read says errSlowClient. A client that has taken everything is never cut for
// memory: the chunk the next read goes into is charged past the budget if
// need be, one per answer at most, and only while its request is
// upstream.
//
// Read and Close are for one goroutine (ReverseProxy's); Close stops the
// pump and waits for it. The pump waits on the client only while the
// budget is full, and for grace at most without progress, so it ends soon
// after the upstream's body does, or when stop cancels the upstream
// request.
type readAhead struct {
	src         io.ReadCloser // the upstream's body, metered
	budget      *memBudget
	interactive bool
	aheadHooks
	aheadSignals

	mu     sync.Mutex
	chunks [][]byte // each filled to its length; the client reads from chunks[0][off:]
	off    int
	queued int   // bytes read ahead and not yet taken
	held   int64 // bytes charged to the budget
	// end is how the upstream's body ended (io.EOF when whole), or
	// errSlowClient; nil while it goes on.
	end    error
	closed bool
}

// aheadHooks are what a readAhead calls, and its grace.
type aheadHooks struct {
	// stop cancels the upstream request: a read the pump waits in ends.
	stop func()
	// ends are told on the pump's goroutine how the answer ended.
	ends aheadEnds
	// grace is how long a client behind may take nothing while the
	// budget is full (aheadGrace).
	grace time.Duration
}

// aheadEnds are told how a readAhead's answer ended: ended runs once on
// the pump's goroutine when the upstream's body has ended (whole, failed,
// or abandoned by Close or a cut) and src is closed; cut runs on it
// before, when it cuts the client off.
type aheadEnds interface {
	ended()
	cut()
}

// aheadSignals are how a readAhead's pump and its client tell each other.
type aheadSignals struct {
	ready chan struct{} // the pump's word that there is more to read
	taken chan struct{} // the client's word that it took some, or Close's
	done  chan struct{} // closed when the pump returns
}

// newReadAhead returns src read ahead within budget, its pump started.
func newReadAhead(src io.ReadCloser, budget *memBudget, interactive bool, hooks aheadHooks) *readAhead {
	b := &readAhead{src: src, budget: budget, interactive: interactive, aheadHooks: hooks,
		aheadSignals: aheadSignals{ready: make(chan struct{}, 1), taken: make(chan struct{}, 1), done: make(chan struct{})}}
	go b.pump()
	return b
}

// pump reads the upstream's body ahead until it ends, the client is cut
// off or Close stops it; then closes it and runs ended.
func (b *readAhead) pump() {
	defer close(b.done)
	for {
		room, ok := b.room()
		if !ok {
			break
		}
		if room == nil {
			b.ends.cut()
			break
		}
		n, err := b.src.Read(room)
		if !b.filled(n, err) {
			break
		}
	}
	_ = b.src.Close() // before ended: a body cut before its end settles as cut (meteredBody)
	b.ends.ended()
	signal(b.ready)
}

// room returns the free part of the last chunk, taking a new chunk when
// it has less than minAheadRead free: charged to the budget, or past it
// when the client has taken everything. When the client is behind and the
// budget holds no more, it waits for the client to take some (the slot is
// held meanwhile), and cuts it off when it takes nothing for grace. It
// returns false when the pump must stop because Close was called, and
// nil with true when it cut the client off.
func (b *readAhead) room() ([]byte, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for !b.closed {
		if room := b.lastRoom(); room != nil {
			return room, true
		}
		charged := b.budget.takeAhead(aheadChunk, b.interactive)
		if !charged && b.queued == 0 {
			b.budget.forceAhead(aheadChunk) // the client has taken all: never cut for memory
			charged = true
		}
		if charged {
			b.held += aheadChunk
			c := aheadChunks.Get().(*[aheadChunk]byte)[:0]
			b.chunks = append(b.chunks, c)
			return c[:cap(c)], true
		}
		if !b.awaitClient() {
			b.end = errSlowClient
			b.free()
			return nil, true
		}
	}
	return nil, false
}

// lastRoom is the free part of the last chunk, nil when it has less than
// minAheadRead; a last chunk the client has taken whole starts over.
// Under mu.
func (b *readAhead) lastRoom() []byte {
	k := len(b.chunks)
	if k == 0 {
		return nil
	}
	last := b.chunks[k-1]
	if k == 1 && b.queued == 0 {
		last, b.off = last[:0], 0
		b.chunks[0] = last
	}
	if cap(last)-len(last) < minAheadRead {
		return nil
	}
	return last[len(last):cap(last)]
}

// awaitClient waits, with mu let go, until the client takes something
// (or Close is called); false when it took nothing for grace.
func (b *readAhead) awaitClient() bool {
	b.mu.Unlock()
	defer b.mu.Lock()
	t := time.NewTimer(b.grace)
	defer t.Stop()
	select {
	case <-b.taken:
		return true
	case <-t.C:
		return false
	}
}

// filled adds the n bytes the last read put into the last chunk, and
// records err (io.EOF at the end); it reports whether to read on.
func (b *readAhead) filled(n int, err error) bool {
	b.mu.Lock()
	k := len(b.chunks) - 1
	b.chunks[k] = b.chunks[k][:len(b.chunks[k])+n]
	b.queued += n
	if err != nil {
		b.end = err
	}
	b.mu.Unlock()
	signal(b.ready)
	return err == nil
}

// signal puts a word in c, a channel of one, unless one waits there.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Read implements io.Reader: what was read ahead, waiting for the pump
// when there is nothing; then how the upstream's body ended.
func (b *readAhead) Read(p []byte) (int, error) {
	for {
		b.mu.Lock()
		if b.queued > 0 {
			n := b.take(p)
			b.mu.Unlock()
			signal(b.taken)
			return n, nil
		}
		end := b.end
		b.mu.Unlock()
		if end != nil {
			return 0, end
		}
		<-b.ready
	}
}

// take copies what is queued into p, giving back each chunk the client
// has taken whole but the last (the pump may be reading into it); under
// mu.
func (b *readAhead) take(p []byte) int {
	n := 0
	for n < len(p) && b.queued > 0 {
		c := b.chunks[0]
		m := copy(p[n:], c[b.off:])
		n, b.off, b.queued = n+m, b.off+m, b.queued-m
		if b.off == len(c) && len(b.chunks) > 1 {
			putChunk(c)
			b.budget.giveAhead(aheadChunk)
			b.chunks, b.off, b.held = b.chunks[1:], 0, b.held-aheadChunk
		}
	}
	return n
}

// Close implements io.Closer: it stops the pump, waits for it, and gives
// the chunks back.
func (b *readAhead) Close() error {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	signal(b.taken)
	b.stop()
	<-b.done
	b.mu.Lock()
	b.free()
	b.mu.Unlock()
	return nil
}

// free gives every chunk back; under mu, with the pump not reading.
func (b *readAhead) free() {
	for _, c := range b.chunks {
		putChunk(c)
	}
	b.chunks, b.off, b.queued = nil, 0, 0
	b.budget.giveAhead(b.held)
	b.held = 0
}

// putChunk returns c to the pool; its charge is the caller's to give
// back.
func putChunk(c []byte) {
	aheadChunks.Put((*[aheadChunk]byte)(c[:aheadChunk]))
}
