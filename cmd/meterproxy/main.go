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
//	meterproxy sweep (--url URL | --config FILE) --model M [--start N] [--max N]
//	        [--step F|+N] [--duration D] [--svg FILE] …
//	                                     ramp concurrency against an upstream and report
//	                                     its knee: the in-flight bound to set
//	meterproxy version
//	meterproxy help [COMMAND]        (also --help, -h, and COMMAND --help)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=…";
// buildVersion falls back to the build information without it.
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
	switch {
	case len(args) == 1 && (args[0] == "--help" || args[0] == "-help" || args[0] == "-h"):
		printUsage(stdout)
		return nil
	case len(args) > 0 && args[0] != "" && args[0][0] != '-':
		cmd, args = args[0], args[1:]
	}
	if cmd == "help" {
		return help(args, stdout, stderr)
	}
	c, ok := lookupCommand(cmd)
	if !ok {
		_, _ = fmt.Fprintf(stderr, "meterproxy: unknown command %q (want %s)\n\n", cmd, commandNames())
		printUsage(stderr)
		return errUsage
	}
	fs := newFlagSet(c, stderr)
	planArgs := planFlagsFor(cmd, fs)   // nil unless cmd is plan
	sweepArgs := sweepFlagsFor(cmd, fs) // nil unless cmd is sweep
	usage := fs.Usage
	fs.Usage = func() {} // printed below, to stdout for --help
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			usage()
			return nil
		}
		usage()
		return errUsage
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected argument %q", cmd, fs.Arg(0))
	}
	getenv := lookupIn(environ)
	configPath := ""
	if f := fs.Lookup("config"); f != nil {
		configPath = f.Value.String()
	}
	switch cmd {
	case "serve":
		cfg, err := loadConfig(configPath, environ, getenv)
		if err != nil {
			return fmt.Errorf("invalid config, not starting:\n%w", err)
		}
		return serve(ctx, cfg, source{path: configPath, environ: environ, getenv: getenv}, newLogger(cfg.Log, stderr), stdout, stderr)
	case "check-config":
		cfg, err := loadConfig(configPath, environ, getenv)
		if err != nil {
			return fmt.Errorf("invalid config:\n%w", err)
		}
		return checkConfig(cfg, stdout)
	case "plan":
		cfg, err := loadConfigFor(usePlan, configPath, environ, getenv)
		if err != nil {
			return fmt.Errorf("plan: invalid config:\n%w", err)
		}
		return runPlan(ctx, cfg, planArgs, stdout)
	case "sweep":
		cfg, err := loadConfigFor(useSweep, configPath, environ, getenv)
		if err != nil {
			return fmt.Errorf("sweep: invalid config:\n%w", err)
		}
		return runSweep(ctx, cfg, sweepArgs, getenv, stdout, stderr)
	default: // version
		_, err := fmt.Fprintln(stdout, "meterproxy", buildVersion())
		return err
	}
}

// newFlagSet returns c's flags: every command but version reads a config
// file.
func newFlagSet(c command, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("meterproxy "+c.name, flag.ContinueOnError)
	fs.SetOutput(out)
	setCommandUsage(fs, c)
	if c.name != "version" {
		fs.String("config", "", "YAML config file (defaults and METERPROXY_* variables apply without one)")
	}
	return fs
}

// help prints the overall help, or one command's flags.
func help(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		printUsage(stdout)
		return nil
	}
	c, ok := lookupCommand(args[0])
	if !ok || len(args) > 1 {
		_, _ = fmt.Fprintf(stderr, "meterproxy help: unknown command %q (want %s)\n", strings.Join(args, " "), commandNames())
		return errUsage
	}
	fs := newFlagSet(c, stdout)
	planFlagsFor(c.name, fs)
	sweepFlagsFor(c.name, fs)
	fs.Usage()
	return nil
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
