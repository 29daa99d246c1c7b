package store

import (
	"encoding/json"
	"errors"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/classify"
	"github.com/meterproxy/meterproxy/test/redistest"
)

// TestTakeScriptBlockers holds take.lua's BLOCKER table equal to
// store.go's blocker constants: the script names each code, Go reads the
// number into a blocker.
func TestTakeScriptBlockers(t *testing.T) {
	start := strings.Index(takeLua, "local BLOCKER = {")
	if start < 0 {
		t.Fatal("take.lua has no BLOCKER table")
	}
	body := takeLua[start : start+strings.Index(takeLua[start:], "}")]
	lua := map[string]int{}
	for _, m := range regexp.MustCompile(`(\w+) = (\d+)`).FindAllStringSubmatch(body, -1) {
		lua[m[1]], _ = strconv.Atoi(m[2])
	}
	goSide := map[string]Blocker{"none": NotBlocked, "window": BlockedByWindow, "in_flight": BlockedByInFlight,
		"upstream": BlockedByUpstream, "output": BlockedByOutput}
	if len(lua) != len(goSide) || len(goSide) != int(BlockedByOutput)+1 {
		t.Errorf("take.lua names %d blockers, the test %d, store.go has %d", len(lua), len(goSide), BlockedByOutput+1)
	}
	for name, b := range goSide {
		if got, ok := lua[name]; !ok || got != int(b) {
			t.Errorf("BLOCKER.%s: take.lua says %d (named: %v), store.go %d", name, got, ok, b)
		}
	}
}

// TestTakeReplyNames: take.lua's reply carries every name takeReply reads
// and no other (parseTakeReply refuses unknown ones; this catches one the
// script forgot, which would otherwise read as zero).
func TestTakeReplyNames(t *testing.T) {
	srv := redistest.Start(t)
	s := newTestRedisStore(t, srv, redistest.Prefix(t))
	arg, err := json.Marshal(s.newTakeArgs(TakeRequest{Want: pc(1, 1), Limits: windowLimits}))
	if err != nil {
		t.Fatal(err)
	}
	out, err := TakeScript.Run(t.Context(), s.client, s.Keys(""), arg).Text()
	if err != nil {
		t.Fatal(err)
	}
	var reply map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &reply); err != nil {
		t.Fatal(err)
	}
	var got, want []string
	for name := range reply {
		got = append(got, name)
	}
	rt := reflect.TypeFor[takeReply]()
	for i := range rt.NumField() {
		want = append(want, rt.Field(i).Tag.Get("json"))
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("take.lua replies %v, takeReply reads %v", got, want)
	}
}

// TestTakeExactIntegers: integers past cjson's 14 significant digits
// cross the script both ways exactly: a token estimate of 2^53−1 (the
// largest a Lua number holds exactly) comes back as the window's use, and
// a millisecond clock as its second.
func TestTakeExactIntegers(t *testing.T) {
	srv := redistest.Start(t)
	s := newTestRedisStore(t, srv, redistest.Prefix(t))
	const cost = 1<<53 - 1
	now := time.UnixMilli(1_700_000_000_123)
	s.clock = func() time.Time { return now }
	req := TakeRequest{Want: pc(1, 0), Limits: Limits{AccountRPM: 600, InFlight: 10, AccountTPM: 60_000}}
	req.Waiters[classify.Interactive] = []Queued{{Cost: cost}}
	res, err := s.Take(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if res.Granted != pc(1, 0) || res.Window.Tokens != pc(cost, 0) || res.Window.Sec != now.Unix() {
		t.Fatalf("granted %v, window %+v; want 1 interactive, tokens %d, second %d", res.Granted, res.Window, int64(cost), now.Unix())
	}
}

// TestLuaInt: the reply's integers are decimal strings; a bare number
// (which cjson may have rounded) is refused.
func TestLuaInt(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want luaInt
		ok   bool
	}{
		{`"0"`, 0, true},
		{`"-3"`, -3, true},
		{`"9007199254740993"`, 9007199254740993, true},
		{`12`, 0, false},
		{`1e+14`, 0, false},
		{`"1e+14"`, 0, false},
		{`""`, 0, false},
	} {
		var n luaInt
		err := json.Unmarshal([]byte(tt.in), &n)
		if tt.ok && (err != nil || n != tt.want) {
			t.Errorf("%s: %d, %v; want %d", tt.in, n, err, tt.want)
		}
		if !tt.ok && !errors.Is(err, errNotLuaInt) {
			t.Errorf("%s: %d, %v; want errNotLuaInt", tt.in, n, err)
		}
	}
}
