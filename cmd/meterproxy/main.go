// Command meterproxy is a metering reverse proxy for LLM providers: it
// classifies each request as interactive or bulk, admits it under the
// account's partitioned quota (or holds it), and forwards it.
//
// Usage:
//
//	meterproxy [serve] --config FILE     run the proxy (the default command)
//	meterproxy check-config --config FILE
//	                                     validate and print the effective numbers
//	meterproxy plan --config FILE (--latency 800ms | --from http://admin:9090)
//	        [--replicas N] [--tokens-per-request T] [--json]
//	                                     size a worker fleet: in-flight bounds, connections,
//	                                     maxReplicas and batch size at that service time
//	meterproxy version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, errUsage) {
			fmt.Fprintln(os.Stderr, "meterproxy:", err)
		}
		os.Exit(1)
	}
}

// errUsage means the usage text has been printed already.
var errUsage = errors.New("usage")

// run is the whole program; only main exits.
func run(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 0 && args[0] != "" && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("meterproxy "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "YAML config file (defaults and METERPROXY_* variables apply without one)")
	planArgs := planFlagsFor(cmd, fs) // nil unless cmd is plan
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	getenv := lookupIn(environ)
	switch cmd {
	case "serve":
		cfg, err := loadConfig(*path, environ, getenv)
		if err != nil {
			return fmt.Errorf("invalid config, not starting:\n%w", err)
		}
		return serve(ctx, cfg, source{path: *path, environ: environ, getenv: getenv}, newLogger(cfg.Log, stderr))
	case "check-config":
		cfg, err := loadConfig(*path, environ, getenv)
		if err != nil {
			return fmt.Errorf("invalid config:\n%w", err)
		}
		return checkConfig(cfg, stdout)
	case "plan":
		cfg, err := loadConfig(*path, environ, getenv)
		if err != nil {
			return fmt.Errorf("plan: invalid config:\n%w", err)
		}
		return runPlan(ctx, cfg, planArgs, stdout)
	case "version":
		_, err := fmt.Fprintln(stdout, "meterproxy", version)
		return err
	default:
		_, _ = fmt.Fprintf(stderr, "meterproxy: unknown command %q (want serve, check-config, plan or version)\n", cmd)
		return errUsage
	}
}

// lookupIn returns a getenv over environ, so tests need not touch the
// process environment.
func lookupIn(environ []string) func(string) string {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		for i := range len(kv) {
			if kv[i] == '=' {
				m[kv[:i]] = kv[i+1:]
				break
			}
		}
	}
	return func(k string) string { return m[k] }
}
