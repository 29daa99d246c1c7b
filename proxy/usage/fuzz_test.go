package usage

import (
	"bytes"
	"encoding/json"
	"regexp"
	"testing"

	"github.com/tidwall/gjson"
)

// streamSeeds are the fixture streams, the fuzzers' starting points.
var streamSeeds = []struct {
	api    API
	stream string
}{
	{ChatCompletions, chatStreamUsage}, {ChatCompletions, crlf(azureStreamUsage)}, {ChatCompletions, vllmStream},
	{Responses, responsesStream}, {Messages, anthropicStream}, {Messages, cr(anthropicStreamError)},
	{ChatCompletions, sse(chunkPrioHello, chunkNullTier, chunkNoTierUsage, chunkDone)}, {ChatCompletions, sse(vllmCache1, vllmCache2, vllmCache3, chunkDone)},
	{Responses, sse(respCreatedAuto, respDelta1, respCachedDone)}, {Messages, sse(antPrioStart, antDelta1, antBatchDelta, antStop)},
	{Realtime, sse(`{"type":"response.created","response":{"id":"r"}}`, `{"type":"response.output_text.delta","delta":"hi"}`, realtimeDoneEvent)},
	{GenerateContent, geminiSSE(geminiChunk1, geminiChunk2, geminiChunk3)}, {GenerateContent, geminiSSE(geminiBlocked)},
}

// tierPattern is what Usage.Tier may hold, written apart from validTier;
// modelPattern what Usage.Model may hold, apart from noteModel.
var (
	tierPattern  = regexp.MustCompile(`^[a-z0-9_-]{1,32}$`)
	modelPattern = regexp.MustCompile(`^[A-Za-z0-9._:/@+-]{1,128}$`)
)

// checkPricing fails t unless u's cache parts are non-negative parts of
// its input, its reasoning a part of its output, its tier "" or of the
// documented set and its model "" or of the documented charset.
func checkPricing(t *testing.T, u Usage) {
	t.Helper()
	if u.CacheRead < 0 || u.CacheWrite < 0 || u.CacheRead+u.CacheWrite > u.Input {
		t.Fatalf("cache parts outside the input: %+v", u)
	}
	if u.AudioInput < 0 || u.AudioOutput < 0 || u.AudioInput > u.Input-u.CacheRead-u.CacheWrite || u.AudioOutput > u.Output {
		t.Fatalf("audio parts outside their wholes: %+v", u)
	}
	if u.Tier != "" && !tierPattern.MatchString(u.Tier) {
		t.Fatalf("tier %q outside [a-z0-9_-]{1,32}", u.Tier)
	}
	if u.Reasoning < 0 || u.Reasoning > u.Output {
		t.Fatalf("reasoning outside the output: %+v", u)
	}
	if u.Model != "" && !modelPattern.MatchString(u.Model) {
		t.Fatalf("model %q outside [A-Za-z0-9._:/@+-]{1,128}", u.Model)
	}
}

// FuzzMeterSSE feeds arbitrary streams: the Meter must not panic, must hold
// bounded memory, must report non-negative counts, cache parts within the
// input and a tier of the documented set, and must report the same
// whatever the sizes of the writes.
func FuzzMeterSSE(f *testing.F) {
	for _, s := range streamSeeds {
		f.Add([]byte(s.stream), uint8(s.api), uint8(7), true)
	}
	f.Fuzz(func(t *testing.T, stream []byte, api, size uint8, complete bool) {
		a := API(api % uint8(EmbedContent+1))
		whole := NewMeter(a, eventStream, est)
		_, _ = whole.Write(stream)
		want := whole.Finish(complete)

		m := NewMeter(a, eventStream, est)
		for p := stream; len(p) > 0; {
			n := min(int(size%32)+1, len(p))
			_, _ = m.Write(p[:n])
			p = p[n:]
			if n := held(m); n > maxHeld {
				t.Fatalf("holding %d bytes", n)
			}
		}
		got := m.Finish(complete)
		if got != want {
			t.Fatalf("in pieces of %d: %+v; whole: %+v", size%32+1, got, want)
		}
		if got.Input < 0 || got.Output < 0 || got.Total() < 0 {
			t.Fatalf("negative usage %+v", got)
		}
		if !complete && !m.Terminal() && !got.Estimated {
			t.Fatalf("cut short before its terminal event but not estimated: %+v", got)
		}
		checkPricing(t, got)
	})
}

