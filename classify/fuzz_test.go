package classify

import (
	"errors"
	"net/http"
	"strings"
	"testing"
)

func FuzzClassify(f *testing.F) {
	f.Add("Bearer "+chatKey, "", "", "", "/v1/chat/completions")
	f.Add("bearer "+adminKey, "", "", "interactive", "/v1/batches")
	f.Add("", importKey, "", " BULK ", "/")
	f.Add("Basic x", "", adminKey, "Interactive", "/v1/chat/x")
	f.Add("", "", "", "", "")
	f.Add("Bearer", " ", "\t", "interactive\x00", "v1/batches")
	forward := newTestClassifier(f, testPaths)
	reject := newTestClassifier(f, func(c *Config) { testPaths(c); c.UnknownCallers = UnknownReject })
	names := map[string]bool{UnknownCaller: true}
	for _, n := range forward.Callers() {
		names[n] = true
	}
	f.Fuzz(func(t *testing.T, auth, apiKey, xAPIKey, class, path string) {
		h := http.Header{
			"Authorization":      {auth},
			"Api-Key":            {apiKey},
			"X-Api-Key":          {xAPIKey},
			"X-Meterproxy-Class": {class},
		}
		fr, ferr := forward.Classify(h, path)
		rr, rerr := reject.Classify(h, path)
		for _, r := range []Result{fr, rr} {
			if !r.Class.Valid() {
				t.Fatalf("invalid class in %+v", r)
			}
			if !names[r.Caller] {
				t.Fatalf("caller %q is neither configured nor %q", r.Caller, UnknownCaller)
			}
			if r.Known != (r.Caller != UnknownCaller) {
				t.Fatalf("Known disagrees with Caller in %+v", r)
			}
			if strings.EqualFold(trim(class), "bulk") && r.Class != Bulk {
				t.Fatalf("bulk header not honoured: %+v", r)
			}
			if r.ClaimDenied && !strings.EqualFold(trim(class), "interactive") {
				t.Fatalf("ClaimDenied without an interactive claim: %+v", r)
			}
		}
		if ferr != nil {
			t.Fatalf("forward mode returned error %v", ferr)
		}
		if fr != rr {
			t.Fatalf("forward and reject disagree: %+v vs %+v", fr, rr)
		}
		if (rerr != nil) != !rr.Known || (rerr != nil && !errors.Is(rerr, ErrUnknownCaller)) {
			t.Fatalf("reject mode: %+v with error %v", rr, rerr)
		}
	})
}
