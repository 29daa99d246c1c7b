package fakeprovider

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// The Realtime API's events, in the shapes of its GA interface: the
// session, the client events the fake reads, the response's server events
// and its usage.

// realtimeClientEvent is the part of a client event the fake reads.
type realtimeClientEvent struct {
	Type     string          `json:"type"`
	EventID  string          `json:"event_id"`
	Session  json.RawMessage `json:"session"`
	Item     json.RawMessage `json:"item"`
	Audio    string          `json:"audio"`
	Response json.RawMessage `json:"response"`
}

// parseRealtimeEvent decodes one client message of a Realtime session.
func parseRealtimeEvent(msg []byte) (realtimeClientEvent, error) {
	var ev realtimeClientEvent
	if t := bytes.TrimSpace(msg); len(t) == 0 || t[0] != '{' {
		return ev, &eventError{code: "invalid_json", message: "The event is not a JSON object."}
	}
	if err := json.Unmarshal(msg, &ev); err != nil {
		return ev, &eventError{code: "invalid_event", message: "The event could not be parsed: " + err.Error()}
	}
	if ev.Type == "" {
		return ev, &eventError{code: "invalid_event", param: "type", message: "The event has no type."}
	}
	return ev, nil
}

// rtTurnDetection is a session's turn detection; nil in the session
// means none.
type rtTurnDetection struct {
	Type              string  `json:"type"`
	Threshold         float64 `json:"threshold"`
	PrefixPaddingMS   int     `json:"prefix_padding_ms"`
	SilenceDurationMS int     `json:"silence_duration_ms"`
	CreateResponse    bool    `json:"create_response"`
	InterruptResponse bool    `json:"interrupt_response"`
}

type rtFormat struct {
	Type string `json:"type"`
	Rate int    `json:"rate"`
}

type rtAudio struct {
	Input struct {
		Format        rtFormat         `json:"format"`
		TurnDetection *rtTurnDetection `json:"turn_detection"`
	} `json:"input"`
	Output struct {
		Format rtFormat `json:"format"`
		Voice  string   `json:"voice"`
	} `json:"output"`
}

// rtSession is the session object of session.created and
// session.updated.
type rtSession struct {
	Type             string   `json:"type"`
	Object           string   `json:"object"`
	ID               string   `json:"id"`
	Model            string   `json:"model"`
	OutputModalities []string `json:"output_modalities"`
	Instructions     string   `json:"instructions"`
	// MaxOutputTokens is "inf" or a count.
	MaxOutputTokens any     `json:"max_output_tokens"`
	Audio           rtAudio `json:"audio"`
	ExpiresAt       int64   `json:"expires_at"`
}

// newRTSession is a session's defaults, as OpenAI's: audio out, server
// VAD creating a response when the caller stops speaking.
func newRTSession(id, model string, expires int64) rtSession {
	s := rtSession{Type: "realtime", Object: "realtime.session", ID: id, Model: model,
		OutputModalities: []string{"audio"}, MaxOutputTokens: "inf", ExpiresAt: expires}
	pcm := rtFormat{Type: "audio/pcm", Rate: 24000}
	s.Audio.Input.Format, s.Audio.Output.Format, s.Audio.Output.Voice = pcm, pcm, "alloy"
	s.Audio.Input.TurnDetection = serverVAD()
	return s
}

func serverVAD() *rtTurnDetection {
	return &rtTurnDetection{Type: "server_vad", Threshold: 0.5, PrefixPaddingMS: 300, SilenceDurationMS: 500,
		CreateResponse: true, InterruptResponse: true}
}

// rtSessionUpdate is the part of session.update's session the fake
// honours, in the GA shape and the beta's (modalities, turn_detection,
// max_response_output_tokens).
type rtSessionUpdate struct {
	OutputModalities        []string        `json:"output_modalities"`
	Modalities              []string        `json:"modalities"`
	Instructions            *string         `json:"instructions"`
	MaxOutputTokens         json.RawMessage `json:"max_output_tokens"`
	MaxResponseOutputTokens json.RawMessage `json:"max_response_output_tokens"`
	TurnDetection           json.RawMessage `json:"turn_detection"`
	Audio                   *struct {
		Input *struct {
			TurnDetection json.RawMessage `json:"turn_detection"`
		} `json:"input"`
	} `json:"audio"`
}

