package quota

import (
	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/quota/adaptive"
	"github.com/meterproxy/meterproxy/quota/store"
)

func scaled(c Config, replicas int64) store.Limits {
	if replicas < 1 {
		replicas = 1
	}
	inv := 1 / float64(replicas)
	ic, bc := c.Classes.Interactive, c.Classes.Bulk
	rpm := c.Account.requestsPerMinute()
	l := store.Limits{
		AccountRPM: adaptive.Part(rpm, inv),
		BulkRPM:    adaptive.Part(rpm, bc.Share*inv),
		ReserveRPM: adaptive.Part(rpm, ic.Reserve*inv),
		Borrow:     bc.Borrow,
		AccountTPM: adaptive.Part(c.Account.TokensPerMinute, inv),
		BulkTPM:    adaptive.Part(c.Account.TokensPerMinute, bc.Share*inv),
		ReserveTPM: adaptive.Part(c.Account.TokensPerMinute, ic.Reserve*inv),
		OutputLimits: store.OutputLimits{OutputTPM: adaptive.Part(c.Account.OutputTokensPerMinute, inv),
			ReserveOutputTPM: adaptive.Part(c.Account.OutputTokensPerMinute, ic.Reserve*inv)},
		Fair: [classify.NumClasses]bool{ic.Fairness != fairFIFO, bc.Fairness != fairFIFO},
	}
	return c.Classes.withInFlight(l, max(1, c.Account.MaxInFlight/replicas))
}
