package test

import (
	"context"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/procs"
	"go.yaml.in/yaml/v3"
)

// config is a meterproxy config file as a tree, set by dotted keys.
type config map[string]any

// baseConfig listens on free loopback ports, logs everything as JSON and
// forwards to upstreamURL.
func baseConfig(upstreamURL string) config {
	c := config{}
	c.set("server.listen", "127.0.0.1:0")
	c.set("server.admin_listen", "127.0.0.1:0")
	c.set("server.shutdown_grace", "10s")
	c.set("upstream.url", upstreamURL)
	c.set("log.level", "debug")
	c.set("log.format", "json")
	return c
}

// withCallers configures the two callers most tests use: chat-frontend
// (interactive, key chatKey) and nightly-import (bulk, key importKey), whose
// keys come from fleetEnv.
func (c config) withCallers() {
	c.set("callers", []map[string]any{
		{"name": "chat-frontend", "key_env": "CHAT_KEY", "class": "interactive"},
		{"name": "nightly-import", "key_env": "IMPORT_KEY", "class": "bulk"},
	})
}

func (c config) set(key string, v any) {
	m := map[string]any(c)
	parts := strings.Split(key, ".")
	for _, p := range parts[:len(parts)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	m[parts[len(parts)-1]] = v
}

func (c config) write(t *testing.T) string {
	t.Helper()
	b, err := yaml.Marshal(map[string]any(c))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "meterproxy.yaml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// startProxy runs meterproxy on cfg. At cleanup it stops it with SIGTERM,
// requires a clean exit, and fails the test if any of secrets was logged.
func startProxy(t *testing.T, cfg config, environ []string, secrets ...string) *procs.Proxy {
	t.Helper()
	return startProxyFile(t, cfg.write(t), environ, secrets...)
}

// startProxyErr is startProxy for a config that may be refused: the
// error of a process that exits before serving comes back, with its logs.
func startProxyErr(t *testing.T, cfg config, environ []string) (*procs.Proxy, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	p, err := procs.StartProxy(ctx, meterproxyBin, cfg.write(t), environ)
	if err == nil {
		t.Cleanup(func() { _ = p.Stop(30 * time.Second) })
	}
	return p, err
}

// startProxyFile is startProxy on a config file that exists already.
func startProxyFile(t *testing.T, path string, environ []string, secrets ...string) *procs.Proxy {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	p, err := procs.StartProxy(ctx, meterproxyBin, path, environ)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(30 * time.Second); err != nil {
			t.Errorf("meterproxy did not stop cleanly: %v", err)
		}
		if found := p.LogsContain(secrets...); len(found) > 0 {
			t.Errorf("meterproxy logged %d secret(s)", len(found))
		}
		if t.Failed() {
			t.Logf("meterproxy logs:\n%s", tail(p.Logs(), 60))
			if lines := matching(p.Logs(), `"reason":"upstream_unreachable"`, 20); lines != "" {
				// A busy run's last lines are its last requests; the
				// upstream failures a run did not expect are often earlier.
				t.Logf("meterproxy's upstream_unreachable lines (the first 20):\n%s", lines)
			}
		}
	})
	return p
}

// matching is the first n lines of s that contain sub, joined.
func matching(s, sub string, n int) string {
	var out []string
	for line := range strings.Lines(s) {
		if strings.Contains(line, sub) {
			out = append(out, strings.TrimRight(line, "\n"))
			if len(out) == n {
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

func tail(s string, lines int) string {
	all := strings.Split(s, "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// startUpstream serves h on a loopback port for the test's lifetime.
func startUpstream(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s
}

// post sends body to url with headers and returns status, headers, body;
// a failed transfer fails the test.
func post(t *testing.T, client *http.Client, url, body string, headers map[string]string) (int, http.Header, []byte) {
	t.Helper()
	status, h, b, err := postFull(t, client, url, body, headers)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	return status, h, b
}

// postRaw is post for answers that may break off: the error comes back,
// with the bytes read before it.
func postRaw(t *testing.T, client *http.Client, url, body string, headers map[string]string) (int, []byte, error) {
	t.Helper()
	status, _, b, err := postFull(t, client, url, body, headers)
	return status, b, err
}

func postFull(t *testing.T, client *http.Client, url, body string, headers map[string]string) (int, http.Header, []byte, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	res, err := client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, b, errors.Join(err, res.Body.Close())
}

// newClient returns a client with its own pool, closed at cleanup.
func newClient(t *testing.T, conns int) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = conns
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// tickUntil calls f on wg every interval until ctx ends, from a goroutine
// of wg's, each call on a goroutine of its own: a load that does not
// depend on how fast it is answered.
func tickUntil(ctx context.Context, wg *sync.WaitGroup, every time.Duration, f func()) {
	wg.Go(func() {
		tk := time.NewTicker(every)
		defer tk.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
				wg.Go(f)
			}
		}
	})
}

// answerTally counts the statuses of answers by who sent the requests.
type answerTally struct {
	mu sync.Mutex
	m  map[string]map[int]int
}

func newAnswerTally() *answerTally { return &answerTally{m: map[string]map[int]int{}} }

// send posts body to url with key as a bearer token and counts the
// answer's status under who. A request that fails, as one cut off when
// the run ends while it waits, counts nothing.
func (a *answerTally) send(ctx context.Context, t *testing.T, client *http.Client, who, url, key, body string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return
	}
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := client.Do(req)
	if err != nil {
		return
	}
	_ = res.Body.Close()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m[who] == nil {
		a.m[who] = map[int]int{}
	}
	a.m[who][res.StatusCode]++
}

// counts are the statuses so far, by who.
func (a *answerTally) counts() map[string]map[int]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]map[int]int, len(a.m))
	for who, n := range a.m {
		out[who] = maps.Clone(n)
	}
	return out
}

// startKillable runs meterproxy on cfg for a test that will SIGKILL it:
// its cleanup only waits for the exit.
func startKillable(t *testing.T, cfg config) *procs.Proxy {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	p, err := procs.StartProxy(ctx, meterproxyBin, cfg.write(t), fleetEnv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.Signal(syscall.SIGKILL)
		<-p.Exited()
	})
	return p
}
