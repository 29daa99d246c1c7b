package proxy

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/proxy/ratelimit"
	"github.com/meterproxy/meterproxy/proxy/usage"
	"github.com/tidwall/gjson"
)

func TestReadRealtimeClient(t *testing.T) {
	tests := []struct {
		event string
		want  realtimeClient
		err   error
	}{
		{`{"type":"response.create"}`, realtimeClient{create: true, idAt: 1}, nil},
		{` {"type":"response.create","event_id":"e1","response":{"max_output_tokens":99.2}}`, realtimeClient{create: true, eventID: "e1", idAt: 2, maxOutput: 100}, nil},
		{`{"TYPE":"Response.Create","response":{"max_response_output_tokens":"inf"}}`, realtimeClient{create: true, idAt: 1}, nil},
		{`{"type":"response.create","response":null}`, realtimeClient{create: true, idAt: 1}, nil},
		{`{"type":"input_audio_buffer.append","audio":"AAAA","event_id":7}`, realtimeClient{}, errRealtimeEventID},
		{`{"type":"session.update","response":"x"}`, realtimeClient{idAt: 1}, nil},
		{`{"type":"response.create","response":[1]}`, realtimeClient{}, errRealtimeResp},
		{`{"type":"response.create","response":{"max_output_tokens":1,"Max_Output_Tokens":2}}`, realtimeClient{}, errEnvelopeTwice},
		{`{"type":"response.create","response":{"max_output_tokens":1,"max_response_output_tokens":2}}`, realtimeClient{}, errEnvelopeTwice},
		{`{"type":"response.create","response":{"max_output_tokens":true}}`, realtimeClient{}, errRealtimeCap},
		{`{"type":"response.create","event_ID":"e1"}`, realtimeClient{}, errRealtimeEventID},
		{`{"type":"response.create","event_id":""}`, realtimeClient{}, errRealtimeEventID},
		{`{"type":"response.create","event_id":"a","event_id":"b"}`, realtimeClient{}, errEnvelopeTwice},
		{`{"type":"response.create","response":{},"Response":{}}`, realtimeClient{}, errEnvelopeTwice},
		{`{"type":1}`, realtimeClient{}, errEnvelopeType},
		{`"response.create"`, realtimeClient{}, errNotObject},
		{`{"type":"session.update","session":{"type":"realtime","model":"gpt-realtime-mini"}}`, realtimeClient{idAt: 1, model: "gpt-realtime-mini", namesModel: true}, nil},
		{`{"type":"session.update","session":{"instructions":"be brief"}}`, realtimeClient{idAt: 1}, nil},
		{`{"type":"session.update","session":{"model":1}}`, realtimeClient{}, errRealtimeModel},
		{`{"type":"session.update","session":{"model":"a","Model":"b"}}`, realtimeClient{}, errEnvelopeTwice},
		{`{"type":"session.update","session":"x"}`, realtimeClient{}, errRealtimeModel},
		{`{"type":"conversation.item.create","session":"x"}`, realtimeClient{idAt: 1}, nil},
	}
	for _, tt := range tests {
		got, err := readRealtimeClient([]byte(tt.event))
		if !errors.Is(err, tt.err) || err == nil && got != tt.want {
			t.Errorf("readRealtimeClient(%s) = %+v, %v; want %+v, %v", tt.event, got, err, tt.want, tt.err)
		}
	}
	in := []byte(` {"type":"response.create"}`)
	ev, _ := readRealtimeClient(in)
	if out := withEventID(in, ev.idAt, "event_meterproxy_1"); string(out) != ` {"event_id":"event_meterproxy_1","type":"response.create"}` {
		t.Errorf("withEventID = %s", out)
	}
}

func TestReadRealtimeServer(t *testing.T) {
	tests := []struct {
		event  string
		want   realtimeServer
		status int
	}{
		{`{"type":"response.created","event_id":"x","response":{"id":"resp_1","status":"in_progress"}}`, realtimeServer{typ: "response.created", response: "resp_1"}, 400},
		{`{"type":"response.output_text.delta","response_id":"resp_2","delta":"hi"}`, realtimeServer{typ: "response.output_text.delta", response: "resp_2"}, 400},
		{`{"type":"error","error":{"type":"rate_limit_error","code":"rate_limit_exceeded","event_id":"c1"}}`,
			realtimeServer{typ: "error", answers: "c1", errorType: "rate_limit_error", errorKey: "rate_limit_exceeded"}, 429},
		{`{"type":"error","error":{"type":"server_error","event_id":null}}`, realtimeServer{typ: "error", errorType: "server_error"}, 500},
		{`{"type":"error","error":{"type":"invalid_request_error","code":"conversation_already_has_active_response","event_id":"c2"}}`,
			realtimeServer{typ: "error", answers: "c2", errorType: "invalid_request_error", errorKey: "conversation_already_has_active_response"}, 400},
	}
	for _, tt := range tests {
		got := readRealtimeServer([]byte(tt.event))
		if got != tt.want || got.status() != tt.status {
			t.Errorf("readRealtimeServer(%s) = %+v (status %d), want %+v (%d)", tt.event, got, got.status(), tt.want, tt.status)
		}
	}
}

