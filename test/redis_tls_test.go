package test

import (
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
	"github.com/meterproxy/meterproxy/test/procs"
	"github.com/meterproxy/meterproxy/test/redistest"
)

// TestStoreOverTLS: Redis speaks only TLS, with a certificate from a CA
// made for the test.
//
//   - With store.tls_ca_file naming the CA, two replicas admit through it
//     and share its windows: expected_replicas is 1, so replicas that fell
//     back to their own limits would let twice the allowance through; no
//     call fails, and Redis counts both replicas' heartbeats.
//   - Without it, the system's roots refuse the certificate: the replica
//     starts, reports the store degraded and says why in its log.
//   - A CA file that is not there: meterproxy refuses to start, naming
//     store.tls_ca_file.
func TestStoreOverTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3 s fleet run over TLS; skipped with -short")
	}
	t.Parallel()
	const (
		rpm       = 600 // 10 a second
		perSecond = rpm / 60
	)
	srv := redistest.StartTLS(t)
	prefix := redistest.Prefix(t)
	fake := fakeprovider.New(fakeprovider.Config{Latency: 10 * time.Millisecond})
	up := startUpstream(t, fake)
	cfg := failoverConfig(up.URL, srv.URL(), prefix)
	cfg.set("account.requests_per_minute", rpm)
	cfg.set("account.expected_replicas", 1)
	cfg.set("store.timeout", "1s") // this run is about TLS, not slow calls

	t.Run("without the CA", func(t *testing.T) {
		p := startProxy(t, cfg, fleetEnv, chatKey, importKey)
		client := newClient(t, 1)
		status, _, b := post(t, client, p.URL+"/v1/chat/completions", `{"model":"m","messages":[]}`, map[string]string{"Authorization": "Bearer " + chatKey})
		if status != 200 {
			t.Errorf("on_error local with Redis unreachable: %d %s, want 200 on the local limits", status, b)
		}
		waitFor(t, "the replica to report the store degraded", func() bool { return degraded(t, p) })
		if n := sum(scrape(t, p.AdminURL), "meterproxy_store_errors_total", nil); n == 0 {
			t.Error("meterproxy_store_errors_total is 0 with Redis's certificate refused")
		}
		waitFor(t, "the log to say the certificate was refused", func() bool {
			return strings.Contains(p.Logs(), "certificate signed by unknown authority")
		})
	})

	t.Run("a CA file that is not there", func(t *testing.T) {
		c := failoverConfig(up.URL, srv.URL(), prefix)
		c.set("store.tls_ca_file", filepath.Join(t.TempDir(), "ca.pem"))
		_, err := startProxyErr(t, c, fleetEnv)
		if err == nil || !strings.Contains(err.Error(), "store.tls_ca_file: read the CA bundle") {
			t.Errorf("meterproxy with a missing CA file: %v, want a refusal naming store.tls_ca_file", err)
		}
	})

	cfg.set("store.tls_ca_file", srv.CAFile())
	replicas := []*procs.Proxy{startProxy(t, cfg, fleetEnv, chatKey, importKey), startProxy(t, cfg, fleetEnv, chatKey, importKey)}
	for i, p := range replicas {
		if degraded(t, p) {
			t.Fatalf("replica %d is degraded with the CA configured:\n%s", i, tail(p.Logs(), 10))
		}
	}
	served := fake.Stats().Served
	client := newClient(t, 16)
	out := newOutcomes()
	var stop atomic.Bool
	var wg sync.WaitGroup
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	for _, p := range replicas {
		for range 4 {
			wg.Go(func() {
				for !stop.Load() {
					status, _, b, err := postFull(t, client, p.URL+"/v1/chat/completions", body, map[string]string{"Authorization": "Bearer " + chatKey})
					if err != nil {
						t.Errorf("request: %v", err)
						return
					}
					out.record("interactive", status, b, nil)
				}
			})
		}
	}
	start := time.Now()
	waitFor(t, "three seconds' worth of traffic through Redis over TLS", func() bool {
		return fake.Stats().Served >= served+3*perSecond
	})
	stop.Store(true)
	wg.Wait()

	for i, p := range replicas {
		m := scrape(t, p.AdminURL)
		if n := sum(m, "meterproxy_store_errors_total", nil); n != 0 || sum(m, "meterproxy_store_degraded", nil) != 0 {
			t.Errorf("replica %d: %v failed Redis calls over TLS, degraded %v", i, n, sum(m, "meterproxy_store_degraded", nil))
		}
	}
	if len(out.other) > 0 {
		t.Errorf("answers other than 200 and 429: %v", out.other)
	}
	arrivals := fake.Arrivals()
	for s := range arrivals {
		if s < start.Unix() {
			delete(arrivals, s) // the "without the CA" request
		}
	}
	checkArrivals(t, arrivals, perSecond)
	checkFleetIdentity(t, replicas, out, fake.Stats().Served-served)
	ids, err := srv.Client(t).ZRange(t.Context(), "{"+prefix+"}:heartbeat", 0, -1).Result()
	if err != nil || len(ids) < 2 {
		t.Errorf("heartbeats in Redis: %v, %v; want both replicas", ids, err)
	}
}
