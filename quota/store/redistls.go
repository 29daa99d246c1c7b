package store

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
)

// LoadTLSCA reads store.tls_ca_file, the PEM bundle of the certificate
// authorities that Redis's certificate must chain to: nil when path is
// empty (the system's roots then verify a rediss:// server). It refuses a
// file it cannot read or that holds no PEM certificate, and a store.redis_url
// (u) that is not rediss://, where a CA would silently do nothing. Errors
// name the file, never its contents.
func LoadTLSCA(path string, u *url.URL) (*x509.CertPool, error) {
	if path == "" {
		return nil, nil
	}
	if u == nil || u.Scheme != "rediss" {
		return nil, errors.New("set, but store.redis_url is not a rediss:// URL: the CA verifies TLS connections only")
	}
	pem, err := os.ReadFile(path) //nolint:gosec // G304: the operator's own config names the file
	if err != nil {
		return nil, fmt.Errorf("read the CA bundle: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return roots, nil
}

// withRoots makes tc verify the server's certificate against roots, when
// both are set (tc is nil for a redis:// URL, roots for no
// store.tls_ca_file).
func withRoots(tc *tls.Config, roots *x509.CertPool) {
	if tc != nil && roots != nil {
		tc.RootCAs = roots
	}
}
