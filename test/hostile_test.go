package test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/procs"
)

// The security review of issue 11, item by item, against the real binary:
// each case is a request an attacker with no key (or another account's
// key) can send, and what meterproxy must answer.

// chatBody is a small, valid chat completion request.
const chatBody = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`

// recordingUpstream answers every request 200 (a JSON body), accepts
// WebSocket upgrades with a 101 as a Realtime endpoint would, and answers
// 429 with the provider's "exhausted for six hours" headers to requests
// that carry X-Test-Throttle. It records the method and path of each.
type recordingUpstream struct {
	mu   sync.Mutex
	seen []string
}

func (u *recordingUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.seen = append(u.seen, r.Method+" "+r.URL.EscapedPath())
	u.mu.Unlock()
	switch {
	case r.Header.Get("Upgrade") != "":
		w.Header().Set("Connection", "Upgrade")
		w.Header().Set("Upgrade", r.Header.Get("Upgrade"))
		w.WriteHeader(http.StatusSwitchingProtocols)
		return
	case r.Header.Get("X-Test-Throttle") != "":
		w.Header().Set("Retry-After", "21600")
		w.Header().Set("X-Ratelimit-Limit-Requests", "1000")
		w.Header().Set("X-Ratelimit-Remaining-Requests", "0")
		w.Header().Set("X-Ratelimit-Reset-Requests", "6h0m0s")
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"id":"x","object":"chat.completion","choices":[]}`))
}

// saw reports whether the upstream received a request whose method and
// path contain s.
func (u *recordingUpstream) saw(s string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, x := range u.seen {
		if strings.Contains(x, s) {
			return true
		}
	}
	return false
}

// rawConn dials addr and writes raw as it is, with a 30 s deadline on the
// connection, which is closed at cleanup.
func rawConn(t *testing.T, addr, raw string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	return c
}

// rawStatus writes raw to addr and returns the status line's code and the
// response's headers.
func rawStatus(t *testing.T, addr, raw string) (int, http.Header) {
	t.Helper()
	c := rawConn(t, addr, raw)
	defer func() { _ = c.Close() }()
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%q: %v", strings.SplitN(raw, "\r\n", 2)[0], err)
	}
	_ = res.Body.Close()
	return res.StatusCode, res.Header
}

func hostAddr(url string) string { return strings.TrimPrefix(url, "http://") }

