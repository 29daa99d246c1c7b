package quota

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestTakeScriptPositions holds take.lua's ARG and REPLY tables equal to
// redisstore.go's arg* and reply* constants: the script names each
// position, Go fills and reads them by the same number.
func TestTakeScriptPositions(t *testing.T) {
	tables := map[string]map[string]int{}
	entry := regexp.MustCompile(`(\w+) = (\d+)`)
	for _, name := range []string{"ARG", "REPLY"} {
		start := strings.Index(takeLua, "local "+name+" = {")
		if start < 0 {
			t.Fatalf("take.lua has no %s table", name)
		}
		body := takeLua[start : start+strings.Index(takeLua[start:], "}")]
		tables[name] = map[string]int{}
		for _, m := range entry.FindAllStringSubmatch(body, -1) {
			n, _ := strconv.Atoi(m[2])
			tables[name][m[1]] = n
		}
	}
	want := map[string]map[string]int{
		"ARG": {
			"replica": argReplica, "want_i": argWantI, "want_b": argWantB, "inflight_i": argInFlightI, "inflight_b": argInFlightB,
			"account_rpm": argAccountRPM, "bulk_rpm": argBulkRPM, "reserve_rpm": argReserveRPM,
			"inflight_bound": argInFlightBound, "bulk_inflight": argBulkInFlight, "reserve_inflight": argReserveInFlight,
			"borrow": argBorrow, "replica_ttl": argReplicaTTL, "clock": argClock, "inflight_poll": argInFlightPoll,
			"upstream_age": argUpstreamAge, "upstream_hold": argUpstreamHold, "upstream_throttle": argUpstreamThrottle,
			"account_tpm": argAccountTPM, "bulk_tpm": argBulkTPM, "reserve_tpm": argReserveTPM,
			"correction_i": argCorrectionI, "correction_b": argCorrectionB,
			"output_tpm": argOutputTPM, "reserve_output_tpm": argReserveOutputTPM, "output_spent": argOutput,
			"credits_i": argCreditsI, "credits_b": argCreditsB, "fair": argFair, "lists": argLists,
		},
		"REPLY": {
			"granted_i": replyGrantedI, "granted_b": replyGrantedB, "blocker_i": replyBlockerI, "blocker_b": replyBlockerB,
			"retry_ms": replyRetryMs, "sec": replySec, "fleet_i": replyFleetI, "fleet_b": replyFleetB, "hold_ms": replyHoldMs,
			"used_i": replyUsedI, "used_b": replyUsedB, "tokens_i": replyTokensI, "tokens_b": replyTokensB, "left_ms": replyLeftMs,
			"credits_i": replyCreditsI, "credits_b": replyCreditsB,
		},
	}
	counts := map[string]int{"ARG": numArgs, "REPLY": replyLen}
	for name, goSide := range want {
		lua := tables[name]
		if len(lua) != counts[name] || len(goSide) != counts[name] {
			t.Errorf("%s: take.lua names %d positions, Go %d, want %d each", name, len(lua), len(goSide), counts[name])
		}
		for field, pos := range goSide {
			if got, ok := lua[field]; !ok || got != pos+1 { // Lua counts from 1
				t.Errorf("%s.%s: take.lua says %d, Go %d (+1)", name, field, got, pos)
			}
		}
	}
}
