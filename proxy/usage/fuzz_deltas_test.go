package usage

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// deltaAlphabet is what generated text is made of: plain letters, bytes
// JSON escapes (quotes, backslashes, control characters, HTML-sensitive
// bytes) and multi-byte UTF-8.
var deltaAlphabet = []string{"a", "b", " ", `"`, `\`, "\n", "\t", "<", "&", "é", "😀", "{", "}", ":", "usage"}

// genText turns plan bytes into text of the alphabet.
func genText(plan []byte) string {
	var b strings.Builder
	for _, c := range plan {
		b.WriteString(deltaAlphabet[int(c)%len(deltaAlphabet)])
	}
	return b.String()
}

// jsonString is s as a JSON string, escaped as encoding/json escapes it.
func jsonString(s string) string {
	b, _ := json.Marshal(s) // a string always marshals
	return string(b)
}

// genEvent is one event of a generated stream and the bytes of generated
// text in it that the estimate counts.
type genEvent struct {
	wire    string
	counted int
}

// genStream is a stream built from a plan: the events (the first is the
// stream's start), and the usage its end reports.
type genStream struct {
	api    API
	events []genEvent
	// in, out are the usage the end events report (for Messages, in is
	// what message_start reports).
	in, out int64
	genPricing
}

// genPricing is what a generated stream says pricing needs: the service
// tier its first event names (an index into genTiers) and the cache parts
// its end reports, which may exceed its input.
type genPricing struct {
	tier        int
	read, write int64
}

// genTiers are the service tiers a generated stream names, as sent, and
// the Tier the Meter must report for each.
var genTiers = [...]struct{ json, want string }{
	{`"default"`, "default"}, {`"flex"`, "flex"}, {`"priority"`, "priority"}, {`"standard"`, "standard"},
	{`null`, ""}, {`"Flex"`, ""}, {`"a b"`, ""}, {`""`, ""}, {`"` + strings.Repeat("t", 33) + `"`, ""},
	{`"fl\u0065x"`, "flex"}, {`7`, ""}, {`{"tier":"flex"}`, ""},
}

// wantTier is the Tier of g cut after its first k events.
func (g genStream) wantTier(k int) string {
	if k == 0 {
		return ""
	}
	return genTiers[g.tier].want
}

// deltaKinds is how many kinds of event genDelta makes per API.
const deltaKinds = 12

// genDelta makes one event of kind k (mod deltaKinds) carrying text.
func genDelta(api API, k int, text string, eventLines bool) genEvent {
	s, n := jsonString(text), len(text)
	switch api {
	case ChatCompletions:
		chunk := func(delta string, counted int) genEvent {
			return genEvent{`data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":` + delta + `,"finish_reason":null}]}`, counted}
		}
		switch k % deltaKinds {
		case 0:
			return chunk(`{"content":`+s+`}`, n)
		case 1:
			return chunk(`{"reasoning_content":`+s+`}`, n)
		case 2:
			return chunk(`{"reasoning":`+s+`}`, n)
		case 3:
			return chunk(`{"refusal":`+s+`}`, n)
		case 4:
			return chunk(`{"tool_calls":[{"index":0,"function":{"arguments":`+s+`}}]}`, n)
		case 5:
			return chunk(`{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":`+s+`,"arguments":""}}]}`, n)
		case 6:
			return chunk(`{"function_call":{"arguments":`+s+`}}`, n)
		case 7:
			return chunk(`{"audio":{"transcript":`+s+`,"data":"UklGRg=="}}`, n)
		case 8:
			return chunk(`{"audio":{"data":`+s+`}}`, 0) // sound, not text
		case 9:
			return genEvent{`data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":` + s + `}},{"index":1,"delta":{"content":` + s + `}}]}`, 2 * n}
		case 10:
			return chunk(`{"role":"assistant","content":null}`, 0)
		default:
			return genEvent{`: keep-alive ` + strings.ReplaceAll(text, "\n", " "), 0}
		}
	case Responses:
		kinds := [...]string{"output_text", "refusal", "function_call_arguments", "reasoning_text", "reasoning_summary_text",
			"audio.transcript", "code_interpreter_call_code", "custom_tool_call_input", "mcp_call_arguments"}
		t, counted := "", n
		switch i := k % deltaKinds; {
		case i < len(kinds):
			t = "response." + kinds[i] + ".delta"
		case i == len(kinds):
			t, counted = "response.audio.delta", 0 // sound, not text
		default:
			t, counted = "response.output_text.done", 0 // repeats the deltas
		}
		data := `data: {"type":"` + t + `","sequence_number":3,"item_id":"it","output_index":0,"delta":` + s + `,"text":` + s + `}`
		if eventLines {
			data = "event: " + t + "\n" + data
		}
		return genEvent{data, counted}
	default:
		var delta string
		counted := n
		switch k % 6 {
		case 0:
			delta = `{"type":"text_delta","text":` + s + `}`
		case 1:
			delta = `{"type":"thinking_delta","thinking":` + s + `}`
		case 2:
			delta = `{"type":"input_json_delta","partial_json":` + s + `}`
		case 3:
			delta, counted = `{"type":"signature_delta","signature":`+s+`}`, 0
		case 4:
			delta, counted = `{"type":"citations_delta","citation":{"type":"char_location","cited_text":`+s+`}}`, 0
		default:
			ping := `data: {"type": "ping"}`
			if eventLines {
				ping = "event: ping\n" + ping
			}
			return genEvent{ping, 0}
		}
		data := `data: {"type":"content_block_delta","index":0,"delta":` + delta + `}`
		if eventLines {
			data = "event: content_block_delta\n" + data
		}
		return genEvent{data, counted}
	}
}

