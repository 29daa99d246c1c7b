package proxy

import (
	"fmt"
	"log/slog"
	"time"
)

// attrs adds rec's fields to r, in the order the schema table of
// docs/records.md names them (after time, which r carries). Durations are
// seconds, as a float; the cost is dollars, and the exact integer
// nanodollars it was counted as.
func (rec *accessRecord) attrs(r *slog.Record) {
	r.AddAttrs(
		slog.Int("schema", AccessSchema),
		slog.String("kind", rec.kind),
		slog.String("request_id", rec.requestID),
		slog.String("session_id", rec.session),
		slog.String("provider_request_id", rec.providerID),
		slog.String("caller", rec.route.caller),
		slog.String("class", rec.route.class),
		slog.String("account", rec.route.account),
		slog.String("pool", rec.route.pool),
		slog.String("model", rec.route.model),
		slog.String("model_served", rec.tally.used.Model),
		slog.String("api", rec.route.api),
		slog.String("method", rec.route.method),
		slog.String("path", rec.route.path),
		slog.Bool("stream", rec.answer.stream),
		slog.Int("status", rec.answer.status),
		slog.String("outcome", rec.answer.outcome),
		slog.String("reason", rec.answer.reason),
		slog.String("cut", rec.answer.cut),
		slog.Float64("wait_seconds", seconds(rec.timing.wait)),
		slog.Float64("ttfb_seconds", seconds(rec.timing.ttfb)),
		slog.Float64("duration_seconds", seconds(rec.timing.duration)),
		slog.Int64("input_tokens", rec.tally.used.Input),
		slog.Int64("cached_input_tokens", rec.tally.used.CacheRead),
		slog.Int64("cache_write_tokens", rec.tally.used.CacheWrite),
		slog.Int64("output_tokens", rec.tally.used.Output),
		slog.Int64("reasoning_tokens", rec.tally.used.Reasoning),
		slog.Int64("audio_input_tokens", rec.tally.used.AudioInput),
		slog.Int64("audio_output_tokens", rec.tally.used.AudioOutput),
		slog.Bool("estimated", rec.tally.used.Estimated),
		slog.Float64("cost_usd", rec.tally.cost.Dollars()),
		slog.Int64("cost_nanodollars", int64(rec.tally.cost)),
		slog.Bool("priced", rec.tally.priced),
		slog.String("tier", rec.tally.used.Tier),
		slog.Int("spills", rec.traffic.spills),
		slog.Int("flex_retries", rec.traffic.flexRetries),
		slog.Int64("bytes_in", rec.traffic.bytesIn),
		slog.Int64("bytes_out", rec.traffic.bytesOut),
	)
}

// seconds is d in seconds; never negative (a clock stepped back).
func seconds(d time.Duration) float64 { return max(d, 0).Seconds() }

// AccessFieldTypes is the access log's schema (AccessSchema): every
// field a line has, and its JSON type ("string", "number", "bool"), as
// docs/records.md's schema table lists them. attrs writes them all;
// tests check every line and the table against it.
var AccessFieldTypes = map[string]string{
	"time": "string", "schema": "number", "kind": "string", "request_id": "string", "session_id": "string",
	"provider_request_id": "string", "caller": "string", "class": "string", "account": "string", "pool": "string",
	"model": "string", "model_served": "string", "api": "string", "method": "string", "path": "string",
	"stream": "bool", "status": "number", "outcome": "string", "reason": "string", "cut": "string",
	"wait_seconds": "number", "ttfb_seconds": "number", "duration_seconds": "number",
	"input_tokens": "number", "cached_input_tokens": "number", "cache_write_tokens": "number", "output_tokens": "number",
	"reasoning_tokens": "number", "audio_input_tokens": "number", "audio_output_tokens": "number", "estimated": "bool",
	"cost_usd": "number", "cost_nanodollars": "number", "priced": "bool", "tier": "string",
	"spills": "number", "flex_retries": "number", "bytes_in": "number", "bytes_out": "number",
}

// AccessLineProblems says how a decoded access log line m departs from
// the schema (AccessFieldTypes): a field missing or of another JSON
// type, a field the schema does not name; none for a line as documented.
// A consumer of the log checks a line with it, as the tests do.
func AccessLineProblems(m map[string]any) []string {
	var out []string
	for name, kind := range AccessFieldTypes {
		got := "missing"
		switch m[name].(type) {
		case string:
			got = "string"
		case float64:
			got = "number"
		case bool:
			got = "bool"
		case nil:
			if _, ok := m[name]; ok {
				got = "null"
			}
		default:
			got = "other"
		}
		if got != kind {
			out = append(out, fmt.Sprintf("%s is %s, want %s", name, got, kind))
		}
	}
	for name := range m {
		if _, ok := AccessFieldTypes[name]; !ok {
			out = append(out, "undocumented field "+name)
		}
	}
	return out
}
