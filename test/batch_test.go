package test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
	"github.com/meterproxy/meterproxy/test/procs"
	"github.com/meterproxy/meterproxy/test/redistest"
)

// Issue 31, item 4: batches are inside the budgets. budgetConfig prices
// gpt-4o at $100 / $1000 per million tokens, so at the batch price (half)
// $50 / $500, and gives nightly-import $1 a day.

// batchFileOf is a JSONL batch input file of n chat requests for model,
// each capped at maxTokens output tokens.
func batchFileOf(model string, n, maxTokens int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"custom_id":"r%d","method":"POST","url":"/v1/chat/completions","body":{"model":%q,"max_tokens":%d,"messages":[{"role":"user","content":"summarise record %d"}]}}`+"\n", i, model, maxTokens, i)
	}
	return b.String()
}

// uploadBatchFile uploads content to base's /v1/files as key, as the SDKs
// upload a batch input file (multipart, purpose batch), and returns its id.
func uploadBatchFile(t *testing.T, base, key, content string) string {
	t.Helper()
	var body bytes.Buffer
	w := multipart.NewWriter(&body)
	_ = w.WriteField("purpose", "batch")
	fw, _ := w.CreateFormFile("file", "input.jsonl")
	_, _ = fw.Write([]byte(content))
	_ = w.Close()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/v1/files", &body)
	req.Header.Set("Content-Type", w.FormDataContentType())
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = res.Body.Close() }()
	var f struct{ ID string }
	if err := json.NewDecoder(res.Body).Decode(&f); err != nil || res.StatusCode != http.StatusOK || f.ID == "" {
		t.Fatalf("upload: %d %v", res.StatusCode, err)
	}
	return f.ID
}

// batchObject is what the test reads of an OpenAI batch object, or of an
// error.
type batchObject struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Usage  *struct {
		InputTokens  int64 `json:"input_tokens"`
		OutputTokens int64 `json:"output_tokens"`
	} `json:"usage"`
	Error struct {
		Code, Type, Message string
	} `json:"error"`
}

// batchCall sends method path (with body, as key) to base and decodes the
// answer.
func batchCall(t *testing.T, method, url, key, body string, hdr map[string]string) (int, batchObject) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = res.Body.Close() }()
	var o batchObject
	_ = json.NewDecoder(res.Body).Decode(&o)
	return res.StatusCode, o
}

// createBatch creates a batch on file through base as key.
func createBatch(t *testing.T, base, key, file, outcome string) (int, batchObject) {
	t.Helper()
	return batchCall(t, http.MethodPost, base+"/v1/batches", key,
		`{"input_file_id":"`+file+`","endpoint":"/v1/chat/completions","completion_window":"24h"}`,
		map[string]string{fakeprovider.HeaderBatchOutcome: outcome})
}

// budgetUse is nightly-import's budget as p's metrics show it.
func budgetUse(t *testing.T, p *procs.Proxy) (spent, reserved float64) {
	m := scrape(t, p.AdminURL)
	l := map[string]string{"budget": "caller:nightly-import"}
	return sum(m, "meterproxy_budget_spent_usd", l), sum(m, "meterproxy_budget_reserved_usd", l)
}

// waitBudget waits until p shows nightly-import's budget at spent and
// reserved, to the nanodollar.
func waitBudget(t *testing.T, p *procs.Proxy, what string, spent, reserved float64) {
	t.Helper()
	var s, r float64
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s: last seen spent $%.9f, reserved $%.9f", what, s, r)
		}
	})
	waitFor(t, fmt.Sprintf("%s: spent $%.9f, reserved $%.9f", what, spent, reserved), func() bool {
		s, r = budgetUse(t, p)
		return math.Abs(s-spent) < 1e-9 && math.Abs(r-reserved) < 1e-9
	})
}

// enqueued is meterproxy_batch_enqueued_tokens of bulk on p.
func enqueued(t *testing.T, p *procs.Proxy) float64 {
	return sum(scrape(t, p.AdminURL), "meterproxy_batch_enqueued_tokens", map[string]string{"class": "bulk"})
}

// TestBatchBudgets: a budgeted caller's batches are inside its budget, on
// one replica and on two sharing Redis (each batch created through one
// and retrieved through the other). A batch whose input file's worst case
// (every line's max_tokens at the batch output price) exceeds the budget
// is refused 429 budget_exceeded; one within it is reserved, then
// settled to the usage the batch object reports at the batch price when
// it is retrieved completed — once, however often it is retrieved; a
// failed, expired or cancelled batch gives its reservation back; a batch
// on a file uploaded around the proxy is refused 400 batch_unmetered for
// the budgeted caller and passes for one without a budget.
func TestBatchBudgets(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T) (create, read *procs.Proxy, up string)
	}{
		{"one replica", func(t *testing.T) (*procs.Proxy, *procs.Proxy, string) {
			up := startUpstream(t, fakeprovider.New(fakeprovider.Config{NoLog: true}))
			cfg := baseConfig(up.URL)
			budgetConfig(cfg)
			p := startProxy(t, cfg, fleetEnv, chatKey, importKey)
			return p, p, up.URL
		}},
		{"two replicas on Redis", func(t *testing.T) (*procs.Proxy, *procs.Proxy, string) {
			up := startUpstream(t, fakeprovider.New(fakeprovider.Config{NoLog: true}))
			cfg := fleetConfig(up.URL, redistest.Start(t), redistest.Prefix(t))
			budgetConfig(cfg)
			return startProxy(t, cfg, fleetEnv, chatKey, importKey), startProxy(t, cfg, fleetEnv, chatKey, importKey), up.URL
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			create, read, up := tc.setup(t)
			checkBatchBudgets(t, create, read, up)
		})
	}
}

func checkBatchBudgets(t *testing.T, create, read *procs.Proxy, up string) {
	// 20 lines capped at 200 output tokens: $2 of output at the batch price.
	big := uploadBatchFile(t, create.URL, importKey, batchFileOf("gpt-4o", 20, 200))
	status, o := createBatch(t, create.URL, importKey, big, "")
	if status != http.StatusTooManyRequests || o.Error.Code != "budget_exceeded" || o.Error.Type != "insufficient_quota" {
		t.Errorf("a batch worth $2 on a $1 budget: %d %+v, want 429 budget_exceeded", status, o.Error)
	}
	// 4 lines capped at 100: $0.2 of output, and their input.
	small := uploadBatchFile(t, create.URL, importKey, batchFileOf("gpt-4o", 4, 100))
	status, o = createBatch(t, create.URL, importKey, small, "")
	if status != http.StatusOK || o.ID == "" {
		t.Fatalf("a batch worth $0.2 on a $1 budget: %d %+v, want it created", status, o)
	}
	waitFor(t, "the batch's worst case reserved", func() bool {
		s, r := budgetUse(t, read)
		return s == 0 && r >= 0.2 && r < 0.21
	})
	_, reserved := budgetUse(t, read)
	waitFor(t, "the batch's input enqueued", func() bool { return enqueued(t, read) > 0 })
	t.Logf("created %s: $%.6f reserved, %v input tokens enqueued", o.ID, reserved, enqueued(t, read))

	// Retrieved through the other replica: completed, with usage.
	status, done := batchCall(t, http.MethodGet, read.URL+"/v1/batches/"+o.ID, importKey, "", nil)
	if status != http.StatusOK || done.Status != "completed" || done.Usage == nil {
		t.Fatalf("retrieve: %d %+v", status, done)
	}
	want := (float64(done.Usage.InputTokens)*budgetPriceIn + float64(done.Usage.OutputTokens)*budgetPriceOut) / 2 / 1e6
	waitBudget(t, read, "settled to its usage at the batch price", want, 0)
	waitFor(t, "nothing enqueued", func() bool { return enqueued(t, read) == 0 })
	batchCall(t, http.MethodGet, create.URL+"/v1/batches/"+o.ID, importKey, "", nil) // again: settled once
	t.Logf("completed with %d input and %d output tokens: spent $%.9f", done.Usage.InputTokens, done.Usage.OutputTokens, want)

	checkBatchRefunds(t, create, read, small, want, reserved)

	// A file uploaded to the provider around the proxy.
	around := uploadBatchFile(t, up, importKey, batchFileOf("gpt-4o", 1, 10))
	status, o = createBatch(t, create.URL, importKey, around, "")
	if status != http.StatusBadRequest || o.Error.Code != "batch_unmetered" || !strings.Contains(o.Error.Message, "did not see its input file") {
		t.Errorf("a budgeted batch on a file the proxy never saw: %d %+v, want 400 batch_unmetered naming the reason", status, o.Error)
	}
	if status, o = createBatch(t, create.URL, chatKey, around, ""); status != http.StatusOK {
		t.Errorf("an unbudgeted batch on a file the proxy never saw: %d %+v, want it created", status, o.Error)
	}
	if s, r := budgetUse(t, read); math.Abs(s-want) > 1e-9 || r != 0 {
		t.Errorf("at the end: spent $%.9f, reserved $%.9f; want $%.9f and nothing", s, r, want)
	}
}

// checkBatchRefunds: batches on file that end failed, expired or
// cancelled, reserving reserved each, give it back: nightly-import's
// budget stays at spent.
func checkBatchRefunds(t *testing.T, create, read *procs.Proxy, file string, spent, reserved float64) {
	t.Helper()
	for _, end := range []struct{ outcome, cancel, status string }{
		{"failed", "", "failed"}, {"expired", "", "expired"}, {"", "/cancel", "cancelled"},
	} {
		status, b := createBatch(t, create.URL, importKey, file, end.outcome)
		if status != http.StatusOK {
			t.Fatalf("%s: create %d %+v", end.status, status, b)
		}
		waitBudget(t, read, end.status+" batch reserved", spent, reserved)
		if end.cancel != "" {
			batchCall(t, http.MethodPost, read.URL+"/v1/batches/"+b.ID+end.cancel, importKey, "", nil)
		}
		if _, got := batchCall(t, http.MethodGet, read.URL+"/v1/batches/"+b.ID, importKey, "", nil); got.Status != end.status {
			t.Fatalf("%s: retrieved %+v", end.status, got)
		}
		waitBudget(t, read, end.status+" batch refunded", spent, 0)
	}
}

// anthropicBatchOf is an Anthropic batch body of n requests for
// claude-sonnet-4-5, each capped at maxTokens output tokens.
func anthropicBatchOf(n, maxTokens int) string {
	reqs := make([]string, n)
	for i := range reqs {
		reqs[i] = fmt.Sprintf(`{"custom_id":"r%d","params":{"model":"claude-sonnet-4-5","max_tokens":%d,"messages":[{"role":"user","content":"summarise record %d"}]}}`, i, maxTokens, i)
	}
	return `{"requests":[` + strings.Join(reqs, ",") + `]}`
}

// readResults reads an Anthropic batch's results through url to the end,
// as nightly-import, and returns their messages' input and output tokens.
func readResults(t *testing.T, url string) (in, out int64) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+importKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("results: %v", err)
	}
	for dec := json.NewDecoder(res.Body); dec.More(); {
		var r struct {
			Result struct {
				Message struct {
					Usage struct {
						InputTokens  int64 `json:"input_tokens"`
						OutputTokens int64 `json:"output_tokens"`
					} `json:"usage"`
				} `json:"message"`
			} `json:"result"`
		}
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		in, out = in+r.Result.Message.Usage.InputTokens, out+r.Result.Message.Usage.OutputTokens
	}
	_ = res.Body.Close()
	return in, out
}

// TestAnthropicBatchBudget: a budgeted caller's Anthropic batch is metered
// from its body: over the budget it is refused 429 in Anthropic's shape;
// within it, it is reserved, kept reserved while the batch object reports
// no usage (Anthropic's never does), and settled to its results' usage at
// the batch price once they are read through the proxy to the end; a
// batch cancelled before any request succeeded gives its reservation back.
func TestAnthropicBatchBudget(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, fakeprovider.New(fakeprovider.Config{NoLog: true}))
	cfg := baseConfig(up.URL)
	budgetConfig(cfg)
	p := startProxy(t, cfg, fleetEnv, chatKey, importKey)
	batches := p.URL + "/v1/messages/batches"
	status, o := batchCall(t, http.MethodPost, batches, importKey, anthropicBatchOf(20, 200), nil)
	if status != http.StatusTooManyRequests || o.Error.Type != "insufficient_quota" || !strings.Contains(o.Error.Message, "budget caller:nightly-import") {
		t.Errorf("a batch worth $2 on a $1 budget: %d %+v, want 429 insufficient_quota naming the budget", status, o.Error)
	}
	status, o = batchCall(t, http.MethodPost, batches, importKey, anthropicBatchOf(4, 100), nil)
	if status != http.StatusOK || o.ID == "" {
		t.Fatalf("a batch worth $0.2: %d %+v", status, o)
	}
	waitFor(t, "the batch's worst case reserved", func() bool {
		s, r := budgetUse(t, p)
		return s == 0 && r >= 0.2 && r < 0.21
	})
	_, reserved := budgetUse(t, p)
	if status, _ = batchCall(t, http.MethodGet, batches+"/"+o.ID, importKey, "", nil); status != http.StatusOK {
		t.Fatalf("retrieve: %d", status)
	}
	in, out := readResults(t, batches+"/"+o.ID+"/results")
	want := (float64(in)*budgetPriceIn + float64(out)*budgetPriceOut) / 2 / 1e6
	waitBudget(t, p, "settled to its results' usage at the batch price", want, 0)
	t.Logf("reserved $%.6f; results %d input, %d output tokens: spent $%.9f", reserved, in, out, want)

	status, o = batchCall(t, http.MethodPost, batches, importKey, anthropicBatchOf(4, 100), nil)
	if status != http.StatusOK {
		t.Fatalf("create: %d %+v", status, o)
	}
	waitBudget(t, p, "the second batch reserved", want, reserved)
	batchCall(t, http.MethodPost, batches+"/"+o.ID+"/cancel", importKey, "", nil)
	batchCall(t, http.MethodGet, batches+"/"+o.ID, importKey, "", nil)
	waitBudget(t, p, "the cancelled batch refunded", want, 0)
}