// h2cMaxStreams opens an HTTP/2 connection with prior knowledge to addr
// and returns the SETTINGS_MAX_CONCURRENT_STREAMS of the server's first
// SETTINGS frame (RFC 9113 section 6.5), or -1 if it sends none.
func h2cMaxStreams(t *testing.T, addr string) int64 {
	t.Helper()
	// The client preface, then an empty SETTINGS frame.
	c := rawConn(t, addr, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
	var head [9]byte // length (3), type (1), flags (1), stream (4)
	if _, err := io.ReadFull(c, head[:]); err != nil {
		t.Fatal(err)
	}
	length := int(head[0])<<16 | int(head[1])<<8 | int(head[2])
	if head[3] != 0x4 || length%6 != 0 {
		t.Fatalf("the server's first frame is of type %d, length %d: not SETTINGS", head[3], length)
	}
	payload := make([]byte, length)
	if _, err := io.ReadFull(c, payload); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < length; i += 6 {
		if id := int(payload[i])<<8 | int(payload[i+1]); id == 0x3 {
			return int64(payload[i+2])<<24 | int64(payload[i+3])<<16 | int64(payload[i+4])<<8 | int64(payload[i+5])
		}
	}
	return -1
}

// TestHostileCallers runs the review's items 1, 4, 5, 6, 7 and 9 against
// one proxy in pass-through mode (no upstream.api_key: each caller's key
// goes upstream), with inject_stream_usage on.
func TestHostileCallers(t *testing.T) {
	t.Parallel()
	up := &recordingUpstream{}
	upstream := startUpstream(t, up)
	cfg := baseConfig(upstream.URL)
	cfg.withCallers()
	cfg.set("upstream.inject_stream_usage", true)
	p := startProxy(t, cfg, fleetEnv, chatKey, importKey)
	addr := hostAddr(p.URL)
	client := newClient(t, 4)

	// Item 1: 7 MB of '[' in a streamed chat request ended the process
	// with a stack overflow in gjson.Valid.
	t.Run("deep nesting", func(t *testing.T) {
		body := `{"model":"m","stream":true,"messages":` + strings.Repeat("[", 7<<20)
		status, _, _, err := postFull(t, client, p.URL+"/v1/chat/completions", body, map[string]string{"Authorization": "Bearer " + chatKey})
		if err != nil || status != http.StatusOK {
			t.Fatalf("deeply nested body: status %d, %v (the process is gone?)", status, err)
		}
		if status, _ := rawStatus(t, hostAddr(p.AdminURL), "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); status != 200 {
			t.Fatalf("healthz %d after the deep body", status)
		}
	})

	// Item 2: Go's default of 250 streams on one h2c connection, each
	// allowed a body of max_body_bytes.
	t.Run("h2c streams per connection", func(t *testing.T) {
		if got := h2cMaxStreams(t, addr); got != 100 {
			t.Errorf("SETTINGS_MAX_CONCURRENT_STREAMS %d, want server.max_concurrent_streams' default 100", got)
		}
	})

	// Item 9: CONNECT and TRACE reached the upstream with the caller's key.
	t.Run("foreign methods", func(t *testing.T) {
		for _, raw := range []string{
			"CONNECT api.openai.com:443 HTTP/1.1\r\nHost: api.openai.com:443\r\nAuthorization: Bearer sk-x\r\n\r\n",
			"TRACE /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-x\r\n\r\n",
		} {
			status, h := rawStatus(t, addr, raw)
			if status != http.StatusMethodNotAllowed || !strings.Contains(h.Get("Allow"), "POST") {
				t.Errorf("%q: %d (Allow %q), want 405 with Allow", strings.Fields(raw)[0], status, h.Get("Allow"))
			}
		}
		if up.saw("CONNECT") || up.saw("TRACE") {
			t.Error("a CONNECT or TRACE reached the upstream")
		}
	})

	// Item 4: an upgrade was relayed with a 101 and the hijacked tunnel
	// carried unmetered traffic. Issue 33: it is answered 426, on which a
	// WebSocket client goes on over HTTP.
	t.Run("upgrades", func(t *testing.T) {
		for _, raw := range []string{
			"GET /v1/assistants HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nAuthorization: Bearer " + chatKey + "\r\n\r\n",
			"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n",
		} {
			if status, _ := rawStatus(t, addr, raw); status != http.StatusUpgradeRequired {
				t.Errorf("%s upgrade: %d, want 426", strings.Fields(raw)[1], status)
			}
		}
		if up.saw("/v1/assistants") {
			t.Error("the WebSocket upgrade reached the upstream")
		}
	})

	// Item 5: a batch path with dot segments skipped admission and reached
	// the upstream as a chat completion; // and a trailing slash skipped
	// token metering.
	t.Run("non-canonical paths", func(t *testing.T) {
		for _, path := range []string{
			"/v1/batches/../chat/completions", "/v1/batches/%2e%2e/chat/completions", "/v1/./chat/completions",
			"//v1/chat/completions", "/v1//chat/completions", "/v1/batches%2F..%2Fchat/completions",
			"/v1/batches%5c..%5cchat/completions",
		} {
			raw := "POST " + path + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + chatKey + "\r\nContent-Length: 2\r\n\r\n{}"
			if status, _ := rawStatus(t, addr, raw); status != http.StatusBadRequest {
				t.Errorf("POST %s: %d, want 400", path, status)
			}
		}
		if up.saw("..") || up.saw("//") || up.saw("/./") || up.saw("%2F") || up.saw("%5c") {
			t.Errorf("a non-canonical path reached the upstream: %v", up.seen)
		}
		before := scrape(t, p.AdminURL).Sum("meterproxy_tokens_total", map[string]string{"caller": "chat-frontend", "kind": "input"})
		if status, _, _ := post(t, client, p.URL+"/v1/chat/completions/", `{"model":"m","messages":[]}`,
			map[string]string{"Authorization": "Bearer " + chatKey}); status != 200 {
			t.Fatalf("trailing slash: %d", status)
		}
		after := scrape(t, p.AdminURL).Sum("meterproxy_tokens_total", map[string]string{"caller": "chat-frontend", "kind": "input"})
		if after <= before {
			t.Error("a chat completion with a trailing slash was not metered")
		}
	})

	// Item 7: a decoy Bearer classified the request while the provider
	// could authenticate with the x-api-key.
	t.Run("two credentials", func(t *testing.T) {
		status, _, body := post(t, client, p.URL+"/v1/messages", `{"model":"m"}`,
			map[string]string{"Authorization": "Bearer sk-decoy", "X-Api-Key": importKey})
		if status != http.StatusBadRequest || !strings.Contains(string(body), `"type":"error"`) {
			t.Errorf("decoy bearer + x-api-key: %d %s, want 400 in Anthropic's shape", status, body)
		}
		if status, _, _ := post(t, client, p.URL+"/v1/messages", `{"model":"m"}`,
			map[string]string{"Authorization": "Bearer " + importKey, "X-Api-Key": importKey}); status != 200 {
			t.Errorf("the same key twice: %d, want it forwarded", status)
		}
	})

	// Item 6: in pass-through mode anyone's 429 (another account's key)
	// held all bulk for six hours; a response to this account's caller
	// holds it at most upstream.max_hold (5 minutes by default).
	t.Run("foreign account's 429", func(t *testing.T) {
		hold := func() float64 { return scrape(t, p.AdminURL).Sum("meterproxy_upstream_hold_seconds", nil) }
		if status, _, _ := post(t, client, p.URL+"/v1/chat/completions", chatBody,
			map[string]string{"Authorization": "Bearer sk-another-account", "X-Test-Throttle": "1"}); status != 429 {
			t.Fatalf("the upstream's 429 was not forwarded: %d", status)
		}
		// The hold is read from the store's answer, which the next
		// admission brings.
		_, _, _ = post(t, client, p.URL+"/v1/chat/completions", chatBody, map[string]string{"Authorization": "Bearer sk-another-account"})
		if got := hold(); got != 0 {
			t.Errorf("an unknown key's 429 holds bulk for %.0f s", got)
		}
		if status, _, _ := post(t, client, p.URL+"/v1/chat/completions", chatBody,
			map[string]string{"Authorization": "Bearer " + chatKey, "X-Test-Throttle": "1"}); status != 429 {
			t.Fatalf("the upstream's 429 was not forwarded: %d", status)
		}
		_, _, _ = post(t, client, p.URL+"/v1/chat/completions", chatBody, map[string]string{"Authorization": "Bearer " + chatKey})
		if got := hold(); got <= 0 || got > 300 {
			t.Errorf("a known caller's 429 of six hours holds bulk for %.0f s, want (0, 300]", got)
		}
	})
}

// TestHostileOpenRelay: item 3. With the provider key set and unknown
// callers forwarded, a request with no credential got the provider key.
// meterproxy refuses to start on that, naming the key that opts in.
func TestHostileOpenRelay(t *testing.T) {
	t.Parallel()
	cfg := baseConfig("http://127.0.0.1:1")
	cfg.withCallers()
	env := append([]string{"METERPROXY_UPSTREAM_API_KEY=sk-provider-secret"}, fleetEnv...)
	_, err := startProxyErr(t, cfg, env)
	if err == nil || !strings.Contains(err.Error(), "upstream.key_for_unknown_callers") {
		t.Fatalf("started (or failed for another reason) with the provider key open to anyone: %v", err)
	}
	if strings.Contains(err.Error(), "sk-provider-secret") {
		t.Error("the refusal printed the provider key")
	}
}

// TestHostileBodyDeclaredNotSent: item 2's probe. Connections that
// declare a body of max_body_bytes and send one byte took 32 MiB each
// before any byte arrived (40 of them: 1.3 GiB). Now the buffer grows as
// bytes arrive: 40 such connections leave the proxy's resident memory
// within 40 MiB of where it started, an interactive caller is served
// beside them, and each is answered 408 at server.body_read_timeout.
func TestHostileBodyDeclaredNotSent(t *testing.T) {
	t.Parallel()
	up := &recordingUpstream{}
	cfg := baseConfig(startUpstream(t, up).URL)
	cfg.withCallers()
	cfg.set("server.body_read_timeout", "3s")
	p := startProxy(t, cfg, fleetEnv, chatKey, importKey)
	rss := func() float64 { return scrape(t, p.AdminURL).Sum("process_resident_memory_bytes", nil) }
	before := rss()
	const conns = 40
	answers := make(chan int, conns)
	for range conns {
		c, err := net.Dial("tcp", hostAddr(p.URL))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		_ = c.SetDeadline(time.Now().Add(time.Minute))
		if _, err := fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n{", 32<<20); err != nil {
			t.Fatal(err)
		}
		go func() {
			res, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				answers <- 0
				return
			}
			_ = res.Body.Close()
			answers <- res.StatusCode
		}()
	}
	// Until the read deadline answers them, the 40 are all open.
	if status, _, _ := post(t, newClient(t, 1), p.URL+"/v1/chat/completions", chatBody,
		map[string]string{"Authorization": "Bearer " + chatKey}); status != 200 {
		t.Errorf("interactive beside the 40: %d", status)
	}
	during := rss()
	for range conns {
		if status := <-answers; status != http.StatusRequestTimeout {
			t.Errorf("a connection that never sent its body got %d, want 408 at the read deadline", status)
		}
	}
	t.Logf("RSS before %.1f MiB, with 40 connections declaring 32 MiB each %.1f MiB", before/(1<<20), during/(1<<20))
	if during-before > 40<<20 {
		t.Errorf("RSS grew by %.0f MiB for 40 bodies of one byte", (during-before)/(1<<20))
	}
}

