package proxy

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"

	"github.com/meterproxy/meterproxy/quota"
	"github.com/prometheus/client_golang/prometheus"
)

func TestAdminStateAndToken(t *testing.T) {
	cfg := DefaultServerConfig()
	cfg.AdminToken = "admin-secret"
	srv := NewServer(cfg, http.NotFoundHandler(), Admin{
		Gatherer: prometheus.NewRegistry(),
		State: func() State {
			return State{ConfigVersion: "abc123", State: quota.State{PoolState: quota.PoolState{Queued: map[string]int{"bulk": 3}}}}
		},
	}, slog.New(slog.DiscardHandler))
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	al, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, pl, al) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	get := func(path, auth string) (int, []byte) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+al.Addr().String()+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = res.Body.Close() }()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		return res.StatusCode, b
	}
	if status, _ := get("/admin/state", ""); status != http.StatusUnauthorized {
		t.Errorf("without the token: %d, want 401", status)
	}
	if status, _ := get("/admin/state", "Bearer wrong"); status != http.StatusUnauthorized {
		t.Errorf("with a wrong token: %d, want 401", status)
	}
	// RFC 7235: the scheme is case-insensitive (issue 11 item 8).
	for _, auth := range []string{"bearer admin-secret", "BEARER  admin-secret"} {
		if status, _ := get("/admin/state", auth); status != http.StatusOK {
			t.Errorf("%q: %d, want 200", auth, status)
		}
	}
	for _, auth := range []string{"Basic admin-secret", "admin-secret", "Bearer"} {
		if status, _ := get("/admin/state", auth); status != http.StatusUnauthorized {
			t.Errorf("%q: %d, want 401", auth, status)
		}
	}
	status, body := get("/admin/state", "Bearer admin-secret")
	var st State
	if status != http.StatusOK || json.Unmarshal(body, &st) != nil || st.ConfigVersion != "abc123" || st.Queued["bulk"] != 3 {
		t.Errorf("with the token: %d %s", status, body)
	}
	if status, _ := get("/healthz", ""); status != http.StatusOK {
		t.Errorf("/healthz needs no token: %d", status)
	}
}
