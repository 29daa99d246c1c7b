package test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meterproxy/meterproxy/test/fakeprovider"
	"github.com/meterproxy/meterproxy/test/procs"
)

// The agent CLIs as real clients (issue 33): OpenAI's Codex CLI and
// Anthropic's Claude Code, at the versions .ci/ensure-clis pins, each run
// non-interactively through a meterproxy binary in front of the fake
// provider, with nothing but localhost to talk to.

// The models the CLIs are run with: ones they know (Codex warns of
// degraded behaviour for a model it has no metadata for), which the fake
// answers as any other and the prices below match.
const (
	codexModel  = "gpt-5.5"
	claudeModel = "claude-sonnet-4-6"
)

// The prices the CLI proxy charges, in USD per million tokens.
const (
	cliPriceIn  = 1.25
	cliPriceOut = 10.0
)

// cliRunLimit bounds one CLI run: a turn takes a few seconds.
const cliRunLimit = 90 * time.Second

// agentCLIs are the CLIs' paths, installed once by .ci/ensure-clis (which
// does nothing when they are in place).
var agentCLIs struct {
	once          sync.Once
	codex, claude string
	err           error
}

// installedCLIs returns the paths of codex and claude, installing them
// with .ci/ensure-clis the first time; it skips the test, with the
// script's word, only when they cannot be installed (no npm, no registry).
func installedCLIs(t *testing.T) (codex, claude string) {
	t.Helper()
	agentCLIs.once.Do(func() {
		root, err := procs.ModuleRoot()
		if err != nil {
			agentCLIs.err = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, filepath.Join(root, ".ci", "ensure-clis")).CombinedOutput()
		if err != nil {
			agentCLIs.err = fmt.Errorf("%w: %s", err, bytes.TrimSpace(out))
			return
		}
		bin := filepath.Join(root, "bin", "clis", "node_modules", ".bin")
		agentCLIs.codex, agentCLIs.claude = filepath.Join(bin, "codex"), filepath.Join(bin, "claude")
	})
	if agentCLIs.err != nil {
		t.Skipf("the agent CLIs cannot be installed (.ci/ensure-clis: %v)", agentCLIs.err)
	}
	return agentCLIs.codex, agentCLIs.claude
}

// upstreamExchange is one request that reached the upstream and the
// answer it got.
type upstreamExchange struct {
	method, path string
	header       http.Header
	request      []byte
	status       int
	answer       bytes.Buffer
}

// upstreamLog records what reaches the upstream and what it answers: the
// usage the provider reported, for the metering check, and what each CLI
// sent, for the log of a failed run. A turn on a WebSocket is no HTTP
// exchange (the upgrade is, answered 101): those are read from the fake's
// own log. Safe for concurrent use.
type upstreamLog struct {
	fake *fakeprovider.Provider
	mu   sync.Mutex
	seen []*upstreamExchange
}

// logMark is a point in an upstreamLog: how many exchanges it had
// recorded, and how many requests the fake had logged.
type logMark struct{ http, fake int }

// socketTurns are the turns the fake served on WebSockets since m.
func (l *upstreamLog) socketTurns(m logMark) []fakeprovider.Request {
	var turns []fakeprovider.Request
	for _, r := range l.fake.Requests()[m.fake:] {
		if r.Socket != "" {
			turns = append(turns, r)
		}
	}
	return turns
}

// wrap returns next recording into l.
func (l *upstreamLog) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		x := &upstreamExchange{method: r.Method, path: r.URL.Path, header: r.Header.Clone(), request: body}
		l.mu.Lock()
		l.seen = append(l.seen, x)
		l.mu.Unlock()
		next.ServeHTTP(&recordingWriter{ResponseWriter: w, l: l, x: x}, r)
	})
}

// recordingWriter keeps a copy of an answer in its exchange.
type recordingWriter struct {
	http.ResponseWriter
	l *upstreamLog
	x *upstreamExchange
}

