package configcheck

import (
	"errors"
	"fmt"
	"testing"
)

func TestUnder(t *testing.T) {
	var p Problems
	p.Add("header", "must not be empty")
	p.Add("paths[1].prefix", "never matches: %s %q comes first", Ref("paths[0].prefix"), "/v1")
	other := errors.New("not a problem")
	err := Under("classify", errors.Join(p.Err(), other))
	want := "classify.header: must not be empty\n" +
		`classify.paths[1].prefix: never matches: classify.paths[0].prefix "/v1" comes first` + "\n" +
		"not a problem"
	if err == nil || err.Error() != want {
		t.Fatalf("Under = %q, want %q", err, want)
	}
	var list Problems
	list.Add("[1].name", "duplicate of %s", Ref("[0].name"))
	if got := Under("callers", list.Err()).Error(); got != "callers[1].name: duplicate of callers[0].name" {
		t.Fatalf("a list's keys: %q", got)
	}
	if Under("x", nil) != nil || (&Problems{}).Err() != nil {
		t.Fatal("no problems must be nil")
	}
}

func TestOneOf(t *testing.T) {
	type mode string
	for _, tt := range []struct {
		v      mode
		values []mode
		want   string // "" accepted
	}{
		{"fifo", []mode{"callers", "fifo"}, ""},
		{"random", []mode{"callers", "fifo"}, `must be callers or fifo, got "random"`},
		{"", []mode{"local", "open", "closed"}, `must be local, open or closed, got ""`},
		{"x", []mode{"only"}, `must be only, got "x"`},
	} {
		err := OneOf(tt.v, tt.values...)
		if got := fmt.Sprint(err); (tt.want == "" && err != nil) || (tt.want != "" && got != tt.want) {
			t.Errorf("OneOf(%q, %q) = %v, want %q", tt.v, tt.values, err, tt.want)
		}
		var dst mode = "unset"
		err = SetOneOf(&dst, []byte(tt.v), tt.values...)
		if (err == nil) != (tt.want == "") || (err == nil && dst != tt.v) || (err != nil && dst != "unset") {
			t.Errorf("SetOneOf(%q) = %v, dst %q", tt.v, err, dst)
		}
	}
}

// TestSetOptional: an empty text leaves the setting unset; another is
// checked as SetOneOf checks it.
func TestSetOptional(t *testing.T) {
	type tier string
	v := tier("x")
	if err := SetOptional(&v, nil, "a", "b"); err != nil || v != "" {
		t.Errorf("empty: %q %v, want unset", v, err)
	}
	if err := SetOptional(&v, []byte("b"), "a", "b"); err != nil || v != "b" {
		t.Errorf("b: %q %v", v, err)
	}
	if err := SetOptional(&v, []byte("c"), "a", "b"); err == nil || err.Error() != `must be a or b, got "c"` || v != "b" {
		t.Errorf("c: %q %v, want refused and unchanged", v, err)
	}
}

// TestSquashed: a tag squashes when one of its options, after the name,
// is squash.
func TestSquashed(t *testing.T) {
	for tag, want := range map[string]bool{
		",squash": true, ",squash,flatten": true, ",flatten,squash": true,
		"": false, "squash": false, "listen": false, "listen,omitempty": false, ",squashed": false,
	} {
		if got := Squashed(tag); got != want {
			t.Errorf("Squashed(%q) = %v, want %v", tag, got, want)
		}
	}
}
