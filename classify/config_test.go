package classify

import (
	"reflect"
	"strings"
	"testing"

	"github.com/meterproxy/meterproxy/internal/configcheck"
)

func TestDefaultConfigIsValid(t *testing.T) {
	cfg := DefaultConfig()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v", err)
	}
	want := Config{
		Header:         "X-Meterproxy-Class",
		DefaultClass:   Bulk,
		UnknownCallers: "forward",
		Paths:          []PathRule{{Prefix: "/v1/batches", Class: Bulk}},
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("DefaultConfig() = %+v, want %+v", cfg, want)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
		want []string // substrings, each expected in the error; nil means valid
	}{
		{"defaults", func(*Config) {}, nil},
		{"reject", func(c *Config) { c.UnknownCallers = "reject" }, nil},
		{"no paths", func(c *Config) { c.Paths = nil }, nil},
		{"lower-case header", func(c *Config) { c.Header = "x-class" }, nil},
		{"empty header", func(c *Config) { c.Header = "" },
			[]string{`classify.header: must not be empty`}},
		{"header with space", func(c *Config) { c.Header = "X Class" },
			[]string{`classify.header: must be a valid HTTP header name, got "X Class"`}},
		{"credential header", func(c *Config) { c.Header = "authorization" },
			[]string{`classify.header: must not be a credential header, got "authorization"`}},
		{"bad default class", func(c *Config) { c.DefaultClass = 7 },
			[]string{`classify.default_class: must be "interactive" or "bulk", got class(7)`}},
		{"bad unknown_callers", func(c *Config) { c.UnknownCallers = "drop" },
			[]string{`classify.unknown_callers: must be "forward" or "reject", got "drop"`}},
		{"empty unknown_callers", func(c *Config) { c.UnknownCallers = "" },
			[]string{`classify.unknown_callers: must be "forward" or "reject", got ""`}},
		{"relative prefix", func(c *Config) { c.Paths = []PathRule{{Prefix: "v1/batches", Class: Bulk}} },
			[]string{`classify.paths[0].prefix: must start with "/"`}},
		{"bad path class", func(c *Config) { c.Paths = append(c.Paths, PathRule{Prefix: "/v1/x", Class: 9}) },
			[]string{`classify.paths[1].class: must be "interactive" or "bulk", got class(9)`}},
		{"shadowed rule", func(c *Config) {
			c.Paths = []PathRule{{Prefix: "/v1", Class: Bulk}, {Prefix: "/v1/chat", Class: Interactive}}
		}, []string{`classify.paths[1].prefix: never matches: classify.paths[0].prefix "/v1" comes first`}},
		{"longer prefix first is fine", func(c *Config) {
			c.Paths = []PathRule{{Prefix: "/v1/chat", Class: Interactive}, {Prefix: "/v1", Class: Bulk}}
		}, nil},
		{"every problem at once", func(c *Config) {
			*c = Config{Header: "", DefaultClass: 3, UnknownCallers: "drop", Paths: []PathRule{{Prefix: "", Class: 4}}}
		}, []string{
			"classify.header:", "classify.default_class:", "classify.unknown_callers:",
			"classify.paths[0].prefix:", "classify.paths[0].class:",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tt.mod(&cfg)
			before := cloneConfig(cfg)
			err := configcheck.Under("classify", cfg.Validate())
			if !reflect.DeepEqual(cfg, before) {
				t.Errorf("Validate changed the config: %+v, was %+v", cfg, before)
			}
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want errors containing %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, want it to contain %q", err, w)
				}
			}
			if got := strings.Count(err.Error(), "\n") + 1; got != len(tt.want) {
				t.Errorf("Validate() reported %d problems, want %d:\n%v", got, len(tt.want), err)
			}
		})
	}
}

func cloneConfig(c Config) Config {
	c.Paths = append([]PathRule(nil), c.Paths...)
	return c
}
