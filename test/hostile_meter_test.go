package test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// The metering attack of issue 21 item 5: clients ask for answers of
// nearly 4 MiB and stop reading them, so each answer stays in flight with
// most of it through the proxy. The meter kept what had passed of every
// answer (up to 4 MiB each), outside the body memory budget: 45 such
// clients took the proxy from 15 to 229 MiB while
// meterproxy_body_memory_bytes read 1,935.
const (
	// meterClients is how many answers are held in flight at once.
	meterClients = 40
	// meterAnswer is the bytes of text in each answer.
	meterAnswer = 3_900_000
	// meterCompletion is the output each answer's usage reports.
	meterCompletion = 1_000_000
	// meterPerAnswer bounds what one held answer may cost the proxy: the
	// meter's window (at most 66,120 bytes) plus the connection's buffers
	// (net/http's 4 KiB reader and writer each side, the reverse proxy's
	// 32 KiB copy buffer) and the request's goroutines — well under this.
	meterPerAnswer = 256 << 10
	// meterHeadroom is the garbage collector's and the runtime's share on
	// top: with GOGC=100 the heap may grow to twice its live size before
	// a collection, and freed pages are returned to the system lazily.
	meterHeadroom = 16 << 20
	// meterWhole asks the upstream for the whole answer at once.
	meterWhole = "X-Test-Whole-Answer"
)

// TestHostileMeterMemory holds meterClients answers of meterAnswer bytes in
// flight, each client having read all the upstream sent before it paused
// (so every byte of it went through the proxy's meter) and then reading
// nothing more. The proxy's resident memory may grow by meterPerAnswer per
// answer plus meterHeadroom: about 26 MiB, where keeping the answers would
// take over 150 MiB. Once released, the answers end whole and their usage —
// at the end of each body, 3.9 MiB in — is counted as reported.
func TestHostileMeterMemory(t *testing.T) {
	prefix := `{"id":"chatcmpl-big","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"` +
		strings.Repeat("lorem ipsum ", meterAnswer/12) + `"},"finish_reason":"stop"}]`
	rest := fmt.Sprintf(`,"usage":{"prompt_tokens":12,"completion_tokens":%d,"total_tokens":%d}}`, meterCompletion, meterCompletion+12)
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }

	up := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		// No Content-Length: the answer goes out as it is written.
		_, _ = io.WriteString(w, prefix)
		_ = http.NewResponseController(w).Flush()
		if r.Header.Get(meterWhole) == "" {
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		_, _ = io.WriteString(w, rest)
	}))
	t.Cleanup(free) // before the upstream closes: cleanups run last first
	p := startProxy(t, probeConfig(up.URL), probeEnv, callerKey)
	client := newClient(t, meterClients)
	url, headers := p.URL+"/v1/chat/completions", probeHeaders("/v1/chat/completions")
	request := `{"model":"m","messages":[{"role":"user","content":"write a long answer"}]}`

	// One answer through every part the held ones take, then the baseline.
	warm := map[string]string{meterWhole: "1"}
	for k, v := range headers {
		warm[k] = v
	}
	if status, _, body := post(t, client, url, request, warm); status != http.StatusOK || string(body) != prefix+rest {
		t.Fatalf("warm-up: status %d, %d bytes", status, len(body))
	}
	before := readTokens(scrape(t, p.AdminURL), probeCaller)
	base := vmRSS(t, p.Pid())

	var reading, done sync.WaitGroup
	reading.Add(meterClients)
	errs := make(chan error, meterClients)
	for range meterClients {
		done.Go(func() {
			errs <- holdAnswer(t.Context(), client, url, request, headers, prefix, rest, release, reading.Done)
		})
	}
	reading.Wait()
	held := vmRSS(t, p.Pid())
	free()
	done.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}

	growth, bound := held-base, int64(meterClients*meterPerAnswer+meterHeadroom)
	t.Logf("resident memory %.1f MiB before, %.1f MiB with %d answers of %.1f MiB held (growth %.1f MiB, bound %.1f MiB)",
		mib(base), mib(held), meterClients, mib(int64(len(prefix)+len(rest))), mib(growth), mib(bound))
	if growth > bound {
		t.Errorf("resident memory grew by %.1f MiB with %d answers held, want at most %.1f MiB", mib(growth), meterClients, mib(bound))
	}
	d := tokensAfter(t, p.AdminURL, probeCaller, before, meterClients)
	if want := (tokenCount{meterClients * 12, meterClients * meterCompletion}); d.reported != want || d.estimated != (tokenCount{}) {
		t.Errorf("tokens counted: %v reported, %v estimated; want %v reported (the usage at the end of each answer)", d.reported, d.estimated, want)
	}
}

// holdAnswer sends request, reads exactly the prefix of the answer (all
// the upstream sends before release), calls readAll, waits for release,
// then reads the rest and checks the whole answer.
func holdAnswer(ctx context.Context, client *http.Client, url, request string, headers map[string]string,
	prefix, rest string, release <-chan struct{}, readAll func()) error {
	signalled := false
	signal := func() {
		if !signalled {
			signalled = true
			readAll()
		}
	}
	defer signal()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(request))
	if err != nil {
		return err
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	res, err := client.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = res.Body.Close() }()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", res.StatusCode)
	}
	head := make([]byte, len(prefix))
	if _, err := io.ReadFull(res.Body, head); err != nil {
		return fmt.Errorf("reading the first %d bytes: %w", len(prefix), err)
	}
	signal()
	<-release
	tail, err := io.ReadAll(res.Body)
	if err != nil {
		return fmt.Errorf("reading the rest: %w", err)
	}
	if string(head) != prefix || string(tail) != rest {
		return errors.New("the answer arrived changed")
	}
	return nil
}

// vmRSS returns a process's resident memory in bytes, from /proc.
func vmRSS(t *testing.T, pid int) int64 {
	t.Helper()
	n, err := residentBytes(pid)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// residentBytes is a process's VmRSS, from /proc/<pid>/status.
func residentBytes(pid int) (int64, error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range bytes.Lines(status) {
		if v, ok := bytes.CutPrefix(line, []byte("VmRSS:")); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(string(v)), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("VmRSS %q: %w", v, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// mib returns n bytes in MiB.
func mib(n int64) float64 { return float64(n) / (1 << 20) }
