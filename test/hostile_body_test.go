package test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"mime/multipart"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// Issue 21, items 2 and 7, against the real binary: bodies whose model or
// charge the proxy and a provider could read differently — duplicate keys,
// a byte order mark, a compressed body, the model in a form, an Azure
// deployment spelt another way — are refused before any upstream call, or
// land in the pool the provider serves.

// lastWinsUpstream is a strict provider double: it reads a JSON body as
// encoding/json does (the last of duplicate keys, as the providers do), or
// a form's model field, and records the model of every request it served.
type lastWinsUpstream struct {
	mu     sync.Mutex
	served []string // path and model of each request
}

func (u *lastWinsUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var model string
	if strings.HasPrefix(r.Header.Get("Content-Type"), "multipart/form-data") {
		model = r.FormValue("model")
	} else {
		var b struct {
			Model string `json:"model"`
		}
		_ = json.NewDecoder(r.Body).Decode(&b)
		model = b.Model
	}
	u.mu.Lock()
	u.served = append(u.served, r.URL.EscapedPath()+" "+model)
	u.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"id":"x","object":"chat.completion","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`))
}

// count is how many requests the upstream served.
func (u *lastWinsUpstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.served)
}

// since is the path and model of each request served after the first n.
func (u *lastWinsUpstream) since(n int) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.served[n:]...)
}