// filler is an endless reader of spaces.
type filler struct{}

func (filler) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	return len(p), nil
}

// TestHostileUploadStreams: item 2's uploads. A 500 MB file upload goes
// through the real binary whole, without the proxy holding it: its
// resident memory grows by less than 64 MiB (it grew by the upload's size
// when every body was read whole first) — a raw body, and a batch file's
// form that the proxy meters as it passes (issue 31), its one 500 MB line
// read no further than 8 MiB.
func TestHostileUploadStreams(t *testing.T) {
	t.Parallel()
	const size = 500 << 20
	raw := func() (io.Reader, int64, string) { return io.LimitReader(filler{}, size), size, "application/jsonl" }
	form := func() (io.Reader, int64, string) {
		head := "--b0undary\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n" +
			"--b0undary\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\n\r\n"
		tail := "\r\n--b0undary--\r\n"
		return io.MultiReader(strings.NewReader(head), io.LimitReader(filler{}, size), strings.NewReader(tail)),
			int64(len(head)+len(tail)) + size, "multipart/form-data; boundary=b0undary"
	}
	for name, body := range map[string]func() (io.Reader, int64, string){"raw": raw, "batch form": form} {
		t.Run(name, func(t *testing.T) { checkUploadStreams(t, body) })
	}
}

