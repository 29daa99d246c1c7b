package fakeprovider

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

// FuzzParseResponseCreate: any client message of a Responses socket is
// refused with an eventError or decoded into the body of a streamed POST
// /v1/responses — a JSON object without type or stream_id, with
// "stream": true — that decodes to itself again.
func FuzzParseResponseCreate(f *testing.F) {
	for _, s := range []string{
		`{"type":"response.create","model":"m","input":"hi"}`,
		`{"type":"response.create","stream_id":"a","metadata":{"x-fake-cut-at":"mid_deltas","k":1},"input":[{"role":"user","content":"<b>"}]}`,
		`{"type":"response.create","background":true}`,
		`{"type":"response.create","stream_id":""}`,
		`{"type":"response.cancel"}`,
		`[]`, `null`, `{"type":`, `{"type":"response.create","type":"x"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		rc, err := parseResponseCreate(msg)
		if err != nil {
			if _, ok := errors.AsType[*eventError](err); !ok {
				t.Fatalf("error %v is not an eventError", err)
			}
			return
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(rc.body, &fields); err != nil {
			t.Fatalf("body %s: %v", rc.body, err)
		}
		if _, ok := fields["type"]; ok {
			t.Fatalf("body %s keeps type", rc.body)
		}
		if _, ok := fields["stream_id"]; ok {
			t.Fatalf("body %s keeps stream_id", rc.body)
		}
		if !bytes.Equal(fields["stream"], []byte("true")) {
			t.Fatalf("body %s: stream %s", rc.body, fields["stream"])
		}
		again, err := parseResponseCreate(append([]byte(`{"type":"response.create",`), rc.body[1:]...))
		if err != nil || !bytes.Equal(again.body, rc.body) {
			t.Fatalf("body %s re-parsed to %s, %v", rc.body, again.body, err)
		}
	})
}

// FuzzParseRealtimeEvent: any client message of a Realtime session is
// refused with an eventError or decoded with a type; a session update
// never panics.
func FuzzParseRealtimeEvent(f *testing.F) {
	for _, s := range []string{
		`{"type":"session.update","session":{"output_modalities":["text"],"audio":{"input":{"turn_detection":null}}}}`,
		`{"type":"session.update","session":{"turn_detection":{"type":"server_vad","create_response":false},"max_response_output_tokens":5}}`,
		`{"type":"response.create","response":{"modalities":["audio"],"max_output_tokens":"inf","metadata":{"x-fake-cut-at":"after_created"}}}`,
		`{"type":"input_audio_buffer.append","audio":"AAAA"}`,
		`{"type":7}`, `{}`, `"x"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		ev, err := parseRealtimeEvent(msg)
		if err != nil {
			if _, ok := errors.AsType[*eventError](err); !ok {
				t.Fatalf("error %v is not an eventError", err)
			}
			return
		}
		if ev.Type == "" {
			t.Fatal("an event without a type was accepted")
		}
		s := newRTSession("sess_0123456789abcdef01234567", "m", 0)
		if err := s.apply(ev.Session); err != nil {
			if _, ok := errors.AsType[*eventError](err); !ok {
				t.Fatalf("apply: %v is not an eventError", err)
			}
		}
		var c rtCreate
		_ = json.Unmarshal(ev.Response, &c)
	})
}
