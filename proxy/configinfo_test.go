package proxy

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestConfigInfo: issue 37 (item 5). meterproxy_config_info is one series
// naming the fleet hash and the mode in force, replaced whole by a
// reload, and /admin/state says the same.
func TestConfigInfo(t *testing.T) {
	p := newTestProxy(t, proxyOpts{upstream: echoUpstream()})
	live := *p.handler.live.Load()
	for _, tt := range []struct {
		hash   string
		shadow bool
		mode   string
	}{{"aaaaaaaaaaaa", false, "enforce"}, {"bbbbbbbbbbbb", true, "shadow"}} {
		live.ConfigHash, live.Shadow = tt.hash, tt.shadow
		p.handler.Reconfigure(live)
		want := "# HELP meterproxy_config_info " + configInfoHelp + "\n# TYPE meterproxy_config_info gauge\n" +
			`meterproxy_config_info{hash="` + tt.hash + `",mode="` + tt.mode + "\"} 1\n"
		if err := testutil.GatherAndCompare(p.reg, strings.NewReader(want), "meterproxy_config_info"); err != nil {
			t.Error(err)
		}
		if st := p.handler.State(); st.ConfigHash != tt.hash || st.Mode != tt.mode {
			t.Errorf("/admin/state says config_hash %q, mode %q; want %q, %q", st.ConfigHash, st.Mode, tt.hash, tt.mode)
		}
	}
}
