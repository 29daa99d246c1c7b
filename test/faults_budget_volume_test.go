//go:build faults

package test

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/proxy/usage"
	"github.com/meterproxy/meterproxy/test/fakeprovider"
	"github.com/meterproxy/meterproxy/test/procs"
	"github.com/meterproxy/meterproxy/test/redistest"
	"github.com/redis/go-redis/v9"
)

// Issue 31: budgets at volume. Several budgeted callers send on every
// generating path at once, through two replicas sharing one Redis that
// stalls now and then (its answers kept back past store.budget_timeout,
// the calls run all the same): what the upstream served each budget never
// passes it by more than one request's true cost, and what Redis records
// as spent is what the answers' usage costs, within 1%.

// Prices low enough that a budget is a few hundred requests.
const (
	volPriceIn, volPriceOut = 10.0, 100.0 // USD per million tokens: gpt-4o*, claude-sonnet-4*
	volEmbedPriceIn         = 100.0       // text-embedding-3-small
	volCallers              = 4
	volWorkers              = 5 // per caller
	volCallerUSD            = 0.25
	volClassUSD             = 0.8 // below the callers' sum: the class budget binds too
)

// volShapes are every generating path a budget prices: the priced APIs
// of apis_test.go, OpenAI chat streams and Anthropic streams.
var volShapes = append(append([]pricedAPI{}, pricedAPIs...), pricedAPI{budgetShapes[1].path, budgetShapes[1].body, budgetShapes[1].api},
	pricedAPI{budgetShapes[2].path, budgetShapes[2].body, budgetShapes[2].api})

func volKey(i int) string { return fmt.Sprintf("sk-e2e-vol-%02d-ffffffffffffffff", i) }

// volCost is what usage u of a response to a request of api costs at the
// test's prices, in dollars.
func volCost(api usage.API, u usage.Usage) float64 {
	if api == usage.Embeddings {
		return float64(u.Input) * volEmbedPriceIn / 1e6
	}
	return (float64(u.Input)*volPriceIn + float64(u.Output)*volPriceOut) / 1e6
}

// volLedger is what the clients saw: per caller, what its served answers
// cost; the dearest one; the refusals by status and code; anything else.
type volLedger struct {
	mu         sync.Mutex
	spent      [volCallers]float64
	served     [volCallers]int
	dearest    float64
	refusals   map[string]int
	unexpected []string
	sent       atomic.Int64
}

// send sends caller i's request n through base; it reports whether the
// caller may go on (its budget, or its class's, is not spent).
func (l *volLedger) send(ctx context.Context, client *http.Client, base string, i, n int) bool {
	shape := volShapes[n%len(volShapes)]
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+shape.path, strings.NewReader(fmt.Sprintf(shape.body, budgetMaxTokens, n)))
	if err != nil {
		l.note("%v", err)
		return false
	}
	req.Header.Set("Authorization", "Bearer "+volKey(i))
	req.Header.Set("Content-Type", "application/json")
	l.sent.Add(1)
	res, err := client.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			l.note("caller %d request %d %s: %v", i, n, shape.path, err)
		}
		return false
	}
	body, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if err != nil {
		l.note("caller %d request %d %s: reading the answer: %v", i, n, shape.path, err)
		return false
	}
	if res.StatusCode == http.StatusOK {
		m := usage.NewMeter(shape.api, res.Header.Get("Content-Type"), 0)
		_, _ = m.Write(body)
		u := m.Finish(true)
		cost := volCost(shape.api, u)
		l.mu.Lock()
		defer l.mu.Unlock()
		if u.Estimated {
			l.unexpected = append(l.unexpected, fmt.Sprintf("caller %d request %d %s: an answer without usage", i, n, shape.path))
		}
		l.spent[i] += cost
		l.served[i]++
		l.dearest = max(l.dearest, cost)
		return true
	}
	code, kind, _ := errorCode(body)
	code = cmp.Or(code, kind) // Anthropic's shape has no code (a 503's type is api_error)
	l.mu.Lock()
	l.refusals[fmt.Sprintf("%d %s", res.StatusCode, code)]++
	l.mu.Unlock()
	switch {
	case res.StatusCode == http.StatusTooManyRequests && strings.Contains(string(body), "is spent"):
		return false // budget_exceeded: the caller's budget or its class's
	case res.StatusCode == http.StatusTooManyRequests && (code == "max_wait_exceeded" || code == "queue_full"),
		res.StatusCode == http.StatusServiceUnavailable && (code == "store_unavailable" || strings.Contains(string(body), "quota store is unavailable")):
		return true // a stall's refusals: try again
	}
	l.note("caller %d request %d %s: %d %s", i, n, shape.path, res.StatusCode, body)
	return false
}

