package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TLSServer is a redis-server the test owns that speaks only TLS, on a free
// loopback port, with a certificate for 127.0.0.1 and localhost issued by a
// certificate authority made for it at test time. It does not ask clients
// for certificates. It is SIGKILLed when the test ends.
type TLSServer struct {
	n      *node
	caFile string
	roots  *x509.CertPool
}

// StartTLS makes a private CA and a server certificate it signs, starts
// redis-server with --port 0 and --tls-port on a free port, and returns
// once a client that trusts the CA gets an answer to PING. REDIS_URL is not
// used.
//
// If this redis-server was built without TLS it skips the test, saying so;
// if redis-server is not on PATH it fails the test.
func StartTLS(t testing.TB) *TLSServer {
	t.Helper()
	bin := redisServerBin(t)
	certs := t.TempDir()
	pki, err := writePKI(certs)
	if err != nil {
		t.Fatalf("redistest: make the TLS certificates: %v", err)
	}
	s := &TLSServer{caFile: pki.caFile, roots: pki.roots}
	n, err := startNode(t, bin, nodeSpec{
		args: func(port int, dir string) ([]string, error) {
			args := serverArgs(0, dir) // no plain-text port
			return append(args,
				"--tls-port", strconv.Itoa(port),
				"--tls-cert-file", pki.certFile,
				"--tls-key-file", pki.keyFile,
				"--tls-ca-cert-file", pki.caFile,
				"--tls-auth-clients", "no",
			), nil
		},
		options: s.options,
	})
	if err != nil {
		if noTLS(err) {
			t.Skipf("redistest: this redis-server was built without TLS support (BUILD_TLS=no), so the TLS tests cannot run: %v", err)
		}
		t.Fatalf("redistest: start redis-server with TLS: %v", err)
	}
	s.n = n
	logOnFailure(t, []*node{n})
	return s
}

// noTLS reports whether a failed start says redis-server has no TLS: such
// a build refuses the tls-* settings as unknown.
func noTLS(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "Bad directive") && strings.Contains(msg, "tls")
}

// options reach the server at addr over TLS, trusting only the test's CA.
func (s *TLSServer) options(addr string) (*redis.Options, error) {
	opts, err := controlOptions("rediss://" + addr + "/0")
	if err != nil {
		return nil, err
	}
	opts.TLSConfig.RootCAs = s.roots
	return opts, nil
}

// Addr returns the server's host:port, 127.0.0.1:PORT.
func (s *TLSServer) Addr() string { return s.n.addr }

// URL returns rediss://127.0.0.1:PORT/0. A client must trust the CA in
// [TLSServer.CAFile] to connect.
func (s *TLSServer) URL() string { return "rediss://" + s.n.addr + "/0" }

// CAFile returns the path of the PEM file of the CA that issued the
// server's certificate.
func (s *TLSServer) CAFile() string { return s.caFile }

// Client returns a new go-redis client that trusts the CA, closed at
// t.Cleanup.
func (s *TLSServer) Client(t testing.TB) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(s.URL())
	if err != nil {
		t.Fatalf("redistest: parse server URL: %v", err)
	}
	opts.TLSConfig.RootCAs = s.roots
	return closedAtCleanup(t, redis.NewClient(opts))
}

// pki is the files of a private CA and a server certificate it issued.
type pki struct {
	caFile, certFile, keyFile string
	roots                     *x509.CertPool
}

// writePKI makes an ECDSA P-256 CA and a server certificate for 127.0.0.1,
// ::1 and localhost signed by it, valid for a day, and writes ca.crt,
// server.crt and server.key (PKCS #8) into dir.
func writePKI(dir string) (pki, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return pki{}, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "redistest CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return pki{}, fmt.Errorf("CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return pki{}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return pki{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "redistest server"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		// Redis also uses its certificate as a client (replication,
		// cluster bus), so it may authenticate either way.
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:    []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return pki{}, fmt.Errorf("server certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return pki{}, err
	}
	p := pki{
		caFile:   filepath.Join(dir, "ca.crt"),
		certFile: filepath.Join(dir, "server.crt"),
		keyFile:  filepath.Join(dir, "server.key"),
		roots:    x509.NewCertPool(),
	}
	p.roots.AddCert(ca)
	for _, f := range []struct {
		path, typ string
		der       []byte
	}{
		{p.caFile, "CERTIFICATE", caDER},
		{p.certFile, "CERTIFICATE", der},
		{p.keyFile, "PRIVATE KEY", keyDER},
	} {
		b := pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der})
		if err := os.WriteFile(f.path, b, 0o600); err != nil {
			return pki{}, err
		}
	}
	return p, nil
}
