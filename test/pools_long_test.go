//go:build load

package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
	"github.com/meterproxy/meterproxy/test/procs"
	"github.com/meterproxy/meterproxy/test/redistest"
)

// TestPoolHeldOnItsOwnHeaders: the upstream's real limit on the small
// model is a tenth of what its pool is configured for. Bulk on that model
// is held on the upstream's headers for it; bulk on the big model is never
// held; neither model gets a 429. Through one replica and through a fleet
// of three on Redis.
func TestPoolHeldOnItsOwnHeaders(t *testing.T) {
	srv := redistest.Start(t)
	for _, replicas := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d replicas", replicas), func(t *testing.T) { runPoolHeld(t, srv, replicas) })
	}
}

// runPoolHeld is one run of TestPoolHeldOnItsOwnHeaders.
func runPoolHeld(t *testing.T, srv *redistest.Server, replicas int) {
	const (
		bigRPM, smallRPM = 1200, 1200 // configured: 20 a second each
		smallReal        = 120        // the upstream's real limit on the small model: 2 a second
		runFor           = 12 * time.Second
	)
	fake := fakeprovider.New(fakeprovider.Config{RPM: 60000, RecordBodies: true, Latency: 20 * time.Millisecond,
		Models: []fakeprovider.ModelLimits{{Name: "gpt-4o", RPM: 60000}, {Name: "gpt-4o-mini", RPM: smallReal}}})
	up := startUpstream(t, fake)
	ps := poolProxies(t, srv, replicas, up.URL, bigRPM, smallRPM)
	p := ps[0]
	ctx, stop := context.WithTimeout(t.Context(), runFor)
	defer stop()
	var bigHeld, smallHeld atomic.Bool
	var watch sync.WaitGroup
	for _, rp := range ps {
		tickUntil(ctx, &watch, 100*time.Millisecond, func() {
			m, err := procs.Scrape(ctx, rp.AdminURL)
			if err != nil {
				return // the run ended during the scrape
			}
			if m.Sum("meterproxy_upstream_hold_seconds", map[string]string{"pool": "big"}) > 0 {
				bigHeld.Store(true)
			}
			if m.Sum("meterproxy_upstream_hold_seconds", map[string]string{"pool": "small"}) > 0 {
				smallHeld.Store(true)
			}
		})
	}
	answers := poolRun(ctx, t, urlsOf(ps), []string{"gpt-4o", "gpt-4o-mini"}, "gpt-4o-mini", time.Second)
	watch.Wait()
	st := fake.Stats()
	t.Logf("answers %v; the upstream served %d, refused %d", answers, st.Served, st.RateLimited)
	if st.RateLimited != 0 {
		t.Errorf("the upstream answered 429 %d times", st.RateLimited)
	}
	if !smallHeld.Load() {
		t.Error("bulk on the small model was never held, though its upstream bucket ran below the reserve")
	}
	if bigHeld.Load() {
		t.Error("bulk on the big model was held: another model's headers moved its pool")
	}
	// /admin/state: every pool, and the provider's last word on each
	// pool's own model.
	res, err := http.Get(p.AdminURL + "/admin/state")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = res.Body.Close() }()
	var state struct {
		Pools         map[string]json.RawMessage `json:"pools"`
		UpstreamPools map[string]struct {
			Requests struct {
				Limit int64 `json:"limit"`
			} `json:"requests"`
		} `json:"upstream_pools"`
	}
	if err := json.NewDecoder(res.Body).Decode(&state); err != nil {
		t.Fatal(err)
	}
	if len(state.Pools) != 3 || state.UpstreamPools["small"].Requests.Limit != smallReal || state.UpstreamPools["big"].Requests.Limit != 60000 {
		t.Errorf("/admin/state: pools %d, upstream by pool %+v; want default, big and small, and each pool's own model's limit", len(state.Pools), state.UpstreamPools)
	}
	byModel := arrivalsByModel(t, fake.Requests())
	big := 0
	for _, n := range byModel["gpt-4o"] {
		big += n
	}
	if want := int(runFor.Seconds() * bigRPM / 60 * bulkPart * 0.9); big < want {
		t.Errorf("the big model got %d requests upstream in %s: want at least %d, bulk's part of its pool's own rate", big, runFor, want)
	}
}
