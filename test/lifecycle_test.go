package test

import (
	"context"
	"errors"
	"github.com/meterproxy/meterproxy/test/poll"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
	"github.com/meterproxy/meterproxy/test/procs"
)

func TestBadConfigRefusesToStart(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		yaml    string
		environ []string
		want    []string
	}{
		{"typo'd key", "server:\n  lisen: \":8080\"\n", nil, []string{"server.lisen: unknown key"}},
		{"negative share", "classes:\n  interactive: {share: -0.5}\n", nil, []string{"classes.interactive.share"}},
		{"shares over 1", "classes:\n  interactive: {share: 0.9}\n  bulk: {share: 0.3}\n", nil, []string{"classes.bulk.share"}},
		{"typo'd env variable", "", []string{"METERPROXY_UPSTREAM_APIKEY=" + upstreamKey}, []string{"METERPROXY_UPSTREAM_APIKEY"}},
		{"caller key missing", "callers:\n  - {name: a, key_env: NOT_SET, class: bulk}\n", nil, []string{"callers[0].key_env"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, tt.yaml)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, meterproxyBin, "serve", "--config", path)
			cmd.Env = tt.environ
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("exit %v, want status 1; output:\n%s", err, out)
			}
			for _, want := range tt.want {
				if !strings.Contains(string(out), want) {
					t.Errorf("output does not name %q:\n%s", want, out)
				}
			}
			if strings.Contains(string(out), upstreamKey) {
				t.Error("output contains the key")
			}
		})
	}
}

func writeFile(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "meterproxy.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// gate holds requests to /gated until opened, and says when one arrives.
type gate struct {
	arrived chan struct{}
	open    chan struct{}
	next    http.Handler
}

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/gated" {
		g.arrived <- struct{}{}
		<-g.open
		_, _ = io.WriteString(w, `{"ok":true}`)
		return
	}
	g.next.ServeHTTP(w, r)
}

// TestSIGTERMDrains: on SIGTERM /readyz turns false, new connections are
// refused, the admitted request and the held one both finish, and the
// process exits 0.
func TestSIGTERMDrains(t *testing.T) {
	t.Parallel()
	g := &gate{arrived: make(chan struct{}, 1), open: make(chan struct{}), next: fakeprovider.New(fakeprovider.Config{})}
	up := startUpstream(t, g)
	cfg := baseConfig(up.URL)
	cfg.set("account.max_in_flight", 1) // the gated request holds the only slot
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	p, err := procs.StartProxy(ctx, meterproxyBin, cfg.write(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Wait(30 * time.Second) })
	client := newClient(t, 2)
	done := make(chan int, 2)
	go func() {
		status, _, _ := post(t, client, p.URL+"/v1/gated", "{}", nil)
		done <- status
	}()
	<-g.arrived // admitted and in flight upstream
	go func() {
		status, _, _ := post(t, client, p.URL+"/v1/chat/completions", `{"model":"m","messages":[]}`, nil)
		done <- status
	}()
	waitFor(t, "the second request to be held", func() bool {
		return sum(scrape(t, p.AdminURL), "meterproxy_queue_depth", map[string]string{"class": "bulk"}) == 1
	})
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitReadyz(t, p.AdminURL, http.StatusServiceUnavailable)
	// Readiness turns false just before the listener closes, so a dial in
	// between may still connect: it only connects, sending nothing that
	// could queue behind the held request, until one is refused — while
	// both requests are still in progress.
	addr := strings.TrimPrefix(p.URL, "http://")
	waitFor(t, "new connections to be refused while draining", func() bool {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			return true
		}
		_ = conn.Close()
		return false
	})
	close(g.open)
	for range 2 {
		if status := <-done; status != http.StatusOK {
			t.Errorf("a request in progress ended %d, want 200", status)
		}
	}
	if err := p.Wait(30 * time.Second); err != nil {
		t.Errorf("exit: %v, want status 0", err)
	}
}

// waitReadyz polls /readyz until it answers want, as a load balancer would.
func waitReadyz(t *testing.T, adminURL string, want int) {
	t.Helper()
	waitFor(t, "/readyz to answer "+http.StatusText(want), func() bool {
		res, err := http.Get(adminURL + "/readyz")
		if err != nil {
			return false
		}
		_ = res.Body.Close()
		return res.StatusCode == want
	})
}

// waitFor is poll.Until.
func waitFor(t *testing.T, what string, cond func() bool) { t.Helper(); poll.Until(t, what, cond) }