func TestReadRateLimits(t *testing.T) {
	obs, ok := readRateLimits([]byte(`{"type":"rate_limits.updated","rate_limits":[{"name":"requests","limit":600,"remaining":599,"reset_seconds":0.1},` +
		`{"name":"tokens","limit":100000,"remaining":400,"reset_seconds":59.5},{"name":"tokens","limit":1,"remaining":1}]}`))
	want := ratelimit.Unknown()
	want.Requests = ratelimit.Bucket{Limit: 600, Remaining: 599, Reset: 100 * time.Millisecond}
	want.Tokens = ratelimit.Bucket{Limit: 100000, Remaining: 400, Reset: 59500 * time.Millisecond}
	if !ok || obs != want {
		t.Errorf("readRateLimits = %+v %v, want %+v", obs, ok, want)
	}
	if _, ok := readRateLimits([]byte(`{"type":"rate_limits.updated","rate_limits":[{"name":"input_tokens","limit":5}]}`)); ok {
		t.Errorf("a list naming neither requests nor tokens read as known")
	}
}

// FuzzReadRealtimeClient: the client event reader never panics, holds to
// its answer, reads a cap within [0, usage.MaxTokens]; and the event_id
// it adds to a create without one makes valid JSON of valid JSON, read
// again as the same create with that event_id, by the proxy and by a
// JSON reader alike.
func FuzzReadRealtimeClient(f *testing.F) {
	for _, s := range []string{`{"type":"response.create"}`, `{"type":"response.create","event_id":"e","response":{"max_output_tokens":5}}`,
		`{"Type":"RESPONSE.CREATE","response":{"max_response_output_tokens":"inf"}}`, `{"a":[[[[[`, strings.Repeat("{\"a\":", 1<<12),
		`{"type":"response.create","response":{"max_output_tokens":1e300}}`, "{\"t\\u0079pe\":\"response.create\"}"} {
		f.Add([]byte(s))
	}
	f.Add([]byte(`{"type":"response.create","event_id":""}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ev, err := readRealtimeClient(data)
		again, err2 := readRealtimeClient(data)
		if ev != again || !errors.Is(err2, err) {
			t.Fatalf("two readings differ: %+v %v, %+v %v", ev, err, again, err2)
		}
		if err != nil || !ev.create {
			return
		}
		if ev.maxOutput < 0 || ev.maxOutput > usage.MaxTokens {
			t.Fatalf("cap %d", ev.maxOutput)
		}
		if ev.eventID != "" || !json.Valid(data) {
			return
		}
		out := withEventID(data, ev.idAt, "event_meterproxy_1")
		if !json.Valid(out) {
			t.Fatalf("%s became invalid JSON: %s", data, out)
		}
		again, err = readRealtimeClient(out)
		if err != nil || !again.create || again.eventID != "event_meterproxy_1" || again.maxOutput != ev.maxOutput {
			t.Fatalf("%s with an event_id reads %+v %v", out, again, err)
		}
		if id := gjson.GetBytes(out, realtimeEventIDName); id.Str != "event_meterproxy_1" {
			t.Fatalf("the provider would read event_id %q", id.Str)
		}
	})
}

// FuzzReadRealtimeServer: the upstream event readers never panic, and
// every bucket read from rate_limits.updated is unknown or holds a
// positive limit or a non-negative remaining count, its reset within
// ratelimit.MaxDuration.
func FuzzReadRealtimeServer(f *testing.F) {
	for _, s := range []string{`{"type":"response.done","response":{"id":"r","usage":{"input_tokens":1}}}`,
		`{"type":"error","error":{"event_id":"c","type":"rate_limit_error"}}`,
		`{"type":"rate_limits.updated","rate_limits":[{"name":"tokens","limit":10,"remaining":3,"reset_seconds":1.5}]}`,
		`{"type":"rate_limits.updated","rate_limits":[{"name":"requests","limit":-1,"remaining":1e99,"reset_seconds":1e400}]}`,
		strings.Repeat("[", 1<<14)} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		_ = readRealtimeServer(data).status()
		obs, _ := readRateLimits(data)
		for _, b := range []ratelimit.Bucket{obs.Requests, obs.Tokens} {
			if b.Limit == 0 || b.Limit < -1 || b.Remaining < -1 || b.Reset < -1 || b.Reset > ratelimit.MaxDuration {
				t.Fatalf("bucket %+v from %s", b, data)
			}
		}
	})
}
