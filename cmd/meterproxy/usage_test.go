package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestHelp: --help, -h, help and COMMAND --help (or help COMMAND) list the
// commands or the command's flags on stdout and succeed; an unknown
// command fails with the list on stderr.
func TestHelp(t *testing.T) {
	everyCommand := []string{"serve", "check-config", "plan", "sweep", "version", "help"}
	planFlags := []string{"-config", "-latency", "-from", "-replicas", "-tokens-per-request", "-json"}
	sweepFlags := []string{"meterproxy sweep", "-config", "-url", "-model", "-path", "-api-key-env", "-max-tokens",
		"-start", "-max", "-step", "-duration", "-timeout", "-svg"}
	for _, tt := range []struct {
		args []string
		want []string
	}{
		{[]string{"--help"}, everyCommand},
		{[]string{"-h"}, everyCommand},
		{[]string{"help"}, everyCommand},
		{[]string{"serve", "--help"}, []string{"meterproxy serve", "-config"}},
		{[]string{"check-config", "-h"}, []string{"meterproxy check-config", "-config"}},
		{[]string{"plan", "--help"}, planFlags},
		{[]string{"help", "plan"}, planFlags},
		{[]string{"sweep", "--help"}, sweepFlags},
		{[]string{"help", "sweep"}, sweepFlags},
		{[]string{"version", "--help"}, []string{"meterproxy version"}},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if err := run(t.Context(), tt.args, nil, &stdout, &stderr); err != nil {
				t.Fatalf("run(%q) = %v; want success (stderr %q)", tt.args, err, stderr.String())
			}
			for _, w := range tt.want {
				if !strings.Contains(stdout.String(), w) {
					t.Errorf("run(%q) printed %q; want %q in it", tt.args, stdout.String(), w)
				}
			}
			if stderr.Len() != 0 {
				t.Errorf("run(%q) wrote %q to stderr", tt.args, stderr.String())
			}
		})
	}
	for _, args := range [][]string{{"bogus"}, {"help", "bogus"}, {"serve", "--nope"}} {
		var stdout, stderr bytes.Buffer
		if err := run(t.Context(), args, nil, &stdout, &stderr); err == nil || stderr.Len() == 0 {
			t.Errorf("run(%q) = %v, stderr %q; want a usage error on stderr", args, err, stderr.String())
		}
	}
	if err := run(t.Context(), []string{"serve", "extra"}, nil, &bytes.Buffer{}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), `serve: unexpected argument "extra"`) {
		t.Errorf("serve extra: %v; want the stray argument named", err)
	}
}
