package proxy

import (
	"context"
	"errors"
	"github.com/meterproxy/meterproxy/test/poll"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testProxy is a Handler in front of an httptest upstream, behind an
// httptest frontend, with its limiter running.
type testProxy struct {
	URL      string // the frontend
	handler  *Handler
	reg      *prometheus.Registry
	admitter *quota.Admitter
	logs     *syncBuffer
}

type proxyOpts struct {
	upstream http.Handler
	mutate   func(*Config, *quota.Config, *classify.Config, *[]classify.Caller)
	environ  map[string]string
	// accountKeys are upstream.accounts' keys, by account name.
	accountKeys map[string]string
	// tracer makes the requests' spans; nil is tracing off.
	tracer trace.TracerProvider
	// access is the access log; nil: off.
	access *AccessLog
	// dial, when set, dials the metered pool's upstream connections.
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

func newTestProxy(t testing.TB, o proxyOpts) *testProxy {
	t.Helper()
	up := httptest.NewServer(o.upstream)
	t.Cleanup(up.Close)
	cfg := Config{Server: DefaultServerConfig(), Upstream: DefaultUpstreamConfig()}
	cfg.Upstream.URL = up.URL
	qcfg := quota.DefaultConfig()
	ccfg := classify.DefaultConfig()
	var callers []classify.Caller
	if o.mutate != nil {
		o.mutate(&cfg, &qcfg, &ccfg, &callers)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := qcfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cl, err := classify.New(ccfg, callers, func(k string) string { return o.environ[k] })
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	reg := prometheus.NewRegistry()
	adm, err := quota.New(qcfg, quota.Deps{Callers: callers, Log: log, Registry: reg}) // in process: nothing to close
	if err != nil {
		t.Fatal(err)
	}
	transport := NewTransport(cfg.Upstream, adm.InFlightLimit())
	if o.dial != nil {
		transport.metered.DialContext = o.dial
	}
	live := Live{Classifier: cl, ClassHeader: ccfg.Header,
		InjectStreamUsage: cfg.Upstream.InjectStreamUsage, Sessions: NewSessionLimits(qcfg.Classes, callers)}
	h, err := NewHandler(cfg, Deps{Live: live, Admitter: adm, Transport: transport,
		Log: log, Registry: reg, AccountKeys: o.accountKeys, Tracer: o.tracer, Access: o.access})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var running sync.WaitGroup // started after NewHandler, as serve does: it sets the admitter's hooks
	running.Go(func() { _ = adm.Run(ctx) })
	front := httptest.NewServer(h)
	t.Cleanup(func() {
		front.Close()
		cancel()
		running.Wait()
		transport.CloseIdleConnections()
		if t.Failed() {
			t.Logf("proxy logs:\n%s", logs.String())
		}
	})
	return &testProxy{URL: front.URL, handler: h, reg: reg, admitter: adm, logs: logs}
}

// do sends a request and returns the status, headers and whole body of
// the response; the body is read and closed here.
func do(t *testing.T, req *http.Request) (int, http.Header, []byte) {
	t.Helper()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(res.Body)
	if err = errors.Join(err, res.Body.Close()); err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, res.Header, body
}

func newRequest(t *testing.T, method, url, body string) *http.Request {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = stringsReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// waitFor is poll.Until.
func waitFor(t *testing.T, what string, cond func() bool) { t.Helper(); poll.Until(t, what, cond) }
