package usage

import "github.com/tidwall/gjson"

// tally is what a response reported so far, as its API's reader found
// it, and the text it generated: what its Usage is made of (Meter.Finish).
// The zero value is nothing reported.
type tally struct {
	// in and out are the reported counts, valid when haveIn and haveOut
	// are set.
	in, out         int64
	haveIn, haveOut bool
	// cache is the reported cache parts of in, bounded by it only when the
	// usage is made (each part arrives on its own).
	cache cacheParts
	// reasoning is the reported reasoning part of out, bounded by it when
	// the usage is made.
	reasoning int64
	// audio is the reported audio parts of in and out (realtime.go).
	audio audioParts
	// gemini is the reported parts of a Gemini in and out (gemini.go).
	gemini geminiParts
	// tier is the last valid service tier the response named (noteTier),
	// model the last model it named (noteModel).
	tier, model string
	// terminal says the stream's last event arrived.
	terminal bool
	// text counts bytes of generated text seen in a stream or a whole
	// answer, for the estimate when no usage arrives.
	text int64
}

// setIn and setOut record reported counts, replacing earlier ones.
func (t *tally) setIn(n int64)  { t.in, t.haveIn = n, true }
func (t *tally) setOut(n int64) { t.out, t.haveOut = n, true }

// noteTier records the service tier v names (servedTier); the last one
// named wins.
func (t *tally) noteTier(v gjson.Result) { t.tier = servedTier(v, t.tier) }

// noteModel records the model v names (ServedModel); the last one named
// wins.
func (t *tally) noteModel(v gjson.Result) { t.model = ServedModel(v, t.model) }

// reported is the usage the response reported: its counts (0 for one it
// left out), its cache parts within its input, its reasoning within its
// output, its tier and model.
func (t *tally) reported() Usage {
	c := t.cache.within(t.in)
	return Usage{Input: t.in, Output: t.out, Reasoning: min(t.reasoning, t.out), CacheRead: c.read, CacheWrite: c.write,
		AudioInput: min(t.audio.in, t.in-c.read-c.write), AudioOutput: min(t.audio.out, t.out), Tier: t.tier, Model: t.model}
}
