package store

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/meterproxy/meterproxy/test/redistest"
)

// TestTLSCAFileVerifies: against a redis-server whose certificate a private
// CA issued, the client store.tls_ca_file configures connects; without it
// the certificate is refused as signed by an unknown authority.
func TestTLSCAFileVerifies(t *testing.T) {
	srv := redistest.StartTLS(t)
	for _, tc := range []struct {
		name    string
		file    string
		wantErr bool
	}{
		{"with the CA", srv.CAFile(), false},
		{"system roots", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewRedisClient(Config{RedisURL: srv.URL(), TLSCAFile: tc.file, Timeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = c.Close() }()
			err = c.Ping(t.Context()).Err()
			var unknown x509.UnknownAuthorityError
			switch {
			case tc.wantErr && !errors.As(err, &unknown):
				t.Errorf("PING: %v, want the certificate refused as signed by an unknown authority", err)
			case !tc.wantErr && err != nil:
				t.Errorf("PING: %v", err)
			}
		})
	}
	// The same CA for a cluster and a sentinel client: go-redis hands the
	// TLS config to every node and sentinel connection.
	for _, u := range []string{
		"rediss://" + srv.Addr() + "?cluster=true",
		"rediss://" + srv.Addr() + "?master_name=m",
	} {
		c, err := NewRedisClient(Config{RedisURL: u, TLSCAFile: srv.CAFile(), Timeout: time.Second})
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		tc := tlsConfigOf(c)
		if tc == nil || tc.RootCAs == nil {
			t.Errorf("%s: the client's TLS config has no RootCAs", u)
		}
		_ = c.Close()
	}
}

// tlsConfigOf returns the TLS config of a client NewRedisClient built.
func tlsConfigOf(c redis.UniversalClient) *tls.Config {
	switch c := c.(type) {
	case *redis.ClusterClient:
		return c.Options().TLSConfig
	case *redis.Client:
		return c.Options().TLSConfig
	}
	return nil
}
