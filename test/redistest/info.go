package redistest

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// CommandStats returns how many times the server has executed each
// command, from INFO commandstats: lowercase command name ("evalsha",
// "eval", "ping"; subcommands as "client|pause") → calls. Calls that failed,
// such as an EVALSHA answered NOSCRIPT, count; commands rejected before
// running do not. Only commands run since the server started are listed.
//
// The INFO that reads the stats is counted in later readings, so compare
// two readings by the commands of interest, or expect one extra "info".
func (s *Server) CommandStats(t testing.TB) map[string]int64 {
	t.Helper()
	info, err := s.ctl.Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatalf("redistest: INFO commandstats: %v", err)
	}
	stats, err := parseCommandStats(info)
	if err != nil {
		t.Fatalf("redistest: INFO commandstats: %v", err)
	}
	return stats
}

// TotalCommands returns total_commands_processed from INFO stats: every
// command the server has executed since it started. Like
// [Server.CommandStats], each reading is itself counted by the next one.
func (s *Server) TotalCommands(t testing.TB) int64 {
	t.Helper()
	info, err := s.ctl.Info(t.Context(), "stats").Result()
	if err != nil {
		t.Fatalf("redistest: INFO stats: %v", err)
	}
	n, err := strconv.ParseInt(parseInfo(info)["total_commands_processed"], 10, 64)
	if err != nil {
		t.Fatalf("redistest: INFO stats total_commands_processed: %v", err)
	}
	return n
}

// parseInfo returns the field:value lines of an INFO reply as a map,
// skipping "# Section" headers and blank lines. Values keep any further
// colons.
func parseInfo(info string) map[string]string {
	fields := make(map[string]string)
	for line := range strings.Lines(info) {
		line = strings.TrimRight(line, "\r\n")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = v
		}
	}
	return fields
}

// parseCommandStats turns an INFO commandstats reply, lines such as
// "cmdstat_evalsha:calls=3,usec=41,usec_per_call=13.67,rejected_calls=0,failed_calls=1",
// into lowercase command name → calls.
func parseCommandStats(info string) (map[string]int64, error) {
	stats := make(map[string]int64)
	for field, value := range parseInfo(info) {
		name, ok := strings.CutPrefix(field, "cmdstat_")
		if !ok {
			continue
		}
		calls, err := parseCalls(value)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", field, err)
		}
		stats[strings.ToLower(name)] = calls
	}
	return stats, nil
}

// parseCalls returns the calls= count of one commandstats value.
func parseCalls(value string) (int64, error) {
	for kv := range strings.SplitSeq(value, ",") {
		k, v, _ := strings.Cut(kv, "=")
		if k != "calls" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("calls: %w", err)
		}
		if n < 0 {
			return 0, fmt.Errorf("calls: negative count %d", n)
		}
		return n, nil
	}
	return 0, errors.New("no calls= count")
}
