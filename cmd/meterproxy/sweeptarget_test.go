package main

import (
	"bytes"
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/meterproxy/meterproxy/proxy/usage"
)

// TestSweepTarget: the path decides the body's API and the key's header;
// the printed URL carries neither userinfo nor query.
func TestSweepTarget(t *testing.T) {
	for _, tt := range []struct {
		name, base, path, model string
		api                     usage.API
		keyHeader, keyValue     string
		url, shown              string
	}{
		{"openai", "http://127.0.0.1:8081", "/v1/chat/completions", "m", usage.ChatCompletions,
			"Authorization", "Bearer k", "http://127.0.0.1:8081/v1/chat/completions", "http://127.0.0.1:8081/v1/chat/completions"},
		{"a base with a path", "https://gw.example/llm/", "/v1/chat/completions", "m", usage.ChatCompletions,
			"Authorization", "Bearer k", "https://gw.example/llm/v1/chat/completions", "https://gw.example/llm/v1/chat/completions"},
		{"anthropic", "https://api.anthropic.com", "/v1/messages", "claude", usage.Messages,
			"X-Api-Key", "k", "https://api.anthropic.com/v1/messages", "https://api.anthropic.com/v1/messages"},
		{"azure, no model", "https://u:p@r.openai.azure.com", "/openai/deployments/gpt4o/chat/completions?api-version=2024-10-21", "",
			usage.ChatCompletions, "Api-Key", "k",
			"https://u:p@r.openai.azure.com/openai/deployments/gpt4o/chat/completions?api-version=2024-10-21",
			"https://r.openai.azure.com/openai/deployments/gpt4o/chat/completions"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := newSweepTarget(tt.base, tt.path, tt.model, "k", 64)
			if err != nil {
				t.Fatal(err)
			}
			if got.api != tt.api || got.header.Get(tt.keyHeader) != tt.keyValue || got.url != tt.url || got.shown != tt.shown {
				t.Errorf("target %s %v %q, shown %q, headers %v; want %s %q=%q %q, shown %q",
					got.api, got.api, got.url, got.shown, got.header, tt.api, tt.keyHeader, tt.keyValue, tt.url, tt.shown)
			}
			if !bytes.Contains(got.body, []byte(`"max_tokens":64`)) {
				t.Errorf("body %s lacks max_tokens", got.body)
			}
		})
	}
	for _, bad := range [][3]string{
		{"ftp://x", "/v1/chat/completions", "m"},
		{"http://x", "v1/chat/completions", "m"},
		{"http://x", "/v1/embeddings", "m"},
		{"http://x", "/v1/chat/completions", ""},
	} {
		if _, err := newSweepTarget(bad[0], bad[1], bad[2], "", 1); err == nil {
			t.Errorf("newSweepTarget(%q) accepted", bad)
		}
	}
}

// TestSweepTargetOf: the configured key goes only to the configured URL;
// the provider picks the default path; --url or --config is required.
func TestSweepTargetOf(t *testing.T) {
	cfg := defaultConfig()
	cfg.Upstream.URL, cfg.Upstream.APIKey = "https://api.anthropic.com", "sk-configured"
	cfg.Upstream.Provider = "anthropic"
	resolve := func(withConfig bool, args ...string) (sweepTarget, error) {
		fs := flag.NewFlagSet("sweep", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.String("config", "", "")
		f := sweepFlagsFor("sweep", fs)
		if withConfig {
			args = append(args, "--config", "x.yaml")
		}
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		set := map[string]bool{}
		fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
		return sweepTargetOf(cfg, f, set, lookupIn([]string{"OTHER_KEY=sk-other"}))
	}
	if tg, err := resolve(true, "--model", "c"); err != nil || tg.header.Get("X-Api-Key") != "sk-configured" || !strings.HasSuffix(tg.url, "/v1/messages") {
		t.Errorf("the configured upstream: %v, %v; want its key on /v1/messages", tg.url, err)
	}
	if tg, err := resolve(true, "--model", "c", "--url", "http://127.0.0.1:8081"); err != nil || tg.header.Get("X-Api-Key") != "" {
		t.Errorf("another --url: key %q, %v; want the configured key kept from it", tg.header.Get("X-Api-Key"), err)
	}
	if tg, err := resolve(true, "--model", "c", "--url", "http://127.0.0.1:8081", "--api-key-env", "OTHER_KEY"); err != nil || tg.header.Get("X-Api-Key") != "sk-other" {
		t.Errorf("--api-key-env: key %q, %v; want the variable's", tg.header.Get("X-Api-Key"), err)
	}
	if _, err := resolve(false, "--model", "c"); err == nil || !strings.Contains(err.Error(), "--url is required") {
		t.Errorf("no --url nor --config: %v; want --url asked for", err)
	}
	if _, err := resolve(true, "--model", "c", "--api-key-env", "UNSET"); err == nil || !strings.Contains(err.Error(), "UNSET") {
		t.Errorf("an unset --api-key-env: %v; want it named", err)
	}
}

// TestSweepFlagsChecked: out-of-range numbers are refused before anything
// is sent, all at once.
func TestSweepFlagsChecked(t *testing.T) {
	var out, errOut bytes.Buffer
	err := run(t.Context(), []string{"sweep", "--url", "http://127.0.0.1:1", "--model", "m", "--start", "0", "--duration", "0s", "--max-tokens", "0"}, nil, &out, &errOut)
	if err == nil {
		t.Fatal("accepted --start 0 --duration 0s --max-tokens 0")
	}
	for _, want := range []string{"--start (0)", "--duration (0s)", "--max-tokens (0)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if out.Len() != 0 || errOut.Len() != 0 {
		t.Errorf("printed %q %q before refusing", out.String(), errOut.String())
	}
}