// genFromPlan builds a stream of api from plan: a first event naming the
// tier of p, then deltas, each of which takes a kind byte, a length byte
// and that many text bytes.
func genFromPlan(api API, plan []byte, eventLines bool, in, out int64, p genPricing) genStream {
	g := genStream{api: api, in: in, out: out, genPricing: p}
	tier := genTiers[p.tier].json
	switch api {
	case ChatCompletions:
		g.events = append(g.events, genEvent{`data: {"id":"c","object":"chat.completion.chunk","service_tier":` + tier + `,"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`, 0})
	case Responses:
		g.events = append(g.events, genEvent{"event: response.created\n" + `data: {"type":"response.created","sequence_number":0,"response":{"status":"in_progress","output":[],"service_tier":` + tier + `,"usage":null}}`, 0})
	case Messages:
		g.events = append(g.events, genEvent{fmt.Sprintf("event: message_start\n"+`data: {"type":"message_start","message":{"usage":{"input_tokens":%d,"output_tokens":1,"service_tier":%s}}}`, in, tier), 0})
	}
	for len(plan) >= 2 {
		kind, size := int(plan[0]), int(plan[1])
		plan = plan[2:]
		size = min(size, len(plan))
		g.events = append(g.events, genDelta(api, kind, genText(plan[:size]), eventLines))
		plan = plan[size:]
	}
	return g
}

// end returns the events that report the usage and end the stream; none
// names a tier.
func (g genStream) end() []string {
	switch g.api {
	case ChatCompletions:
		return []string{fmt.Sprintf(`data: {"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d,"cache_write_tokens":%d}}}`,
			g.in, g.out, g.read, g.write), chunkDone}
	case Responses:
		return []string{fmt.Sprintf("event: response.completed\n"+`data: {"type":"response.completed","response":{"status":"completed","usage":{"input_tokens":%d,"input_tokens_details":{"cached_tokens":%d,"cache_write_tokens":%d},"output_tokens":%d}}}`,
			g.in, g.read, g.write, g.out)}
	default:
		return []string{fmt.Sprintf("event: message_delta\n"+`data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":%d,"cache_read_input_tokens":%d,"cache_creation_input_tokens":%d}}`,
			g.out, g.read, g.write), antStop}
	}
}

