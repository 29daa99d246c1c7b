package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestReloadNamesTheChangedKeys: issue 37 (item 5). A reload that
// applies logs the keys it changed, as a refused one does, with the
// config hash before and after and the mode; a key's value is never in
// the line.
func TestReloadNamesTheChangedKeys(t *testing.T) {
	environ := []string{"APP_KEY=sk-app-secret-value", "OTHER_KEY=sk-other-secret-value"}
	from := reloadYAML("", "")
	r := newTestReloader(t, from, environ)
	before := r.current.configHash()
	to := reloadYAML("", "classes: {bulk: {max_wait: 7s}}\nmode: shadow\n") + "  - {name: other, key_env: OTHER_KEY, class: bulk}\n"
	r.reloadTo(t, to)
	var line struct {
		Msg      string   `json:"msg"`
		Keys     []string `json:"keys"`
		Hash     string   `json:"config_hash"`
		Previous string   `json:"previous_config_hash"`
		Mode     string   `json:"mode"`
	}
	found := false
	for l := range strings.Lines(r.logs.String()) {
		if json.Unmarshal([]byte(l), &line) == nil && line.Msg == "config_reloaded" {
			found = true
			break
		}
	}
	if !found {
		t.Fatalf("no config_reloaded line in\n%s", r.logs.String())
	}
	if want := []string{"mode", "classes.bulk.max_wait", "callers"}; strings.Join(line.Keys, ",") != strings.Join(want, ",") {
		t.Errorf("config_reloaded keys %v, want %v", line.Keys, want)
	}
	if line.Previous != before || line.Hash != r.current.configHash() || line.Hash == before || line.Mode != "shadow" {
		t.Errorf("config_reloaded config_hash %s (previous %s), mode %s; want %s (previous %s), shadow",
			line.Hash, line.Previous, line.Mode, r.current.configHash(), before)
	}
	if st := r.handler.State(); st.ConfigHash != line.Hash || st.Mode != "shadow" {
		t.Errorf("/admin/state says config_hash %s, mode %s after the reload", st.ConfigHash, st.Mode)
	}
	if strings.Contains(r.logs.String(), "secret-value") {
		t.Error("the log holds a caller's key")
	}
}