// FuzzMeterJSON feeds arbitrary bodies: no panic, non-negative counts,
// cache parts within the input, a tier of the documented set, no output for
// embeddings, and an estimate of the input estimate, nothing cached and at
// most the body's bytes / 4 of output.
func FuzzMeterJSON(f *testing.F) {
	for _, seed := range []struct {
		api  API
		body string
	}{
		{ChatCompletions, chatJSON}, {Embeddings, embeddingsJSON}, {Responses, responsesJSON},
		{Messages, anthropicJSON}, {ChatCompletions, openAIErrorJSON},
		{ChatCompletions, chatCachedJSON}, {ChatCompletions, chatCacheWriteJSON}, {Responses, responsesCachedJSON}, {Messages, anthropicPriorityJSON},
		{GenerateContent, geminiJSON}, {GenerateContent, geminiArray(geminiChunk1, geminiChunk2, geminiChunk3)}, {GenerateContent, geminiToolUse},
		{EmbedContent, geminiEmbedJSON},
	} {
		f.Add([]byte(seed.body), uint8(seed.api))
	}
	f.Fuzz(func(t *testing.T, body []byte, api uint8) {
		a := API(api % uint8(EmbedContent+1))
		m := NewMeter(a, appJSON, est)
		_, _ = m.Write(body)
		got := m.Finish(true)
		if got.Input < 0 || got.Output < 0 || got.Total() < 0 {
			t.Fatalf("negative usage %+v", got)
		}
		if (a == Embeddings || a == EmbedContent) && got.Output != 0 {
			t.Fatalf("embeddings output %d", got.Output)
		}
		if got.Estimated && (got.Input != est || got.CacheRead != 0 || got.CacheWrite != 0 || got.Output > ceilQuarter(int64(len(body)))) {
			t.Fatalf("estimate %+v of %d bytes", got, len(body))
		}
		checkPricing(t, got)
	})
}

// FuzzInjectStreamUsage: the output is valid JSON when the input was, asks
// for usage when injected, is the input when not, and the input is never
// changed.
func FuzzInjectStreamUsage(f *testing.F) {
	for _, seed := range []string{
		`{"model":"gpt-4o","stream":true}`,
		`{"stream":true,"stream_options":{"include_obfuscation":false}}`,
		`{"stream":true,"stream_options":{"include_usage":false}}`,
		`{"stream":true,"stream_options":null}`,
		"{\n \"stream\" : true ,\n\"stream_options\" : { } }",
		`{"stream":true,"stream_options":[1]}`,
		`{"stream":false}`,
		`{"stream":true,`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		in := bytes.Clone(body)
		out, injected := InjectStreamUsage(body)
		if !bytes.Equal(body, in) {
			t.Fatalf("input changed")
		}
		if !injected {
			if !bytes.Equal(out, body) {
				t.Fatalf("not injected but changed: %q", out)
			}
			return
		}
		if !json.Valid(body) {
			t.Fatalf("injected into invalid JSON %q", body)
		}
		if !json.Valid(out) {
			t.Fatalf("invalid output %q from %q", out, body)
		}
		var req struct {
			Stream        bool `json:"stream"`
			StreamOptions struct {
				IncludeUsage bool `json:"include_usage"`
			} `json:"stream_options"`
		}
		// encoding/json reads the last of duplicate keys, gjson the first:
		// check with gjson, which the proxy and sjson use, when they differ.
		if err := json.Unmarshal(out, &req); err == nil && req.Stream && !req.StreamOptions.IncludeUsage &&
			!hasDuplicateKeys(out) {
			t.Fatalf("output does not ask for usage: %s", out)
		}
		if gjson.GetBytes(out, "stream_options.include_usage").Type != gjson.True || gjson.GetBytes(out, "stream").Type != gjson.True {
			t.Fatalf("output does not ask for usage: %s", out)
		}
	})
}

// hasDuplicateKeys reports whether a valid JSON document repeats a key in
// one object (gjson and encoding/json then read different values).
func hasDuplicateKeys(doc []byte) bool {
	dup := false
	var walk func(gjson.Result)
	walk = func(r gjson.Result) {
		if !r.IsObject() && !r.IsArray() {
			return // ForEach would yield a scalar itself, for ever
		}
		seen := map[string]bool{}
		r.ForEach(func(k, v gjson.Result) bool {
			if r.IsObject() {
				if seen[k.String()] {
					dup = true
				}
				seen[k.String()] = true
			}
			walk(v)
			return !dup
		})
	}
	walk(gjson.ParseBytes(doc))
	return dup
}

// FuzzStripUsageChunk: the output is the same whatever the sizes of the
// writes, and a stream without "usage" loses nothing (all of it is written
// or, for an event the input ends inside, still held).
func FuzzStripUsageChunk(f *testing.F) {
	for _, s := range streamSeeds {
		f.Add([]byte(s.stream), uint8(3))
	}
	f.Fuzz(func(t *testing.T, stream []byte, size uint8) {
		var whole, pieces bytes.Buffer
		ws := StripUsageChunk(&whole).(*stripper)
		_, _ = ws.Write(stream)
		_ = writeChunks(StripUsageChunk(&pieces), stream, int(size%32)+1)
		if !bytes.Equal(whole.Bytes(), pieces.Bytes()) {
			t.Fatalf("in pieces of %d:\n%q\nwhole:\n%q", size%32+1, pieces.Bytes(), whole.Bytes())
		}
		if !bytes.Contains(stream, usageKey) {
			if got := append(whole.Bytes(), ws.held...); !bytes.Equal(got, stream) {
				t.Fatalf("without usage, passed+held\n%q\nwant\n%q", got, stream)
			}
		}
	})
}
