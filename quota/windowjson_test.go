package quota

import (
	"encoding/json"
	"testing"

	"github.com/meterproxy/meterproxy/quota/store"
)

// TestWindowNamesTheClasses: /admin/state's window names each class
// (issue 23: "requests": [0, 5] left the reader to guess which is which).
func TestWindowNamesTheClasses(t *testing.T) {
	got, err := json.Marshal(State{Pools: map[string]PoolState{"default": {Window: store.WindowUse{Sec: 1700000000, Requests: store.PerClass{3, 5}, Tokens: store.PerClass{300, 0}}}}})
	if err != nil {
		t.Fatal(err)
	}
	var state struct {
		Pools map[string]struct {
			Window json.RawMessage `json:"window"`
		} `json:"pools"`
	}
	if err := json.Unmarshal(got, &state); err != nil {
		t.Fatal(err)
	}
	want := `{"second":1700000000,"requests":{"bulk":5,"interactive":3},"tokens":{"bulk":0,"interactive":300}}`
	if w := string(state.Pools["default"].Window); w != want {
		t.Errorf("window %s, want %s", w, want)
	}
	var back State
	if err := json.Unmarshal(got, &back); err != nil {
		t.Fatal(err)
	}
	if w := back.Pools["default"].Window; w != (store.WindowUse{Sec: 1700000000, Requests: store.PerClass{3, 5}, Tokens: store.PerClass{300, 0}}) {
		t.Errorf("read back as %+v", w)
	}
}
