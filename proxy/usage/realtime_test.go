package usage

import (
	"strings"
	"testing"
)

// realtimeDoneEvent is a spoken response's response.done, as OpenAI's
// GA Realtime API sends it: 2 audio and 20 text tokens in (8 of them
// cached), 9 text and 36 audio tokens out.
const realtimeDoneEvent = `{"type":"response.done","event_id":"event_9","response":{"object":"realtime.response","id":"resp_1",` +
	`"status":"completed","output":[{"type":"message","content":[{"type":"output_audio","transcript":"one two three"}]}],` +
	`"usage":{"total_tokens":67,"input_tokens":22,"output_tokens":45,"input_token_details":{"cached_tokens":8,"text_tokens":20,` +
	`"audio_tokens":2,"image_tokens":0,"cached_tokens_details":{"text_tokens":8,"audio_tokens":0}},` +
	`"output_token_details":{"text_tokens":9,"audio_tokens":36}}}}`

// TestRealtimeUsage: a Realtime response's events read as a stream's —
// response.done's usage exactly (text and audio, the cached part of the
// input), its transcript deltas as text when it is cut before it, its
// audio deltas never.
func TestRealtimeUsage(t *testing.T) {
	events := []string{
		`{"type":"response.created","response":{"id":"resp_1","status":"in_progress"}}`,
		`{"type":"response.output_audio_transcript.delta","response_id":"resp_1","delta":"one two "}`,
		`{"type":"response.output_audio.delta","response_id":"resp_1","delta":"` + strings.Repeat("A", 640) + `"}`,
		`{"type":"response.output_audio_transcript.delta","response_id":"resp_1","delta":"three"}`,
		realtimeDoneEvent,
	}
	m := NewMeter(Realtime, "text/event-stream", 5)
	for _, e := range events {
		m.WriteEvent([]byte(e))
	}
	if u := m.Finish(true); u.Estimated || m.Cut() || u.Input != 22 || u.Output != 45 || u.CacheRead != 8 || u.CacheWrite != 0 ||
		u.AudioInput != 2 || u.AudioOutput != 36 {
		t.Errorf("usage %+v cut %v, want response.done's 22 in (8 cached, 2 audio), 45 out (36 audio)", u, m.Cut())
	}
	// Cached audio is no part of AudioInput; parts above their wholes are
	// cut to them.
	odd := NewMeter(Realtime, "text/event-stream", 5)
	odd.WriteEvent([]byte(`{"type":"response.done","response":{"usage":{"input_tokens":10,"output_tokens":3,` +
		`"input_token_details":{"cached_tokens":6,"audio_tokens":9,"cached_tokens_details":{"audio_tokens":4}},"output_token_details":{"audio_tokens":7}}}}`))
	if u := odd.Finish(true); u.AudioInput != 4 || u.AudioOutput != 3 {
		t.Errorf("usage %+v, want 5 uncached audio cut to the 4 uncached, 7 audio out cut to 3", u)
	}
	cut := NewMeter(Realtime, "text/event-stream", 5)
	for _, e := range events[:4] {
		cut.WriteEvent([]byte(e))
	}
	// 13 bytes of transcript: 4 tokens; the audio's 640 bytes count nothing.
	if u := cut.Finish(false); !u.Estimated || !cut.Cut() || u.Input != 5 || u.Output != 4 {
		t.Errorf("cut usage %+v, want the estimate: input 5, 13 bytes of transcript ÷ 4", u)
	}
	long := NewMeter(Realtime, "text/event-stream", 5)
	big := strings.Replace(realtimeDoneEvent, "one two three", strings.Repeat("word ", 30<<10), 1)
	long.WriteEvent([]byte(big))
	if u := long.Finish(true); u.Estimated || u.Input != 22 || u.Output != 45 || u.CacheRead != 8 {
		t.Errorf("usage of a response.done of %d bytes %+v, want its usage read from its end", len(big), u)
	}
}
