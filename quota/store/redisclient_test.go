package store

import (
	"strings"
	"testing"
	"time"
)

func TestParseRedisURL(t *testing.T) {
	tests := []struct {
		url     string
		mode    RedisMode
		wantErr string
	}{
		{"redis://127.0.0.1:6379/0", redisSingle, ""},
		{"rediss://user:s3cret@redis.example:6380/1", redisSingle, ""},
		{"redis://h1:6379?addr=h2:6379&addr=h3:6379", redisCluster, ""},
		{"redis://h1:6379?cluster=true", redisCluster, ""},
		{"redis://s1:26379?master_name=mymaster&addr=s2:26379", redisSentinel, ""},
		{"http://127.0.0.1:6379", "", "scheme"},
		{"redis://", "", "no host"},
		{"redis://:s3cret@127.0.0.1:6379/0?bogus=1", "", "bogus"},
		{"redis://:s3cret@127.0.0.1:6379/x", "", "database"},
		{"redis://:s3 cret@host:6379\x7f", "", "not a valid URL"},
	}
	for _, tt := range tests {
		mode, _, err := ParseRedisURL(tt.url)
		switch {
		case tt.wantErr == "" && (err != nil || mode != tt.mode):
			t.Errorf("%s: mode %q err %v, want %q", tt.url, mode, err, tt.mode)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%s: err %v, want one mentioning %q", tt.url, err, tt.wantErr)
		case err != nil && strings.Contains(err.Error(), "s3cret"):
			t.Errorf("%s: the error shows the password: %v", tt.url, err)
		}
	}
	for _, u := range []string{"redis://127.0.0.1:1/0", "redis://h1:1?cluster=true", "redis://s1:1?master_name=m"} {
		c, err := NewRedisClient(Config{RedisURL: u, Timeout: 50 * time.Millisecond})
		if err != nil {
			t.Errorf("NewRedisClient(%s): %v", u, err)
			continue
		}
		_ = c.Close()
	}
}