// refusedWith checks an answer is status with the error code and a
// message that contains each of words.
func refusedWith(t *testing.T, what string, status int, body []byte, wantStatus int, code string, words ...string) {
	t.Helper()
	var e struct {
		Error struct {
			Message string `json:"message"`
			Code    string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || status != wantStatus || e.Error.Code != code {
		t.Errorf("%s: %d %s, want %d with code %s", what, status, body, wantStatus, code)
		return
	}
	for _, w := range words {
		if !strings.Contains(e.Error.Message, w) {
			t.Errorf("%s: message %q does not name %s", what, e.Error.Message, w)
		}
	}
}

// TestHostileBodies: a cheap pool (gpt-4o-mini, 2 a second) and an
// expensive one (gpt-4o). {"model":"gpt-4o-mini","model":"gpt-4o"} was
// admitted under the cheap pool and served on the expensive one; a
// repeated max_tokens was charged by its first value; a gzip body, a BOM
// before the JSON, a form's model and an Azure deployment in another case
// all landed in the default pool.
func TestHostileBodies(t *testing.T) {
	t.Parallel()
	up := &lastWinsUpstream{}
	upstream := startUpstream(t, up)
	cfg := baseConfig(upstream.URL)
	cfg.withCallers()
	cfg.set("account.tokens_per_minute", 6_000_000)
	cfg.set("account.models", []map[string]any{
		{"name": "cheap", "match": []string{"gpt-4o-mini*"}, "requests_per_minute": 120, "tokens_per_minute": 600_000, "max_in_flight": 2},
		{"name": "expensive", "match": []string{"gpt-4o*"}, "requests_per_minute": 6000, "tokens_per_minute": 600_000, "max_in_flight": 100},
	})
	p := startProxy(t, cfg, fleetEnv, chatKey, importKey)
	client := newClient(t, 4)
	auth := map[string]string{"Authorization": "Bearer " + chatKey}
	chat := p.URL + "/v1/chat/completions"
	admitted := func(pool string) float64 {
		return scrape(t, p.AdminURL).Sum("meterproxy_admissions_total", map[string]string{"pool": pool})
	}

	t.Run("duplicate keys", func(t *testing.T) {
		before := up.count()
		for _, tt := range []struct{ body, key string }{
			{`{"model":"gpt-4o-mini","model":"gpt-4o","messages":[]}`, `"model"`},
			{`{"model":"gpt-4o-mini","mod\u0065l":"gpt-4o","messages":[]}`, `"model"`},
			{`{"model":"gpt-4o","max_tokens":1,"max_tokens":8000,"messages":[]}`, `"max_tokens"`},
			{`{"model":"gpt-4o","n":1,"messages":[],"n":8}`, `"n"`},
			{`{"model":"gpt-4o","stream":false,"stream":true,"messages":[]}`, `"stream"`},
		} {
			status, _, body := post(t, client, chat, tt.body, auth)
			refusedWith(t, tt.body, status, body, http.StatusBadRequest, "duplicate_key", tt.key)
		}
		if got := up.count() - before; got != 0 {
			t.Errorf("%d bodies with duplicate keys reached the upstream", got)
		}
	})

	t.Run("strings for numbers", func(t *testing.T) {
		before := up.count()
		status, _, body := post(t, client, chat, `{"model":"gpt-4o","max_tokens":"8000","messages":[]}`, auth)
		refusedWith(t, "max_tokens as a string", status, body, http.StatusBadRequest, "bad_request", `"max_tokens"`)
		if got := up.count() - before; got != 0 {
			t.Errorf("a max_tokens string reached the upstream")
		}
	})

	t.Run("byte order mark", func(t *testing.T) {
		before := up.count()
		status, _, body := post(t, client, chat, "\xEF\xBB\xBF"+`{"model":"gpt-4o","messages":[]}`, auth)
		refusedWith(t, "BOM", status, body, http.StatusBadRequest, "bad_request", "byte order mark")
		if got := up.count() - before; got != 0 {
			t.Errorf("a body with a BOM reached the upstream")
		}
	})

	t.Run("compressed body", func(t *testing.T) {
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		_, _ = zw.Write([]byte(`{"model":"gpt-4o","messages":[]}`))
		_ = zw.Close()
		before := up.count()
		for _, enc := range []string{"gzip", "br", "deflate", "GZIP", "identity, gzip"} {
			status, _, body := post(t, client, chat, gz.String(), map[string]string{"Authorization": "Bearer " + chatKey, "Content-Encoding": enc})
			refusedWith(t, "Content-Encoding "+enc, status, body, http.StatusUnsupportedMediaType, "unsupported_encoding", "Content-Encoding")
		}
		if got := up.count() - before; got != 0 {
			t.Errorf("%d compressed bodies reached the upstream", got)
		}
		status, _, _ := post(t, client, chat, `{"model":"gpt-4o","messages":[]}`, map[string]string{"Authorization": "Bearer " + chatKey, "Content-Encoding": "identity"})
		if status != http.StatusOK {
			t.Errorf("Content-Encoding identity: %d, want it forwarded", status)
		}
	})

	t.Run("form model", func(t *testing.T) {
		form := func(models ...string) (string, string) {
			var b bytes.Buffer
			mw := multipart.NewWriter(&b)
			for _, m := range models {
				_ = mw.WriteField("model", m)
			}
			fw, _ := mw.CreateFormFile("file", "a.wav")
			_, _ = fw.Write(bytes.Repeat([]byte{0x52}, 1000))
			_ = mw.Close()
			return b.String(), mw.FormDataContentType()
		}
		body, ct := form("gpt-4o-mini")
		cheap := admitted("cheap")
		status, _, answer := post(t, client, p.URL+"/v1/audio/transcriptions", body, map[string]string{"Authorization": "Bearer " + chatKey, "Content-Type": ct})
		if status != http.StatusOK {
			t.Fatalf("transcription: %d %s", status, answer)
		}
		if got := admitted("cheap") - cheap; got != 1 {
			t.Errorf("a form naming gpt-4o-mini: %v admissions in its pool, want 1", got)
		}
		body, ct = form("gpt-4o-mini", "gpt-4o")
		before := up.count()
		status, _, answer = post(t, client, p.URL+"/v1/audio/transcriptions", body, map[string]string{"Authorization": "Bearer " + chatKey, "Content-Type": ct})
		refusedWith(t, "two model fields", status, answer, http.StatusBadRequest, "duplicate_key", `"model"`)
		if up.count() != before {
			t.Error("a form with two model fields reached the upstream")
		}
	})

	t.Run("azure deployments", func(t *testing.T) {
		cheap := admitted("cheap")
		status, _, answer := post(t, client, p.URL+"/openai/deployments/GPT-4o-Mini/chat/completions?api-version=2024-10-21", `{"messages":[]}`, auth)
		if status != http.StatusOK {
			t.Fatalf("deployment in upper case: %d %s", status, answer)
		}
		if got := admitted("cheap") - cheap; got != 1 {
			t.Errorf("deployment GPT-4o-Mini: %v admissions in the gpt-4o-mini pool, want 1", got)
		}
		before := up.count()
		// A ";" is refused anywhere in a path, a deployment's included.
		for dep, says := range map[string]string{"gpt-4o-mini.": "deployment", "gpt-4o-mini%2E": "deployment", "gpt%2D4o-mini": "deployment",
			"gpt-4o-mini;v=1": "';' parameters", "gpt-4o-mini%3Bv=1": "';' parameters"} {
			status, _, answer := post(t, client, p.URL+"/openai/deployments/"+dep+"/chat/completions?api-version=2024-10-21", `{"messages":[]}`, auth)
			refusedWith(t, "deployment "+dep, status, answer, http.StatusBadRequest, "non_canonical_path", says)
		}
		if up.count() != before {
			t.Errorf("a deployment spelt another way reached the upstream: %v", up.since(before))
		}
	})
}