// checkUploadStreams sends body's upload through the real binary and
// checks it passed whole without growing the proxy by 64 MiB.
func checkUploadStreams(t *testing.T, body func() (io.Reader, int64, string)) {
	src, size, contentType := body()
	var got atomic.Int64
	upstream := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		got.Store(n)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"file-1","object":"file"}`)
	}))
	cfg := baseConfig(upstream.URL)
	cfg.withCallers()
	p := startProxy(t, cfg, fleetEnv, chatKey, importKey)
	rss := func() float64 { return scrape(t, p.AdminURL).Sum("process_resident_memory_bytes", nil) }
	before := rss()
	peak := make(chan float64, 1)
	done := make(chan struct{})
	go func() {
		most := 0.0
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			if m, err := procs.Scrape(context.Background(), p.AdminURL); err == nil {
				most = max(most, m.Sum("process_resident_memory_bytes", nil))
			}
			select {
			case <-done:
				peak <- most
				return
			case <-tick.C:
			}
		}
	}()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, p.URL+"/v1/files", src)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = size
	req.Header.Set("Authorization", "Bearer "+importKey)
	req.Header.Set("Content-Type", contentType)
	res, err := newClient(t, 1).Do(req)
	close(done)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	most := <-peak
	t.Logf("500 MB upload: RSS before %.1f MiB, peak %.1f MiB", before/(1<<20), most/(1<<20))
	if res.StatusCode != 200 || got.Load() != size {
		t.Fatalf("upload: %d, upstream read %d of %d bytes", res.StatusCode, got.Load(), size)
	}
	if most-before > 64<<20 {
		t.Errorf("a 500 MB upload grew the proxy by %.0f MiB", (most-before)/(1<<20))
	}
}
