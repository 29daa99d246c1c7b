package proxy

import (
	"io"
	"sync"
	"sync/atomic"

	"github.com/meterproxy/meterproxy/proxy/usage"
)

// delivery follows a metered stream's terminal event ([DONE],
// message_stop, response.completed…) to the client. A stream whose
// terminal event has passed to the client is whole, whatever the client
// does next: Codex closes its connection right after response.completed,
// and when the upstream's end lags that event the client's leaving cuts
// the copy off before it, which is no cut (forward). Its usage is the
// terminal event's in any case (usage.Meter.Finish).
type delivery struct {
	// terminal is how many bytes of the upstream's body had been read
	// when its terminal event had, whole: through the end of the read it
	// came in; 0 before. Written by the body's reader (meteredBody, on
	// the read-ahead's goroutine), read by the handler's.
	terminal atomic.Int64
	// passed is how many bytes of the body were written to the client and
	// flushed without failing (passedBody); the handler's goroutine only.
	passed int64
	// metered and passing are the answer's body as it is metered and as
	// it passes to the client, held here rather than made apart: an
	// exchange's answer is wrapped once (Handler.modifyResponse).
	metered meteredBody
	passing passedBody
}

// whole reports whether the stream's terminal event has passed to the
// client. On the handler's goroutine.
func (d *delivery) whole() bool {
	at := d.terminal.Load()
	return at > 0 && d.passed >= at
}

// sawTerminal records that the terminal event had been read whole once
// total bytes of the upstream's body had; the first call counts.
func (d *delivery) sawTerminal(total int64) { d.terminal.CompareAndSwap(0, total) }

// passedBody is a metered answer's body as ReverseProxy copies it to the
// client: it tells its delivery how much of it has passed. The copy reads
// again only once what it read before is written to the client, and an
// event stream is flushed after every write (ReverseProxy flushes
// text/event-stream at once; a failed flush is the recorder's
// clientFailed): so, while no write to the client has failed, what was
// read before a Read has passed to the client. For one goroutine, the
// handler's.
type passedBody struct {
	io.ReadCloser
	d     *delivery
	rec   *recorder
	taken int64
}

// Read implements io.Reader.
func (b *passedBody) Read(p []byte) (int, error) {
	if !b.rec.clientCut() {
		b.d.passed = b.taken
	}
	n, err := b.ReadCloser.Read(p)
	b.taken += int64(n)
	return n, err
}

// meteredBody feeds a copy of every byte read to a usage.Meter, and reports
// the usage once: at EOF (complete) or at Close before EOF (cut short).
// The meter holds at most about 65 KiB of the body however large it is and
// however slowly the client reads it (see usage.Meter), so the bodies in
// flight cost at most the in-flight bound times that.
//
// It tells end when the stream's terminal event has been read (delivery).
type meteredBody struct {
	io.ReadCloser
	meter usage.Meter
	end   *delivery
	read  int64
	// settle settles ex's answer of status with the usage read
	// (metering.settle), once.
	settle *metering
	ex     *exchange
	status int
	once   sync.Once
}

// Read implements io.Reader.
func (b *meteredBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		_, _ = b.meter.Write(p[:n]) // never fails
		b.read += int64(n)
		if b.meter.Terminal() {
			b.end.sawTerminal(b.read)
		}
	}
	if err == io.EOF {
		b.finish(true)
	}
	return n, err
}

// Close implements io.Closer.
func (b *meteredBody) Close() error {
	b.finish(false)
	return b.ReadCloser.Close()
}

func (b *meteredBody) finish(complete bool) {
	b.once.Do(func() {
		u := b.meter.Finish(complete)
		b.settle.settle(b.ex, b.ex.answer(b.status), u, b.meter.Cut())
	})
}
