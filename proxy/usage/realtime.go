package usage

import (
	"strings"

	"github.com/tidwall/gjson"
)

// OpenAI's Realtime API (and Azure's) reports each response's usage on
// the response object of its response.done event:
//
//	usage: {total_tokens, input_tokens, output_tokens,
//	        input_token_details: {cached_tokens, text_tokens, audio_tokens, image_tokens, cached_tokens_details},
//	        output_token_details: {text_tokens, audio_tokens}}
//
// input_tokens counts every input token, text, audio and image, the
// cached ones included (cached_tokens, a part of it); output_tokens
// every output token, text and audio. The audio parts — the input's
// audio not read from the cache, the output's audio — are kept apart
// (Usage.AudioInput, AudioOutput), for the audio prices. A response is
// read as the events of one stream (WriteEvent): its text deltas for the
// estimate when it is cut before response.done, response.done as its
// terminal event.

// The Realtime events the meter reads.
const (
	realtimeDone = "response.done"
	// realtimeAudioDelta (GA) and realtimeBetaAudioDelta carry sound in
	// base64, not text; every other response.*.delta carries generated
	// text (output_text, output_audio_transcript, function_call_arguments,
	// and the beta's text and audio_transcript).
	realtimeAudioDelta     = "response.output_audio.delta"
	realtimeBetaAudioDelta = "response.audio.delta"
)

// realtimeReader reads the events of Realtime responses
// (Meter.WriteEvent). A JSON body, which Realtime never sends, is not
// read whole; of one too large to keep, its model and its size as
// generated text are.
type realtimeReader struct{}

// body reads nothing: a Realtime response is events (WriteEvent).
func (realtimeReader) body(*tally, []byte) {}

// tail reads the model of a JSON body too large to keep, and all its
// bytes as generated text.
func (realtimeReader) tail(t *tally, d *window) {
	t.noteModel(modelIn(d, 1, modelMember))
	t.text = d.size
}

// event reads one event of a Realtime response, its type from its data.
func (r realtimeReader) event(t *tally, _, data []byte) {
	switch et := gjson.Get(view(data), "type").Str; {
	case et == realtimeDone:
		t.terminal = true
		r.usage(t, gjson.Get(view(data), "response.usage"))
	case isRealtimeDelta(et):
		t.text += strLen(gjson.Get(view(data), "delta"))
	}
}

// longEvent reads a Realtime event whose data outgrew its window:
// response.done's usage from the end of the response it carries (a
// member of the data's response object: depth 2), a delta's bytes as
// text.
func (r realtimeReader) longEvent(t *tally, name []byte, d *window) {
	switch et := eventType(name, d.start()); {
	case et == realtimeDone:
		t.terminal = true
		r.usage(t, tailUsage(d.tail(), 2))
	case isRealtimeDelta(et):
		t.text += d.size
	}
}

// isRealtimeDelta reports whether a Realtime event type is one whose
// delta is generated text.
func isRealtimeDelta(t string) bool {
	return strings.HasPrefix(t, responsesEventPrefix) && strings.HasSuffix(t, responsesDeltaSuffix) &&
		t != realtimeAudioDelta && t != realtimeBetaAudioDelta
}

// usage records a usage object of the Realtime shape, its cache
// parts replacing those recorded before.
func (r realtimeReader) usage(t *tally, u gjson.Result) {
	if !u.IsObject() {
		return
	}
	r.inputOutput(t, u)
	in := u.Get("input_token_details")
	t.cache = openAICache(in)
	t.audio = audioParts{in: max(audioTokens(in)-audioTokens(in.Get("cached_tokens_details")), 0),
		out: audioTokens(u.Get("output_token_details"))}
}

// audioParts are the audio parts of a usage's input (not read from the
// cache) and output, as reported; tally.reported bounds them by their
// wholes.
type audioParts struct {
	in, out int64
}

// audioTokens is a details object's audio_tokens; 0 when it has none.
func audioTokens(details gjson.Result) int64 {
	if v := details.Get("audio_tokens"); details.IsObject() && v.Type == gjson.Number {
		return count(v)
	}
	return 0
}

// inputOutput records a Realtime usage object's input_tokens and
// output_tokens, where numbers.
func (realtimeReader) inputOutput(t *tally, u gjson.Result) {
	if in := u.Get("input_tokens"); in.Type == gjson.Number {
		t.setIn(count(in))
	}
	if out := u.Get("output_tokens"); out.Type == gjson.Number {
		t.setOut(count(out))
	}
}
