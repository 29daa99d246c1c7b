package main

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// allocResult is a handler benchmark's allocations per request.
type allocResult struct {
	bytes, allocs float64
}

// handlerAllocs runs the proxy package's handler benchmarks (meterproxy's
// handler and the baseline ReverseProxy, both in process against the same
// upstream) and reads B/op and allocs/op.
func handlerAllocs(ctx context.Context, root string) (map[string]allocResult, error) {
	cmd := exec.CommandContext(ctx, "go", "test", "-run", "^$", "-bench", "^BenchmarkHandler", "-benchmem", "-benchtime", "20000x", "./proxy")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("go test -bench: %w\n%s", err, out)
	}
	res := map[string]allocResult{}
	for _, line := range splitLines(string(out)) {
		f := strings.Fields(line)
		if len(f) < 8 || !strings.HasPrefix(f[0], "BenchmarkHandler") || f[5] != "B/op" || f[7] != "allocs/op" {
			continue
		}
		name := strings.TrimPrefix(f[0], "BenchmarkHandler/")
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			name = name[:i]
		}
		b, _ := strconv.ParseFloat(f[4], 64)
		a, _ := strconv.ParseFloat(f[6], 64)
		res[name] = allocResult{bytes: b, allocs: a}
	}
	if len(res) == 0 {
		return nil, fmt.Errorf("no BenchmarkHandler results in:\n%s", out)
	}
	return res, nil
}
