package redistest

import (
	"crypto/x509"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestTLSServer(t *testing.T) {
	t.Parallel()
	s := StartTLS(t)
	if !strings.HasPrefix(s.URL(), "rediss://127.0.0.1:") {
		t.Errorf("URL() = %q, want rediss://127.0.0.1:PORT/0", s.URL())
	}
	ctx := t.Context()
	if err := s.Client(t).Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET through TLS with the CA: %v", err)
	}

	// The CA file is what a client configures: it alone makes the server trusted.
	pem, err := os.ReadFile(s.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		t.Fatalf("%s holds no PEM certificate", s.CAFile())
	}
	for _, tc := range []struct {
		name    string
		roots   *x509.CertPool
		wantErr bool
	}{
		{"CA file", roots, false},
		{"system roots", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts, err := redis.ParseURL(s.URL())
			if err != nil {
				t.Fatal(err)
			}
			opts.TLSConfig.RootCAs = tc.roots
			opts.MaxRetries = -1
			c := redis.NewClient(opts)
			defer func() { _ = c.Close() }()
			got, err := c.Get(ctx, "k").Result()
			var unknown x509.UnknownAuthorityError
			switch {
			case tc.wantErr && !errors.As(err, &unknown):
				t.Errorf("GET = %q, %v; want the certificate refused as signed by an unknown authority", got, err)
			case !tc.wantErr && (err != nil || got != "v"):
				t.Errorf("GET = %q, %v; want v", got, err)
			}
		})
	}

	// No plain-text port: the server speaks TLS only.
	plain := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer func() { _ = plain.Close() }()
	if err := plain.Ping(ctx).Err(); err == nil {
		t.Error("PING without TLS succeeded")
	}
}
