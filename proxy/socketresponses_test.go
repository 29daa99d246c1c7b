package proxy

import (
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func TestReadClientEnvelope(t *testing.T) {
	for _, tt := range []struct {
		in     string
		create bool
		lane   string
		err    error
	}{
		{in: `{"type":"response.create","model":"m"}`, create: true},
		{in: ` {"TYPE":"Response.Create","stream_id":"s1"}`, create: true, lane: "s1"},
		{in: `{"typ\u0065":"response.create"}`, create: true},
		{in: `{"type":"response.cancel","stream_id":null}`},
		{in: `{"type":"response.cancel","type":"response.create"}`, err: errEnvelopeTwice},
		{in: `{"type":"response.create","Stream_ID":"a","stream_id":"b"}`, err: errEnvelopeTwice},
		{in: `{"type":1}`, err: errEnvelopeType},
		{in: `{"type":"response.create","stream_id":{"x":1}}`, err: errEnvelopeType},
		{in: "\xEF\xBB\xBF{\"type\":\"response.create\"}", err: errNotObject},
		{in: `[{"type":"response.create"}]`, err: errNotObject},
		{in: ``, err: errNotObject},
	} {
		env, err := readClientEnvelope([]byte(tt.in))
		if !errors.Is(err, tt.err) || err == nil && (env.create != tt.create || env.lane != tt.lane) {
			t.Errorf("readClientEnvelope(%q) = %+v, %v; want create %v lane %q, %v", tt.in, env, err, tt.create, tt.lane, tt.err)
		}
	}
}

func TestReadServerEvent(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want serverEvent
	}{
		{`{"type":"response.completed","response":{"status":"completed"},"stream_id":"a"}`, serverEvent{typ: "response.completed", lane: "a", named: true, status: 400}},
		{`{"type":"error","status":429,"error":{"code":"rate_limit_exceeded"},"headers":{"retry-after":"2","x-n":1}}`,
			serverEvent{typ: "error", status: 429, header: http.Header{"Retry-After": {"2"}}}},
		{`{"type":"error","status":"x","error":{"code":"websocket_connection_limit_reached"}}`, serverEvent{typ: "error", status: 400, connection: true}},
		{`{"type":"error","status":429,"error":{"code":"rate_limit_exceeded","headers":{"x-ratelimit-remaining-requests":"0"}}}`,
			serverEvent{typ: "error", status: 429, header: http.Header{"X-Ratelimit-Remaining-Requests": {"0"}}}},
	} {
		got := readServerEvent([]byte(tt.in))
		if tt.want.header == nil {
			tt.want.header = http.Header{}
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("readServerEvent(%s) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

// FuzzReadClientEnvelope: the envelope reader never panics, holds to its
// answer whatever the input, and when it says create the top level does
// name a type that folds to response.create exactly once.
func FuzzReadClientEnvelope(f *testing.F) {
	for _, s := range []string{`{"type":"response.create","stream_id":"a"}`, `{"type":"x","TYPE":"y"}`, `{"a":[[[[[`,
		strings.Repeat("[", 1<<16), `{"type":"response.create","input":[{"type":"input_text","text":"\u0000"}]}`, "{\"t\\u0079pe\":\"RESPONSE.CREATE\"}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		env, err := readClientEnvelope(data)
		again, err2 := readClientEnvelope(data)
		if env != again || !errors.Is(err, err2) {
			t.Fatalf("two readings differ: %+v %v, %+v %v", env, err, again, err2)
		}
		if err != nil || !env.create {
			return
		}
		n := 0
		gjson.ParseBytes(data).ForEach(func(k, v gjson.Result) bool {
			if strings.EqualFold(k.Str, "type") {
				n++
				if !strings.EqualFold(v.Str, "response.create") {
					t.Fatalf("create read from type %q", v.Str)
				}
			}
			return true
		})
		if n != 1 {
			t.Fatalf("create read from %d type members", n)
		}
	})
}
