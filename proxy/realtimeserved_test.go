package proxy

import (
	"log/slog"
	"testing"

	"github.com/coder/websocket"
	"github.com/meterproxy/meterproxy/test/fakeprovider"
)

// TestRealtimeTurnsLogTheSessionsModel: a Realtime response.done names
// no model; each turn's access log line has as model_served the model
// the session's session.created (and session.updated) names — the real
// fake provider's, as OpenAI sends it.
func TestRealtimeTurnsLogTheSessionsModel(t *testing.T) {
	out := &syncBuffer{}
	access := newAccessLog(streamOut{out}, accessQueue, slog.New(slog.DiscardHandler))
	t.Cleanup(func() { _ = access.Close() })
	fp := fakeprovider.New(fakeprovider.Config{RPM: 6000, TPM: 1_000_000})
	p := rtProxyLogged(t, fp, access, nil)
	c, err := dialRT(t, p, "sk-alice", "/v1/realtime?model=gpt-realtime")
	if err != nil {
		t.Fatal(err)
	}
	ev := rtRead(t, c)
	session, _ := ev["session"].(map[string]any)
	served, _ := session["model"].(string)
	if ev["type"] != "session.created" || served == "" {
		t.Fatalf("the fake's first event names no session model: %v", ev)
	}
	rtSend(t, c, rtTextOnly)
	rtUntil(t, c, "session.updated")
	rtSend(t, c, rtItem)
	rtUntil(t, c, "conversation.item.created")
	rtSend(t, c, `{"type":"response.create","response":{"max_output_tokens":200}}`)
	if evs := rtUntil(t, c, "response.done", "error"); evs[len(evs)-1]["type"] != "response.done" {
		t.Fatalf("response ended with %v", evs[len(evs)-1])
	}
	if err := c.Close(websocket.StatusNormalClosure, ""); err != nil {
		t.Fatal(err)
	}
	rtGone(t, p)
	waitFor(t, "the turn's and the session's lines", func() bool { return len(lines(out.String())) == 2 })
	if err := access.Close(); err != nil {
		t.Fatal(err)
	}
	turns := 0
	for _, l := range lines(out.String()) {
		line := checkAccessLine(t, l)
		if line["kind"] != kindTurn {
			continue
		}
		turns++
		if line["model_served"] != served || line["estimated"] != false {
			t.Errorf("the turn's line: model_served %q (estimated %v), want the session's %q: %s", line["model_served"], line["estimated"], served, l)
		}
	}
	if turns != 1 {
		t.Errorf("%d turn lines, want 1:\n%s", turns, out.String())
	}
}