func (l *volLedger) note(format string, args ...any) {
	l.mu.Lock()
	l.unexpected = append(l.unexpected, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

// volSpent returns what Redis records as spent and reserved on the budget
// named name (caller:<name> or class:<class>), in dollars.
func volSpent(t *testing.T, c *redis.Client, prefix, name string) (spent, reserved float64) {
	t.Helper()
	keys, err := c.Keys(t.Context(), "{"+prefix+":budget}:"+name+":*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("budget %s's hash: %v %v, want one", name, keys, err)
	}
	v, err := c.HMGet(t.Context(), keys[0], "spent", "reserved").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := func(x any) float64 {
		s, _ := x.(string)
		i, _ := strconv.ParseInt(s, 10, 64) // absent: 0
		return float64(i) / 1e9
	}
	return n(v[0]), n(v[1])
}

// TestFaultBudgetsAtVolume: volCallers budgeted bulk callers, volWorkers
// clients each, send every generating path in turn through two replicas
// on one Redis until each is refused budget_exceeded (its own budget or
// the class's, which is below their sum); every ~80 requests the Redis
// stalls for 1.2 s, four times the budget calls' timeout. Then: what the
// upstream served each caller, priced from the usage its answers
// reported, is at most its budget plus the dearest single answer, and the
// class's likewise; Redis holds no reservation, and records as spent what
// the answers cost, within 1%, for every budget; every refusal is one a
// budget or a stall gives.
func TestFaultBudgetsAtVolume(t *testing.T) {
	srv := redistest.Start(t)
	relay := srv.Relay(t, opSettle, opReserve)
	rc := srv.Client(t)
	prefix := redistest.Prefix(t)
	up := startUpstream(t, fakeprovider.New(fakeprovider.Config{Latency: 2 * time.Millisecond, NoLog: true}))
	cfg := fleetConfig(up.URL, srv, prefix)
	cfg.set("store.redis_url", relay.URL())
	cfg.set("store.timeout", "100ms")
	cfg.set("store.budget_timeout", "400ms")
	cfg.set("prices", []map[string]any{
		{"match": []string{"gpt-4o*"}, "input": volPriceIn, "output": volPriceOut},
		{"match": []string{"claude-sonnet-4*"}, "input": volPriceIn, "output": volPriceOut},
		{"match": []string{"text-embedding-3-small"}, "input": volEmbedPriceIn},
	})
	callers := []map[string]any{{"name": "chat-frontend", "key_env": "CHAT_KEY", "class": "interactive"}}
	environ := []string{"CHAT_KEY=" + chatKey}
	secrets := []string{chatKey}
	for i := range volCallers {
		callers = append(callers, map[string]any{"name": fmt.Sprintf("vol-%d", i), "key_env": fmt.Sprintf("VOL%d_KEY", i), "class": "bulk",
			"budget": map[string]any{"usd": volCallerUSD, "per": "day"}})
		environ = append(environ, fmt.Sprintf("VOL%d_KEY=%s", i, volKey(i)))
		secrets = append(secrets, volKey(i))
	}
	cfg.set("callers", callers)
	cfg.set("classes.bulk.budget", map[string]any{"usd": volClassUSD, "per": "day"})
	cfg.set("classes.bulk.max_wait", "10s")
	cfg.set("account.requests_per_minute", 600_000)
	cfg.set("upstream.api_key", "sk-provider-budget-volume")
	cfg.set("classify.unknown_callers", "reject")
	replicas := []*procs.Proxy{startProxy(t, cfg, environ, secrets...), startProxy(t, cfg, environ, secrets...)}

	l := &volLedger{refusals: map[string]int{}}
	client := newClient(t, volCallers*volWorkers+4)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	var workers sync.WaitGroup
	for i := range volCallers {
		for w := range volWorkers {
			workers.Go(func() {
				for n := w; ctx.Err() == nil; n += volWorkers {
					if !l.send(ctx, client, replicas[(n+i)%len(replicas)].URL, i, n) {
						return
					}
				}
			})
		}
	}
	done := make(chan struct{})
	stalls := 0
	var staller sync.WaitGroup
	staller.Go(func() {
		for {
			next := l.sent.Load() + 80
			for l.sent.Load() < next {
				select {
				case <-done:
					return
				case <-time.After(10 * time.Millisecond): // polling the load's progress
				}
			}
			relay.Hold()
			stalls++
			select {
			case <-done:
			case <-time.After(1200 * time.Millisecond): // the stall's length: the fault itself
			}
			relay.Release()
		}
	})
	workers.Wait()
	close(done)
	staller.Wait()
	if ctx.Err() != nil {
		t.Fatalf("the callers were not all refused budget_exceeded within 3 minutes (sent %d)", l.sent.Load())
	}
	for _, u := range l.unexpected {
		t.Error(u)
	}

	var class float64
	for i := range volCallers {
		class += l.spent[i]
	}
	t.Logf("%d requests sent, %v served, $%.4f of the class's $%.2f; %d stalls (budget calls abandoned: %d settles, %d reserves); refusals %v",
		l.sent.Load(), l.served, class, volClassUSD, stalls, relay.Abandoned(opSettle), relay.Abandoned(opReserve), l.refusals)
	if relay.Abandoned(opSettle)+relay.Abandoned(opReserve) == 0 {
		t.Error("no budget call's answer was lost to a stall: the case proves nothing")
	}
	slack := l.dearest + 1e-9
	for i := range volCallers {
		if l.spent[i] > volCallerUSD+slack {
			t.Errorf("caller vol-%d: the upstream served $%.4f on a $%.2f budget (dearest answer $%.4f)", i, l.spent[i], volCallerUSD, l.dearest)
		}
	}
	if class > volClassUSD+slack {
		t.Errorf("class bulk: the upstream served $%.4f on a $%.2f budget (dearest answer $%.4f)", class, volClassUSD, l.dearest)
	}
	if class < 0.7*volClassUSD {
		t.Errorf("only $%.4f of the class's $%.2f served before every caller was refused", class, volClassUSD)
	}

	// Redis: nothing reserved once the settles are made, and spent what
	// the answers cost, ± 1%.
	recorded := func(name string, want float64) {
		t.Helper()
		waitFor(t, name+"'s reservations settled in Redis", func() bool {
			_, reserved := volSpent(t, rc, prefix, name)
			return reserved == 0
		})
		spent, _ := volSpent(t, rc, prefix, name)
		if math.Abs(spent-want) > 0.01*want {
			t.Errorf("budget %s: Redis records $%.6f spent, the answers served cost $%.6f", name, spent, want)
		}
	}
	for i := range volCallers {
		recorded(fmt.Sprintf("caller:vol-%d", i), l.spent[i])
	}
	recorded("class:bulk", class)
}
