package quota

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/glob"
	"github.com/meterproxy/meterproxy/quota/price"
)

// TestFlexFor: a class that sets service_tier: flex sends its requests
// for the models its flex_models match at flex, as account.models match
// (exactly; an Azure deployment regardless of case), and reserves at the
// default tier's prices when it may fall back to it; the other class, a
// model no pattern matches, and no model at all are not sent at flex.
func TestFlexFor(t *testing.T) {
	c := DefaultConfig()
	c.Classes.Bulk.ServiceTier = price.TierFlex
	c.Classes.Bulk.FlexModels = []string{"gpt-4o*", "o4-mini*"}
	fallback := c
	fallback.Classes.Bulk.FlexFallback = true
	tests := []struct {
		name  string
		cfg   Config
		class classify.Class
		model Model
		want  Flex
		ok    bool
	}{
		{"bulk, a flex model", c, classify.Bulk, Model{Name: "gpt-4o-2024-08-06"}, Flex{Tier: price.TierFlex}, true},
		{"bulk, the other pattern", c, classify.Bulk, Model{Name: "o4-mini"}, Flex{Tier: price.TierFlex}, true},
		{"bulk with fallback reserves at the default tier", fallback, classify.Bulk, Model{Name: "gpt-4o"}, Flex{Fallback: true}, true},
		{"bulk, a model flex_models does not list", c, classify.Bulk, Model{Name: "gpt-4.1"}, Flex{}, false},
		{"model fields match case-sensitively", c, classify.Bulk, Model{Name: "GPT-4o"}, Flex{}, false},
		{"an Azure deployment matches regardless of case", c, classify.Bulk, Model{Name: "GPT-4o-EU", Deployment: true}, Flex{Tier: price.TierFlex}, true},
		{"no model", c, classify.Bulk, Model{}, Flex{}, false},
		{"a model longer than any pattern is matched against", c, classify.Bulk, Model{Name: "gpt-4o" + strings.Repeat("x", glob.MaxName)}, Flex{}, false},
		{"interactive does not set it", c, classify.Interactive, Model{Name: "gpt-4o"}, Flex{}, false},
		{"nothing set", DefaultConfig(), classify.Bulk, Model{Name: "gpt-4o"}, Flex{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := tt.cfg.FlexFor(tt.class, func() Model { return tt.model })
			if got != tt.want || ok != tt.ok {
				t.Errorf("FlexFor(%v, %+v) = %+v, %v; want %+v, %v", tt.class, tt.model, got, ok, tt.want, tt.ok)
			}
		})
	}
}

// TestFlexForInteractive: either class may set the tier.
func TestFlexForInteractive(t *testing.T) {
	c := DefaultConfig()
	c.Classes.Interactive.ServiceTier = price.TierFlex
	c.Classes.Interactive.FlexModels = []string{"o3"}
	if _, ok := c.FlexFor(classify.Interactive, model("o3")); !ok {
		t.Error("interactive with service_tier: flex: o3 is not sent at flex")
	}
	if _, ok := c.FlexFor(classify.Bulk, model("o3")); ok {
		t.Error("bulk, which sets no tier, sends o3 at flex")
	}
}

// TestFlexValidate: invalid flex keys are refused, each naming its key;
// valid ones pass.
func TestFlexValidate(t *testing.T) {
	tests := []struct {
		name string
		set  func(c *Config)
		want []string // keys the error names; none: valid
	}{
		{"flex on bulk", func(c *Config) {
			c.Classes.Bulk.ServiceTier, c.Classes.Bulk.FlexModels, c.Classes.Bulk.FlexFallback = "flex", []string{"gpt-4o*"}, true
		}, nil},
		{"flex on interactive", func(c *Config) {
			c.Classes.Interactive.ServiceTier, c.Classes.Interactive.FlexModels = "flex", []string{"o3", "o4-mini*"}
		}, nil},
		{"another tier", func(c *Config) {
			c.Classes.Bulk.ServiceTier, c.Classes.Bulk.FlexModels = "priority", []string{"gpt-4o"}
		}, []string{"classes.bulk.service_tier: must be flex, got \"priority\""}},
		{"a tier in capitals", func(c *Config) { c.Classes.Interactive.ServiceTier = "Flex" },
			[]string{"classes.interactive.service_tier: must be flex"}},
		{"flex with no models", func(c *Config) { c.Classes.Bulk.ServiceTier = "flex" },
			[]string{"classes.bulk.flex_models: must list at least one"}},
		{"an empty pattern", func(c *Config) {
			c.Classes.Bulk.ServiceTier, c.Classes.Bulk.FlexModels = "flex", []string{"gpt-4o", ""}
		}, []string{"classes.bulk.flex_models[1]: must not be empty"}},
		{"a pattern with a space", func(c *Config) {
			c.Classes.Bulk.ServiceTier, c.Classes.Bulk.FlexModels = "flex", []string{"gpt 4o"}
		}, []string{"classes.bulk.flex_models[0]: must not hold spaces"}},
		{"a pattern an earlier one covers", func(c *Config) {
			c.Classes.Bulk.ServiceTier, c.Classes.Bulk.FlexModels = "flex", []string{"gpt-4o*", "gpt-4o-mini"}
		}, []string{`classes.bulk.flex_models[1]: "gpt-4o-mini" can never match`}},
		{"models without the tier", func(c *Config) { c.Classes.Bulk.FlexModels = []string{"gpt-4o"} },
			[]string{"classes.bulk.service_tier: must be \"flex\" when classes.bulk.flex_models"}},
		{"fallback without the tier", func(c *Config) { c.Classes.Interactive.FlexFallback = true },
			[]string{"classes.interactive.service_tier: must be \"flex\""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.set(&c)
			err := c.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate passed; want %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate: %v\nwant it to say %q", err, w)
				}
			}
		})
	}
}

// TestLeaseUntil: a lease's Until is its class's max_wait counted from
// when its request asked for admission, whatever it waited; the Admitter
// says how a request is sent at flex under the configuration in force.
func TestLeaseUntil(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.Classes.Bulk.MaxWait = 30 * time.Second
		cfg.Classes.Bulk.ServiceTier, cfg.Classes.Bulk.FlexModels = price.TierFlex, []string{"gpt-4o*"}
		a := runAdmitter(t, cfg, nil)
		for _, tt := range []struct {
			class classify.Class
			wait  time.Duration
		}{{classify.Bulk, 30 * time.Second}, {classify.Interactive, cfg.Classes.Interactive.MaxWait}} {
			asked := time.Now()
			lease, err := a.Admit(t.Context(), Request{Class: tt.class})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := lease.Until(), asked.Add(tt.wait); !got.Equal(want) {
				t.Errorf("%v: Until() = %v, want %v (max_wait from the ask)", tt.class, got, want)
			}
			lease.Release()
		}
		if f, ok := a.FlexFor(classify.Bulk, model("gpt-4o")); !ok || f.Tier != price.TierFlex {
			t.Errorf("Admitter.FlexFor(bulk, gpt-4o) = %+v, %v", f, ok)
		}
		called := false
		if _, ok := a.FlexFor(classify.Interactive, func() Model { called = true; return Model{Name: "gpt-4o"} }); ok || called {
			t.Errorf("Admitter.FlexFor(interactive) = %v, model read: %v; want false, not read", ok, called)
		}
	})
}
