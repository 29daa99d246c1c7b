package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Where log.access writes, besides a file's path.
const (
	AccessStdout = "stdout"
	AccessStderr = "stderr"
	AccessOff    = "off"
)

// accessQueue is how many lines may wait for the writer: enough for a
// couple of seconds of a busy replica's requests if the disk stalls
// (a line is some 700 bytes as a value), after which lines are dropped
// and counted rather than a request made to wait.
const accessQueue = 4096

// AccessLog is the access log (log.access): one JSON line per request,
// WebSocket session and turn, through slog as a stream of its own. The
// request path hands it a value on a bounded queue and never waits (send);
// one goroutine encodes and writes. Close writes what is queued, then
// stops. Safe for concurrent use.
type AccessLog struct {
	queue   chan accessRecord
	reopens chan chan error
	stop    chan struct{}
	done    chan struct{}
	closing atomic.Bool
	once    sync.Once

	// Used by the writer goroutine alone.
	out     accessOut
	buf     *bufio.Writer
	handler slog.Handler
	errLog  *slog.Logger
	failing bool
}

// accessOut is where the lines go: a file reopened on Reopen, or a
// stream that stays.
type accessOut interface {
	io.Writer
	reopen() error
	close() error
}

// OpenAccessLog starts the access log writing to dest — AccessStdout
// (stdout), AccessStderr (stderr) or a file's path, opened for appending
// and created if need be; nil for AccessOff. errLog hears of a write that
// failed.
func OpenAccessLog(dest string, stdout, stderr io.Writer, errLog *slog.Logger) (*AccessLog, error) {
	var out accessOut
	switch dest {
	case AccessOff:
		return nil, nil
	case AccessStdout, "":
		out = streamOut{stdout}
	case AccessStderr:
		out = streamOut{stderr}
	default:
		f, err := openAccessFile(dest)
		if err != nil {
			return nil, err
		}
		out = &fileOut{path: dest, f: f}
	}
	return newAccessLog(out, accessQueue, errLog), nil
}

// newAccessLog starts the writer of out with room for queue lines.
func newAccessLog(out accessOut, queue int, errLog *slog.Logger) *AccessLog {
	l := &AccessLog{queue: make(chan accessRecord, queue), reopens: make(chan chan error), stop: make(chan struct{}),
		done: make(chan struct{}), out: out, buf: bufio.NewWriterSize(out, 64<<10), errLog: errLog}
	l.handler = slog.NewJSONHandler(l.buf, &slog.HandlerOptions{ReplaceAttr: accessAttr})
	go l.run()
	return l
}

// accessAttr drops slog's level and message from a line: every line is
// the same kind of record, and its fields say what it is.
func accessAttr(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && (a.Key == slog.LevelKey || a.Key == slog.MessageKey) {
		return slog.Attr{}
	}
	return a
}

// send queues rec for writing, and reports whether it was queued: false
// when the queue is full or the log closed (the caller counts it
// dropped). It never waits.
func (l *AccessLog) send(rec accessRecord) bool {
	if l.closing.Load() {
		return false
	}
	select {
	case l.queue <- rec:
		return true
	default:
		return false
	}
}

// Reopen closes the file and opens its path again, after what was queued
// before it is written: logrotate moves the file, then asks for this
// (SIGHUP), and the next lines go to a new file at the path. Nothing for
// stdout or stderr. It returns the open's error; the old file is kept
// then.
func (l *AccessLog) Reopen(ctx context.Context) error {
	ack := make(chan error, 1)
	select {
	case l.reopens <- ack:
	case <-l.done:
		return errAccessClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	return <-ack
}

// errAccessClosed: the access log was closed.
var errAccessClosed = errors.New("proxy: the access log is closed")

// Close writes every line queued, flushes, closes a file and stops the
// writer; a line sent afterwards is dropped. Call it once the server has
// drained, so that every request's line is in.
func (l *AccessLog) Close() error {
	l.once.Do(func() {
		l.closing.Store(true)
		close(l.stop)
	})
	<-l.done
	return nil
}

// accessWriteEvery is how often the writer wakes to write what was
// queued. A request's send never wakes it (nobody waits on the queue),
// so the log costs no goroutine hand-off a request: at 2,000 requests a
// second, waking for each line put the writer on the CPU 2,000 times a
// second and raised the median latency by a sixth (make bench). A line
// is written within this of its request's end; the queue holds
// accessQueue lines, 160,000 a second at this pace.
const accessWriteEvery = 25 * time.Millisecond

// run is the writer: every accessWriteEvery, the lines queued, flushed.
func (l *AccessLog) run() {
	defer close(l.done)
	tick := time.NewTicker(accessWriteEvery)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			l.drain()
		case ack := <-l.reopens:
			l.drain()
			ack <- l.out.reopen()
		case <-l.stop:
			l.drain()
			_ = l.out.close()
			return
		}
	}
}

// drain writes every line queued now, and flushes.
func (l *AccessLog) drain() {
	for {
		select {
		case rec := <-l.queue:
			l.write(rec)
		default:
			l.flush()
			return
		}
	}
}

// write encodes rec as one line into the buffer.
func (l *AccessLog) write(rec accessRecord) {
	r := slog.NewRecord(rec.time.UTC(), slog.LevelInfo, "", 0)
	rec.attrs(&r)
	l.failed(l.handler.Handle(context.Background(), r))
}

// flush writes the buffer out.
func (l *AccessLog) flush() { l.failed(l.buf.Flush()) }

// failed logs the first failure of a run of them to the process log.
func (l *AccessLog) failed(err error) {
	switch {
	case err == nil:
		l.failing = false
	case !l.failing:
		l.failing = true
		l.errLog.Error("access_log_write_failed", slog.String("error", err.Error()))
		l.buf.Reset(l.out) // what it held is lost: a full disk must not stop the writer for good
	}
}

// streamOut is stdout or stderr: never reopened or closed.
type streamOut struct{ io.Writer }

func (streamOut) reopen() error { return nil }
func (streamOut) close() error  { return nil }

// fileOut is the access log's file, reopened at its path.
type fileOut struct {
	path string
	f    *os.File
}

// openAccessFile opens path for appending, creating it (mode 0600: the
// log names callers and what they spent).
func openAccessFile(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600) //nolint:gosec // G304: the path is the operator's log.access, validated at start
}

func (o *fileOut) Write(p []byte) (int, error) { return o.f.Write(p) }

func (o *fileOut) reopen() error {
	f, err := openAccessFile(o.path)
	if err != nil {
		return err
	}
	old := o.f
	o.f = f
	return old.Close()
}

func (o *fileOut) close() error { return o.f.Close() }