// reported is the Usage the whole stream with its end must report. OpenAI's
// cache parts are parts of the input, kept within it (reads first);
// Anthropic's add to it.
func (g genStream) reported() Usage {
	u := Usage{Input: g.in, Output: g.out, Tier: g.wantTier(1)}
	if g.api == Messages {
		u.Input += g.read + g.write
		u.CacheRead, u.CacheWrite = g.read, g.write
		return u
	}
	u.CacheRead = min(g.read, g.in)
	u.CacheWrite = min(g.write, g.in-u.CacheRead)
	return u
}

// estimate is the Usage a stream cut after its first k events must report.
func (g genStream) estimate(k int) Usage {
	text := 0
	for _, e := range g.events[:k] {
		text += e.counted
	}
	u := Usage{Input: est, Output: ceilQuarter(int64(text)), Tier: g.wantTier(k), Estimated: true}
	if g.api == Messages && k > 0 { // message_start reported the input and 1 output token
		u.Input, u.Output = g.in, max(u.Output, 1)
	}
	return u
}

// FuzzMeterGeneratedDeltas builds streams of every API from deltas of
// every kind and meters them cut after each event, cut inside an event,
// and whole with usage at the end, written in pieces of every size: the
// Meter never panics and holds at most maxHeld bytes; cut short, it
// counts exactly the generated text of the events it saw whole (so more
// deltas never count less), nothing cached, the tier its first event
// named (kept only when of the documented set); with the usage, the usage
// wins, its cache parts within its input.
func FuzzMeterGeneratedDeltas(f *testing.F) {
	f.Add(uint8(0), []byte("\x00\x05hello\x04\x03abc\x07\x02hi\x09\x01x"), uint16(40), uint8(7), true)
	f.Add(uint8(1), []byte("\x02\x08toolargs\x09\x02zz\x0a\x01q\x0b\x03aaa"), uint16(400), uint8(1), false)
	f.Add(uint8(2), []byte("\x01\x06\x03\x04\x05\x06\x07\x08\x03\x02ab\x02\x05json}"), uint16(123), uint8(13), true)
	f.Fuzz(func(t *testing.T, api uint8, plan []byte, cut uint16, size uint8, eventLines bool) {
		a := [...]API{ChatCompletions, Responses, Messages}[api%3]
		g := genFromPlan(a, plan, eventLines, 1234, 5678,
			genPricing{tier: (int(cut) + int(size)) % len(genTiers), read: int64(cut) % 2000, write: int64(size) * 8})
		piece := int(size%64) + 1
		run := func(stream string, complete bool) Usage {
			t.Helper()
			m := NewMeter(a, eventStream, est)
			for p := []byte(stream); len(p) > 0; {
				n := min(piece, len(p))
				_, _ = m.Write(p[:n])
				p = p[n:]
				if h := held(m); h > maxHeld {
					t.Fatalf("holding %d bytes", h)
				}
			}
			return m.Finish(complete)
		}
		wires := make([]string, len(g.events))
		for i, e := range g.events {
			wires[i] = e.wire
		}
		// Cut after each event: the estimate of what came whole, rising.
		var last Usage
		for k := 0; k <= len(wires); k++ {
			got := run(sse(wires[:k]...), false)
			if want := g.estimate(k); got != want {
				t.Fatalf("cut after %d of %d events: got %+v, want %+v", k, len(wires), got, want)
			}
			if got.Output < last.Output {
				t.Fatalf("cut after %d events: output %d, after %d: %d", k, got.Output, k-1, last.Output)
			}
			last = got
		}
		// Cut inside an event: that event does not count.
		whole := sse(wires...)
		at := int(cut) % (len(whole) + 1)
		k := strings.Count(whole[:at], "\n\n")
		if got, want := run(whole[:at], false), g.estimate(k); got != want {
			t.Fatalf("cut at byte %d (after %d events): got %+v, want %+v", at, k, got, want)
		}
		// With the usage at the end, the usage wins.
		if got, want := run(sse(append(wires, g.end()...)...), true), g.reported(); got != want {
			t.Fatalf("with usage: got %+v, want %+v", got, want)
		}
	})
}
