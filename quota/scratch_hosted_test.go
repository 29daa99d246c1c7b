package quota

import (
	"testing"
	"time"
)

func TestScratchHosted(t *testing.T) {
	for _, lat := range []time.Duration{2 * time.Second, 8 * time.Second} {
		for _, res := range []float64{0.3, 0.2} {
			part := bulkPart{Share: 0.5, Reserve: res, Borrow: true}
			cfg := simConfig{Service: lat, Workers: 80, Rate: 16, Seed: 1, Bulk: part}
			steps := simulate(newSimServer(cfg), adaptiveLimits{Ceiling: 200, Bulk: part}, adaptiveState{}, adaptiveInterval, 300*time.Second, nil)
			t.Logf("lat %v reserve %v: 60-120 %.1f/s 120-300 %.1f/s\n%s", lat, res, throughput(during(steps, 60*time.Second, 120*time.Second)), throughput(during(steps, 120*time.Second, 300*time.Second)), summary(steps, 10*time.Second))
		}
	}
}
