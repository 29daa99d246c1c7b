package proxy

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"strings"
	"time"

	"github.com/meterproxy/meterproxy/quota/price"
)

// maxUploadParts bounds the parts of an upload's form the meter reads: a
// file upload has two (file, purpose) and perhaps an expiry; a form with
// more is not metered.
const maxUploadParts = 16

// maxPurpose bounds what is read of the purpose field.
const maxPurpose = 64

// errMeterDone ends the meter's side of the pipe: writes after it fail at
// once, so the upload never waits on a meter that stopped reading.
var errMeterDone = errors.New("proxy: upload meter done")

// uploadMeter meters an upload's form as it streams through (POST
// /v1/files): a copy of every byte the transport reads goes through a
// pipe to a goroutine that reads the form with mime/multipart, its
// purpose field and its file's lines (fileMeter), never more than a line
// at a time. It never slows the upload beyond its own reading, and never
// fails it: a form it cannot read is only not metered.
type uploadMeter struct {
	pw      *io.PipeWriter
	stopped bool // feed's alone: the transport's goroutine
	done    chan struct{}
	// Set before done closes.
	file     price.BatchFile
	purpose  string
	complete bool
}

// newUploadMeter starts a meter for a body of contentType, or returns nil
// when it is no multipart form.
func newUploadMeter(contentType string, budget *memBudget) *uploadMeter {
	media, params, err := mime.ParseMediaType(contentType)
	if err != nil || media != "multipart/form-data" || params["boundary"] == "" {
		return nil
	}
	pr, pw := io.Pipe()
	m := &uploadMeter{pw: pw, done: make(chan struct{})}
	go m.run(pr, params["boundary"], budget)
	return m
}

// run reads the form until it ends, then lets the writer go.
func (m *uploadMeter) run(pr *io.PipeReader, boundary string, budget *memBudget) {
	defer close(m.done)
	seen, err := m.read(multipart.NewReader(pr, boundary), budget)
	_ = pr.CloseWithError(errMeterDone)
	m.complete = err == nil && seen
}

// read reads the form's parts; seen says it had one file.
func (m *uploadMeter) read(mr *multipart.Reader, budget *memBudget) (seen bool, err error) {
	for parts := 0; ; parts++ {
		p, err := mr.NextPart()
		switch {
		case errors.Is(err, io.EOF):
			return seen, nil
		case err != nil:
			return false, err
		case parts == maxUploadParts:
			return false, fmt.Errorf("more than %d parts", maxUploadParts)
		}
		switch p.FormName() {
		case "purpose":
			b, err := io.ReadAll(io.LimitReader(p, maxPurpose))
			if err != nil {
				return false, err
			}
			m.purpose = strings.TrimSpace(string(b))
		case "file":
			if seen {
				return false, errors.New("two files")
			}
			seen = true
			if err := m.meterFile(p, budget); err != nil {
				return false, err
			}
		}
		if _, err := io.Copy(io.Discard, p); err != nil { // the rest of a part not read
			return false, err
		}
	}
}

// meterFile meters the lines of the form's file part.
func (m *uploadMeter) meterFile(p io.Reader, budget *memBudget) error {
	var fm fileMeter
	ls := newLineSplitter(budget, fm.meterLine, fm.overlong)
	_, err := io.Copy(ls, p)
	if ls.failed != nil {
		fm.file.Fail("the proxy had no memory left to read a line (server.max_body_memory_bytes)")
	}
	_ = ls.Close()
	m.file = fm.file
	return err
}

// feed passes a read of the body to the meter: its bytes, and its error
// (io.EOF at the end). It is called by the transport's reads alone.
func (m *uploadMeter) feed(p []byte, err error) {
	if m.stopped {
		return
	}
	if len(p) > 0 {
		if _, werr := m.pw.Write(p); werr != nil {
			m.stopped = true
			return
		}
	}
	if err != nil {
		m.stopped = true
		if errors.Is(err, io.EOF) {
			_ = m.pw.Close()
		} else {
			_ = m.pw.CloseWithError(err)
		}
	}
}

// stop ends the meter if the body did not: the request is over.
func (m *uploadMeter) stop() { _ = m.pw.CloseWithError(errMeterDone) }

// meterWait bounds how long the answer to an upload waits for the meter
// to read the last bytes the upstream already has.
const meterWait = 5 * time.Second

// result is the form's file as metered, and whether the whole form was
// read with one file of purpose batch; it waits for the meter to finish,
// within meterWait.
func (m *uploadMeter) result() (price.BatchFile, bool) {
	t := time.NewTimer(meterWait)
	defer t.Stop()
	select {
	case <-m.done:
		return m.file, m.complete && m.purpose == "batch"
	case <-t.C:
		return price.BatchFile{}, false
	}
}