// apply updates s with raw (a session.update's session).
func (s *rtSession) apply(raw json.RawMessage) error {
	var u rtSessionUpdate
	if err := json.Unmarshal(raw, &u); err != nil {
		return &eventError{code: "invalid_value", param: "session", message: "The session could not be parsed: " + err.Error()}
	}
	if m := u.OutputModalities; m != nil {
		s.OutputModalities = m
	} else if m := u.Modalities; m != nil {
		s.OutputModalities = []string{"text"}
		if contains(m, "audio") {
			s.OutputModalities = []string{"audio"}
		}
	}
	if u.Instructions != nil {
		s.Instructions = *u.Instructions
	}
	for _, raw := range []json.RawMessage{u.MaxResponseOutputTokens, u.MaxOutputTokens} {
		if n, ok := maxTokens(raw); ok {
			s.MaxOutputTokens = n
		}
	}
	td := u.TurnDetection
	if u.Audio != nil && u.Audio.Input != nil && u.Audio.Input.TurnDetection != nil {
		td = u.Audio.Input.TurnDetection
	}
	switch {
	case td == nil:
	case isNull(td):
		s.Audio.Input.TurnDetection = nil
	default:
		d := serverVAD()
		if err := json.Unmarshal(td, d); err != nil {
			return &eventError{code: "invalid_value", param: "session.audio.input.turn_detection", message: err.Error()}
		}
		s.Audio.Input.TurnDetection = d
	}
	return nil
}

// maxTokens reads a max_output_tokens value: "inf" (0) or a count.
func maxTokens(raw json.RawMessage) (any, bool) {
	if raw == nil || isNull(raw) {
		return nil, false
	}
	var n int
	if json.Unmarshal(raw, &n) == nil && n > 0 {
		return n, true
	}
	return "inf", true
}

// vad reports whether the server detects turns and creates responses.
func (s *rtSession) vad() bool {
	td := s.Audio.Input.TurnDetection
	return td != nil && td.CreateResponse
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if strings.EqualFold(v, s) {
			return true
		}
	}
	return false
}

// rtUsage is a Realtime response's usage, with OpenAI's field names.
type rtUsage struct {
	TotalTokens        int               `json:"total_tokens"`
	InputTokens        int               `json:"input_tokens"`
	OutputTokens       int               `json:"output_tokens"`
	InputTokenDetails  rtInputDetails    `json:"input_token_details"`
	OutputTokenDetails rtModalityDetails `json:"output_token_details"`
}

type rtInputDetails struct {
	CachedTokens        int               `json:"cached_tokens"`
	TextTokens          int               `json:"text_tokens"`
	AudioTokens         int               `json:"audio_tokens"`
	ImageTokens         int               `json:"image_tokens"`
	CachedTokensDetails rtModalityDetails `json:"cached_tokens_details"`
}

type rtModalityDetails struct {
	TextTokens  int `json:"text_tokens"`
	AudioTokens int `json:"audio_tokens"`
	ImageTokens int `json:"image_tokens,omitempty"`
}

// newRTUsage is the usage of a response whose input was inText and
// inAudio tokens, cachedText and cachedAudio of them from the cache, and
// whose output was outText and outAudio tokens.
func newRTUsage(inText, inAudio, cachedText, cachedAudio, outText, outAudio int) rtUsage {
	in, out := inText+inAudio, outText+outAudio
	return rtUsage{TotalTokens: in + out, InputTokens: in, OutputTokens: out,
		InputTokenDetails: rtInputDetails{CachedTokens: cachedText + cachedAudio, TextTokens: inText, AudioTokens: inAudio,
			CachedTokensDetails: rtModalityDetails{TextTokens: cachedText, AudioTokens: cachedAudio}},
		OutputTokenDetails: rtModalityDetails{TextTokens: outText, AudioTokens: outAudio}}
}

// usage is u in the log's shape.
func (u rtUsage) usage() *Usage {
	return &Usage{InputTokens: u.InputTokens, CachedTokens: u.InputTokenDetails.CachedTokens, OutputTokens: u.OutputTokens,
		TotalTokens: u.TotalTokens, InputTextTokens: u.InputTokenDetails.TextTokens, InputAudioTokens: u.InputTokenDetails.AudioTokens,
		OutputTextTokens: u.OutputTokenDetails.TextTokens, OutputAudioTokens: u.OutputTokenDetails.AudioTokens}
}

// rtResponse is the response object of response.created and
// response.done.
type rtResponse struct {
	Object           string         `json:"object"`
	ID               string         `json:"id"`
	Status           string         `json:"status"`
	StatusDetails    map[string]any `json:"status_details"`
	Output           []any          `json:"output"`
	ConversationID   string         `json:"conversation_id"`
	OutputModalities []string       `json:"output_modalities"`
	MaxOutputTokens  any            `json:"max_output_tokens"`
	Metadata         any            `json:"metadata"`
	Usage            *rtUsage       `json:"usage"`
}

