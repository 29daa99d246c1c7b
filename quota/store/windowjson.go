package store

import (
	"encoding/json"

	"github.com/meterproxy/meterproxy/classify"
)

// windowJSON is WindowUse as /admin/state writes it.
type windowJSON struct {
	Sec      int64            `json:"second"`
	Requests map[string]int64 `json:"requests"`
	Tokens   map[string]int64 `json:"tokens"`
}

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
	return json.Marshal(windowJSON{w.Sec, byClass(w.Requests), byClass(w.Tokens)})
}

// UnmarshalJSON reads what MarshalJSON writes, for a client of
// /admin/state.
func (w *WindowUse) UnmarshalJSON(b []byte) error {
	var v windowJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	w.Sec = v.Sec
	for _, c := range classify.Classes {
		w.Requests[c], w.Tokens[c] = v.Requests[c.String()], v.Tokens[c.String()]
	}
	return nil
}
