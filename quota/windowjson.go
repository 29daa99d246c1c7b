package quota

import (
	"encoding/json"

	"github.com/meterproxy/meterproxy/classify"
)

// MarshalJSON writes the window for /admin/state with each class named,
// as the rest of the state is: {"second": …, "requests": {"interactive":
// …, "bulk": …}, "tokens": {…}}, not positional arrays a reader must
// know the order of.
func (w WindowUse) MarshalJSON() ([]byte, error) {
	byClass := func(v PerClass) map[string]int64 {
		m := make(map[string]int64, len(v))
		for _, c := range classify.Classes {
			m[c.String()] = v[c]
		}
		return m
	}
	return json.Marshal(struct {
		Sec      int64            `json:"second"`
		Requests map[string]int64 `json:"requests"`
		Tokens   map[string]int64 `json:"tokens"`
	}{w.Sec, byClass(w.Requests), byClass(w.Tokens)})
}
