package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/meterproxy/meterproxy/test/fakeprovider"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestParseFlags(t *testing.T) {
	def := fakeprovider.DefaultConfig()
	tests := []struct {
		name       string
		args       []string
		wantCfg    fakeprovider.Config
		wantListen string
		wantErr    bool
	}{
		{"defaults", nil, def, ":8081", false},
		{"all flags", []string{"-listen", "127.0.0.1:9", "-latency", "1s", "-chunks", "7", "-chunk-interval", "0s", "-rpm", "600", "-tpm", "90000",
			"-ws-max-age", "5m", "-ws-max-message", "4096"},
			fakeprovider.Config{Latency: time.Second, StreamChunks: 7, RPM: 600, TPM: 90000, WSMaxAge: 5 * time.Minute, WSMaxMessageBytes: 4096},
			"127.0.0.1:9", false},
		{"token limits, models and windows", []string{"-tpm", "6000", "-enforce-tpm", "-output-tpm", "900", "-window", "10s",
			"-model", "gpt-4o:rpm=300,tpm=30000", "-model", "my-deployment:output-tpm=5", "-model", "free", "-model", "gemini-2.5-pro:no-quota"},
			fakeprovider.Config{Latency: def.Latency, StreamChunks: def.StreamChunks, ChunkInterval: def.ChunkInterval,
				WSMaxAge: def.WSMaxAge, WSMaxMessageBytes: def.WSMaxMessageBytes,
				TPM: 6000, EnforceTPM: true, OutputTPM: 900, Window: 10 * time.Second, Models: []fakeprovider.ModelLimits{
					{Name: "gpt-4o", RPM: 300, TPM: 30000}, {Name: "my-deployment", OutputTPM: 5}, {Name: "free"}, {Name: "gemini-2.5-pro", NoQuota: true}}}, ":8081", false},
		{"a model without a name", []string{"-model", ":rpm=5"}, fakeprovider.Config{}, "", true},
		{"a model's unknown limit", []string{"-model", "gpt-4o:rps=5"}, fakeprovider.Config{}, "", true},
		{"a model's bad number", []string{"-model", "gpt-4o:rpm=-5"}, fakeprovider.Config{}, "", true},
		{"negative window", []string{"-window", "-1s"}, fakeprovider.Config{}, "", true},
		{"a knee", []string{"-slots", "8", "-latency", "200ms"},
			fakeprovider.Config{Latency: 200 * time.Millisecond, StreamChunks: def.StreamChunks, ChunkInterval: def.ChunkInterval, Slots: 8,
				WSMaxAge: def.WSMaxAge, WSMaxMessageBytes: def.WSMaxMessageBytes}, ":8081", false},
		{"a dialect", []string{"-dialect", "together", "-over-capacity", "0.25", "-keep-alive", "200ms"},
			fakeprovider.Config{Latency: def.Latency, StreamChunks: def.StreamChunks, ChunkInterval: def.ChunkInterval,
				WSMaxAge: def.WSMaxAge, WSMaxMessageBytes: def.WSMaxMessageBytes,
				Dialect: fakeprovider.DialectTogether, OverCapacity: 0.25, KeepAlive: 200 * time.Millisecond}, ":8081", false},
		{"an unknown dialect", []string{"-dialect", "cohere"}, fakeprovider.Config{}, "", true},
		{"over-capacity above 1", []string{"-over-capacity", "1.5"}, fakeprovider.Config{}, "", true},
		{"negative ws-max-age", []string{"-ws-max-age", "-1s"}, fakeprovider.Config{}, "", true},
		{"negative slots", []string{"-slots", "-1"}, fakeprovider.Config{}, "", true},
		{"negative rpm", []string{"-rpm", "-1"}, fakeprovider.Config{}, "", true},
		{"unknown flag", []string{"-nope"}, fakeprovider.Config{}, "", true},
		{"stray argument", []string{"extra"}, fakeprovider.Config{}, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, listen, err := parseFlags(tc.args, io.Discard)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			cfg.NoLog = false // the program's own choice, not a flag
			if !reflect.DeepEqual(cfg, tc.wantCfg) || listen != tc.wantListen {
				t.Errorf("cfg = %+v listen %q, want %+v %q", cfg, listen, tc.wantCfg, tc.wantListen)
			}
		})
	}
}

func TestRunServesAndStops(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	logR, logW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-listen", "127.0.0.1:0", "-latency", "0s", "-rpm", "60"}, logW, io.Discard)
		_ = logW.Close()
	}()
	addrs := make(chan string, 1)
	go func() { // read the listen address, then drain the log
		sc := bufio.NewScanner(logR)
		re := regexp.MustCompile(`msg=listening addr=(\S+)`)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				addrs <- m[1]
			}
		}
		close(addrs)
	}()
	addr, ok := <-addrs
	if !ok {
		t.Fatalf("no listen address logged; run: %v", <-done)
	}
	resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(`{"messages":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	http.DefaultClient.CloseIdleConnections()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("x-ratelimit-limit-requests") != "60" {
		t.Errorf("status %d, limit %q", resp.StatusCode, resp.Header.Get("x-ratelimit-limit-requests"))
	}
	// A Responses socket open at shutdown is closed with 1001.
	ws, wsResp, err := websocket.Dial(t.Context(), "ws://"+addr+"/v1/responses", nil)
	if err != nil {
		t.Fatal(err)
	}
	if wsResp.Body != nil {
		_ = wsResp.Body.Close()
	}
	defer func() { _ = ws.CloseNow() }()
	cancel()
	if _, _, err := ws.Read(t.Context()); websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Errorf("socket at shutdown: %v, want close 1001", err)
	}
	if err := <-done; err != nil {
		t.Errorf("run = %v", err)
	}
	for range addrs { // wait for the log reader to finish
	}
}

// TestREADMECommands: every fakeprovider command line in README.md and
// docs/*.md parses (its flags exist and their values are valid), so the
// scenarios they show run as written.
func TestREADMECommands(t *testing.T) {
	docs, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	var found int
	for _, file := range append([]string{filepath.Join("..", "..", "README.md")}, docs...) {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		text := strings.ReplaceAll(string(raw), "\\\n", " ") // shell line continuations
		for line := range strings.Lines(text) {
			_, command, ok := strings.Cut(line, "go run ./cmd/fakeprovider ")
			if !ok || strings.HasPrefix(strings.TrimSpace(command), "-h") {
				continue
			}
			found++
			command, _, _ = strings.Cut(command, "`") // inline code ends there
			if _, _, err := parseFlags(strings.Fields(command), io.Discard); err != nil {
				t.Errorf("%s: go run ./cmd/fakeprovider %s: %v", filepath.Base(file), strings.TrimSpace(command), err)
			}
		}
	}
	if found == 0 {
		t.Error("README.md and docs/ show no fakeprovider command; they have several")
	}
}