// rtItem is an assistant message item of a response.
func rtItem(id, status, text string, audio bool) map[string]any {
	part := map[string]any{"type": "output_text", "text": text}
	if audio {
		part = map[string]any{"type": "output_audio", "transcript": text}
	}
	content := []any{}
	if status != "in_progress" {
		content = []any{part}
	}
	return map[string]any{"id": id, "object": "realtime.item", "type": "message", "status": status, "role": "assistant", "content": content}
}

// rtPlan is the event sequence of one response: response.created, the
// item and part, the deltas (text, or the audio's transcript), their
// done events and response.done with the usage. The events are maps the
// session stamps with an event_id as it sends them.
func rtPlan(resp rtResponse, itemID, prevItem string, rep reply, audio bool) streamPlan {
	ev := func(typ string, fields map[string]any) sseEvent {
		fields["type"] = typ
		return sseEvent{name: typ, data: fields}
	}
	at := func(extra map[string]any) map[string]any {
		extra["response_id"], extra["item_id"], extra["output_index"], extra["content_index"] = resp.ID, itemID, 0, 0
		return extra
	}
	start := resp
	start.Status, start.StatusDetails, start.Output, start.Usage = "in_progress", nil, []any{}, nil
	deltaType, doneType, partType, textKey := "response.output_text.delta", "response.output_text.done", "output_text", "text"
	if audio {
		deltaType, doneType, partType, textKey = "response.output_audio_transcript.delta", "response.output_audio_transcript.done", "output_audio", "transcript"
	}
	pending := rtItem(itemID, "in_progress", "", audio)
	var plan streamPlan
	plan.head = []sseEvent{
		ev("response.created", map[string]any{"response": start}),
		ev("response.output_item.added", map[string]any{"response_id": resp.ID, "output_index": 0, "item": pending}),
		ev("conversation.item.added", map[string]any{"previous_item_id": nullable(prevItem), "item": pending}),
		ev("response.content_part.added", at(map[string]any{"part": map[string]any{"type": partType, textKey: ""}})),
	}
	for _, text := range rep.chunks {
		plan.chunks = append(plan.chunks, ev(deltaType, at(map[string]any{"delta": text})))
	}
	done := rtItem(itemID, "completed", rep.text, audio)
	if audio {
		plan.tail = append(plan.tail,
			ev("response.output_audio.delta", at(map[string]any{"delta": silence})),
			ev("response.output_audio.done", at(map[string]any{})))
	}
	plan.tail = append(plan.tail,
		ev(doneType, at(map[string]any{textKey: rep.text})),
		ev("response.content_part.done", at(map[string]any{"part": map[string]any{"type": partType, textKey: rep.text}})),
		ev("response.output_item.done", map[string]any{"response_id": resp.ID, "output_index": 0, "item": done}),
		ev("conversation.item.done", map[string]any{"previous_item_id": nullable(prevItem), "item": done}),
		ev("response.done", map[string]any{"response": resp}))
	return plan
}

// silence is 10 ms of 24 kHz PCM16 silence, base64: the audio a spoken
// response carries.
var silence = strings.Repeat("A", 640)

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// rateLimitsEvent is rate_limits.updated for the request and token
// buckets' states; a limit the provider does not have is left out.
func rateLimitsEvent(requests, tokens limitState) map[string]any {
	list := []map[string]any{}
	for _, l := range []struct {
		name string
		st   limitState
	}{{"requests", requests}, {"tokens", tokens}} {
		if l.st.limit > 0 {
			list = append(list, map[string]any{"name": l.name, "limit": l.st.limit, "remaining": l.st.remaining,
				"reset_seconds": float64(l.st.untilFull.Milliseconds()) / 1000})
		}
	}
	return map[string]any{"type": "rate_limits.updated", "rate_limits": list}
}

// realtimeError is a Realtime error event: its error's type, code,
// message, param and the client event it answers.
func realtimeError(typ, code, msg, param, eventID string) map[string]any {
	return map[string]any{"type": "error", "error": map[string]any{
		"type": typ, "code": nullable(code), "message": msg, "param": nullable(param), "event_id": nullable(eventID)}}
}

// eventIDs numbers a session's server events.
func eventID(session string, n uint64) string { return fmt.Sprintf("event_%s_%d", session, n) }
