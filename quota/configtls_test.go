package quota

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meterproxy/meterproxy/quota/store"
	"github.com/meterproxy/meterproxy/test/redistest"
)

// TestTLSCAFileValidate: store.tls_ca_file must be a readable PEM bundle
// and needs a rediss:// store.redis_url; a bad one is refused by key, with
// neither the file's contents nor the URL's password in the message.
func TestTLSCAFileValidate(t *testing.T) {
	dir := t.TempDir()
	ca := redistest.StartTLS(t).CAFile()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("s3cret-not-a-certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, url, file string
		want            string // in the error; "" for valid
	}{
		{"none", "", "", ""},
		{"single", "rediss://:s3cret@127.0.0.1:6380/0", ca, ""},
		{"cluster", "rediss://127.0.0.1:7000?addr=127.0.0.1:7001", ca, ""},
		{"sentinel", "rediss://127.0.0.1:26379?master_name=m&addr=127.0.0.1:26380", ca, ""},
		{"missing file", "rediss://:s3cret@127.0.0.1:6380/0", filepath.Join(dir, "nope.pem"),
			"store.tls_ca_file: read the CA bundle: open " + filepath.Join(dir, "nope.pem")},
		{"not PEM", "rediss://:s3cret@127.0.0.1:6380/0", notPEM, "store.tls_ca_file: " + notPEM + " holds no PEM certificate"},
		{"a directory", "rediss://127.0.0.1:6380/0", dir, "store.tls_ca_file: read the CA bundle"},
		{"plain redis://", "redis://:s3cret@127.0.0.1:6379/0", ca, "store.tls_ca_file: set, but store.redis_url is not a rediss:// URL"},
		{"no redis", "", ca, "store.tls_ca_file: set, but store.redis_url is not a rediss:// URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			c.Store.RedisURL, c.Store.TLSCAFile = tt.url, tt.file
			err := c.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if tt.url == "" {
					return
				}
				rc, err := store.NewRedisClient(c.Store)
				if err != nil {
					t.Fatalf("newRedisClient: %v", err)
				}
				_ = rc.Close()
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("the error shows a secret: %v", err)
			}
			if tt.url != "" {
				if _, err := store.NewRedisClient(c.Store); err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("newRedisClient: %v, want an error containing %q", err, tt.want)
				}
			}
		})
	}
}