func (w *recordingWriter) WriteHeader(status int) {
	w.l.mu.Lock()
	w.x.status = status
	w.l.mu.Unlock()
	w.ResponseWriter.WriteHeader(status)
}

func (w *recordingWriter) Write(b []byte) (int, error) {
	w.l.mu.Lock()
	if w.x.status == 0 {
		w.x.status = http.StatusOK
	}
	w.x.answer.Write(b)
	w.l.mu.Unlock()
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController flush the stream.
func (w *recordingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// billed is the usage the upstream reported in its answers to turns
// (POSTs, and turns on a WebSocket) since from (billedUsage; the fake's
// Request.Usage for a socket's), how many turns it answered, how many of
// them on a socket, and how many answers of any kind it served 200.
func (l *upstreamLog) billed(t *testing.T, from logMark) (billed tokenCount, turns, onSocket, served int) {
	t.Helper()
	for _, r := range l.socketTurns(from) {
		if r.Status != http.StatusOK {
			continue
		}
		if r.Usage == nil {
			t.Errorf("a %s socket turn: the upstream's answer reports no usage", r.Socket)
			continue
		}
		billed.in, billed.out = billed.in+int64(r.Usage.InputTokens), billed.out+int64(r.Usage.OutputTokens)
		turns, onSocket, served = turns+1, onSocket+1, served+1
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, x := range l.seen[from.http:] {
		if x.status != http.StatusOK {
			continue
		}
		served++
		if x.method != http.MethodPost {
			continue
		}
		u, ok := billedUsage(x.path, isEventStream(x.answer.Bytes()), x.answer.Bytes())
		if !ok {
			t.Errorf("%s %s: the upstream's answer reports no usage", x.method, x.path)
		}
		billed.in, billed.out = billed.in+u.in, billed.out+u.out
		turns++
	}
	return billed, turns, onSocket, served
}

// isEventStream tells an answer that is an event stream by its first
// bytes.
func isEventStream(b []byte) bool {
	return bytes.HasPrefix(b, []byte("event:")) || bytes.HasPrefix(b, []byte("data:"))
}

// mark is the log's point now.
func (l *upstreamLog) mark() logMark {
	l.mu.Lock()
	defer l.mu.Unlock()
	return logMark{http: len(l.seen), fake: len(l.fake.Requests())}
}

// since is what reached the upstream since from: method, path, the
// headers a CLI chose (credentials by name only) and the start of each
// body, and the status answered; then each turn on a socket, its lane,
// status and usage.
func (l *upstreamLog) since(from logMark) string {
	var b strings.Builder
	for _, r := range l.socketTurns(from) {
		fmt.Fprintf(&b, "%s socket turn on %s (lane %q) → %d, usage %+v\n", r.Socket, r.Path, r.StreamID, r.Status, r.Usage)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, x := range l.seen[from.http:] {
		fmt.Fprintf(&b, "%s %s → %d (%d bytes sent)\n", x.method, x.path, x.status, len(x.request))
		for k, v := range x.header {
			switch http.CanonicalHeaderKey(k) {
			case "Authorization", "X-Api-Key", "Api-Key":
				fmt.Fprintf(&b, "  %s: (set)\n", k)
			default:
				fmt.Fprintf(&b, "  %s: %s\n", k, strings.Join(v, ", "))
			}
		}
		fmt.Fprintf(&b, "  body: %.600s\n", x.request)
	}
	return b.String()
}

// cliKey is the agent caller's key, which both CLIs send.
const cliKey = "sk-e2e-agent-cli-0123456789abcdef"

// cliProxy is a meterproxy in front of the fake provider for the CLIs:
// one interactive caller (agent, key cliKey) with a monthly budget,
// priced models, unknown callers refused (so a probe without a key would
// have been a refusal), the provider's key replacing the caller's. The
// fake's streams end 100 ms after their last event, so Codex, which closes
// its connection right after response.completed, leaves before a stream's
// end (which made its turns cut short and estimated before issue 33).
func cliProxy(t *testing.T) (*procs.Proxy, *upstreamLog) {
	t.Helper()
	log := &upstreamLog{fake: fakeprovider.New(fakeprovider.Config{EndLag: 100 * time.Millisecond})}
	up := startUpstream(t, log.wrap(log.fake))
	cfg := baseConfig(up.URL)
	cfg.set("upstream.api_key", "sk-e2e-provider-for-clis")
	cfg.set("classify.unknown_callers", "reject")
	cfg.set("callers", []map[string]any{
		{"name": "agent", "key_env": "AGENT_KEY", "class": "interactive", "budget": map[string]any{"usd": 100, "per": "month"}},
	})
	cfg.set("prices", []map[string]any{{"match": []string{codexModel, claudeModel}, "input": cliPriceIn, "output": cliPriceOut}})
	return startProxy(t, cfg, []string{"AGENT_KEY=" + cliKey}, cliKey, "sk-e2e-provider-for-clis"), log
}

// cliEnv is the environment a CLI runs in: its own HOME, the PATH (Codex's
// launcher is a node script), nothing else of the test's, and env.
func cliEnv(t *testing.T, env ...string) []string {
	t.Helper()
	return append([]string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH"), "LANG=C.UTF-8", "NO_COLOR=1"}, env...)
}

// runCLI runs bin with args in env and a working directory of its own,
// within cliRunLimit, and returns its output; a failed run fails the test
// with its output and what reached the upstream.
func runCLI(t *testing.T, log *upstreamLog, env []string, bin string, args ...string) string {
	t.Helper()
	from := log.mark()
	ctx, cancel := context.WithTimeout(t.Context(), cliRunLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env, cmd.Dir, cmd.WaitDelay = env, t.TempDir(), 5*time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	t.Logf("%s ran %s", filepath.Base(bin), time.Since(start).Round(time.Millisecond))
	if err != nil || !strings.Contains(out.String(), "deterministic fake reply") {
		t.Fatalf("%s %s: %v\n%s\nwhat reached the upstream:\n%s", filepath.Base(bin), strings.Join(args, " "), err, out.String(), log.since(from))
	}
	return out.String()
}

// cliMeter is what the proxy counted of the agent caller.
type cliMeter struct {
	tokens                tokenMeter
	forwarded, refusals   float64
	spend, estimatedSpend float64
	cut, unpriced         float64
	socketTurns           float64
	negotiations          map[string]float64
}

func readCLIMeter(t *testing.T, adminURL string) cliMeter {
	t.Helper()
	m := scrape(t, adminURL)
	return cliMeter{
		tokens:         readTokens(m, "agent"),
		forwarded:      sum(m, "meterproxy_requests_total", map[string]string{"caller": "agent", "outcome": "forwarded", "code": "200"}),
		refusals:       sum(m, "meterproxy_refusals_total", nil),
		spend:          sum(m, "meterproxy_spend_usd_total", map[string]string{"caller": "agent", "estimated": "false"}),
		estimatedSpend: sum(m, "meterproxy_spend_usd_total", map[string]string{"caller": "agent", "estimated": "true"}),
		cut:            sum(m, "meterproxy_responses_cut_short_total", nil),
		unpriced:       sum(m, "meterproxy_unpriced_requests_total", nil),
		socketTurns:    sum(m, "meterproxy_socket_turns_total", map[string]string{"api": "responses", "class": "interactive", "outcome": "forwarded"}),
		negotiations: map[string]float64{
			"upgrade_required": sum(m, "meterproxy_negotiations_total", map[string]string{"reason": "upgrade_required"}),
			"not_an_api":       sum(m, "meterproxy_negotiations_total", map[string]string{"reason": "not_an_api"}),
		},
	}
}

// checkTurns checks what one CLI run cost, from before to the proxy's
// counters once it counted every answer the upstream served since from:
// each turn forwarded 200 and metered exactly — its tokens the usage the
// fake reported (estimated="false", none estimated), priced, counted
// against the caller's budget — none cut short, no refusal of any class,
// and the negotiations want says. overSocket says every turn went over a
// Responses WebSocket (each counted a forwarded socket turn), else none
// did.
func checkTurns(t *testing.T, p *procs.Proxy, log *upstreamLog, from logMark, before cliMeter, spentBefore float64, overSocket bool, want map[string]float64) {
	t.Helper()
	billed, turns, onSocket, served := log.billed(t, from)
	if turns == 0 {
		t.Fatalf("no turn reached the upstream:\n%s", log.since(from))
	}
	if wantOn := map[bool]int{true: turns, false: 0}[overSocket]; onSocket != wantOn {
		t.Errorf("%d of %d turns went over a WebSocket, want %d:\n%s", onSocket, turns, wantOn, log.since(from))
	}
	var now cliMeter
	waitFor(t, fmt.Sprintf("the proxy to count the %d turn(s) the upstream served", served), func() bool {
		now = readCLIMeter(t, p.AdminURL)
		return now.forwarded-before.forwarded >= float64(served)
	})
	d := now.tokens.minus(before.tokens)
	if n := now.forwarded - before.forwarded; n != float64(served) {
		t.Errorf("%v turns forwarded 200, the upstream served %d", n, served)
	}
	if d.reported != billed || d.estimated != (tokenCount{}) {
		t.Errorf("metered %v reported and %v estimated, want the %v the fake reported, none estimated", d.reported, d.estimated, billed)
	}
	wantSpend := (float64(billed.in)*cliPriceIn + float64(billed.out)*cliPriceOut) / 1e6
	if got := now.spend - before.spend; math.Abs(got-wantSpend) > 1e-6 || got <= 0 {
		t.Errorf("spend $%.6f, want $%.6f", got, wantSpend)
	}
	if n := now.estimatedSpend - before.estimatedSpend; n != 0 {
		t.Errorf("$%v spent as an estimate", n)
	}
	if n := now.unpriced - before.unpriced; n != 0 {
		t.Errorf("%v unpriced answers", n)
	}
	var got float64
	waitFor(t, fmt.Sprintf("the agent's budget to spend $%.6f", wantSpend), func() bool {
		got = budgetSpent(t, p, "agent") - spentBefore
		return math.Abs(got-wantSpend) <= 1e-6
	})
	if n := now.cut - before.cut; n != 0 {
		t.Errorf("%v answers cut short", n)
	}
	if n := now.refusals - before.refusals; n != 0 {
		t.Errorf("%v refusals counted, want none", n)
	}
	if n := now.socketTurns - before.socketTurns; n != float64(onSocket) {
		t.Errorf("%v socket turns forwarded, the upstream served %d", n, onSocket)
	}
	for reason, n := range want {
		if got := now.negotiations[reason] - before.negotiations[reason]; got != n {
			t.Errorf("%v negotiations %s, want %v", got, reason, n)
		}
	}
	t.Logf("%d turn(s) (%d on a socket) of %d answers: %v, $%.6f, negotiations %v", turns, onSocket, served, billed, wantSpend, want)
}

// budgetSpent is what caller's budget has spent so far (0 before
// anything settled into it).
func budgetSpent(t *testing.T, p *procs.Proxy, caller string) float64 {
	t.Helper()
	return sum(scrape(t, p.AdminURL), "meterproxy_budget_spent_usd", map[string]string{"budget": "caller:" + caller})
}

// TestClaudeCodeThroughTheProxy: Claude Code 2.1.332 (`claude -p`) with
// ANTHROPIC_BASE_URL at the proxy and ANTHROPIC_API_KEY the agent's key:
// its turn (POST /v1/messages?beta=true, streamed, its tools, thinking and
// betas) completes, metered exactly, priced and counted against the
// agent's budget, with no refusal. CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC
// keeps it on localhost, and with it Claude Code sends no HEAD
// /api/hello; without it, it sends one without a key on every start,
// which meterproxy answers 404 as a negotiation (as here, sent as Claude
// Code sends it).
func TestClaudeCodeThroughTheProxy(t *testing.T) {
	t.Parallel()
	_, claude := installedCLIs(t)
	p, log := cliProxy(t)
	from, before, spent := log.mark(), readCLIMeter(t, p.AdminURL), budgetSpent(t, p, "agent")
	env := cliEnv(t, "ANTHROPIC_BASE_URL="+p.URL, "ANTHROPIC_API_KEY="+cliKey,
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_TELEMETRY=1", "DISABLE_AUTOUPDATER=1", "DISABLE_ERROR_REPORTING=1")
	runCLI(t, log, env, claude, "-p", "say hi", "--model", claudeModel, "--no-session-persistence")
	req, err := http.NewRequestWithContext(t.Context(), http.MethodHead, p.URL+"/api/hello", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("User-Agent", "claude-cli/2.1.332 (external, cli)")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if res.StatusCode != http.StatusNotFound {
		t.Errorf("HEAD /api/hello without a key: %d, want 404", res.StatusCode)
	}
	checkTurns(t, p, log, from, before, spent, false, map[string]float64{"not_an_api": 1, "upgrade_required": 0})
}

// codexConfig is a config.toml for Codex 0.171 that keeps it on localhost
// (no update check, no analytics, no plugin sync from GitHub), with extra
// appended.
func codexConfig(t *testing.T, extra string) string {
	t.Helper()
	home := t.TempDir()
	conf := "model = \"" + codexModel + "\"\ncheck_for_update_on_startup = false\n" + extra +
		"\n[analytics]\nenabled = false\n\n[features]\nplugins = false\n"
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return home
}

// codexArgs run one turn non-interactively: no git repository needed,
// nothing persisted, config keys checked, no tool may write.
var codexArgs = []string{"exec", "--skip-git-repo-check", "--ephemeral", "--strict-config", "--sandbox", "read-only", "say hi"}

// TestCodexThroughTheProxy: Codex 0.171.0 (`codex exec`) through the
// proxy, both ways it can be pointed at it. Each turn completes, metered
// exactly, priced and counted against the agent's budget, none cut short
// though the fake's stream ends 100 ms after response.completed (Codex
// closes its connection then), and no refusal is counted.
//
//   - A custom provider in config.toml with supports_websockets = false:
//     plain HTTP, no upgrade tried.
//   - The built-in OpenAI provider with openai_base_url: it opens GET
//     /v1/responses as a WebSocket, which the proxy relays (no 426, no
//     negotiation), and its turn goes over the socket, metered from the
//     turn's response.completed. On the 400 meterproxy gave before issue
//     33, it gave up (exit 1, no turn); on a 426 it fell back to HTTP.
func TestCodexThroughTheProxy(t *testing.T) {
	t.Parallel()
	codex, _ := installedCLIs(t)
	p, log := cliProxy(t)
	for _, tt := range []struct {
		name, config string
		env          []string
		overSocket   bool
		negotiations map[string]float64
	}{
		{"custom provider over HTTP", `model_provider = "meterproxy"

[model_providers.meterproxy]
name = "meterproxy"
base_url = "` + p.URL + `/v1"
env_key = "METERPROXY_AGENT_KEY"
wire_api = "responses"
supports_websockets = false
`, []string{"METERPROXY_AGENT_KEY=" + cliKey}, false, map[string]float64{"upgrade_required": 0, "not_an_api": 0}},
		{"built-in provider over WebSocket", `openai_base_url = "` + p.URL + `/v1"`,
			[]string{"CODEX_API_KEY=" + cliKey}, true, map[string]float64{"upgrade_required": 0, "not_an_api": 0}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			from, before, spent := log.mark(), readCLIMeter(t, p.AdminURL), budgetSpent(t, p, "agent")
			env := cliEnv(t, append(tt.env, "CODEX_HOME="+codexConfig(t, tt.config))...)
			runCLI(t, log, env, codex, codexArgs...)
			checkTurns(t, p, log, from, before, spent, tt.overSocket, tt.negotiations)
			socketsQuiet(t, p) // Codex's socket closed with it, nothing left in flight
		})
	}
}
