package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// command is one of meterproxy's commands, for help.
type command struct {
	name, args, summary string
}

// commands are meterproxy's commands, in the order help lists them.
var commands = []command{
	{"serve", "[--config FILE]", "run the proxy (the default command)"},
	{"check-config", "[--config FILE]", "validate the configuration and print the effective numbers"},
	{"plan", "[--config FILE] (--latency D | --from URL) [--replicas N] [--tokens-per-request T] [--json]",
		"size a worker fleet: in-flight bounds, connections, maxReplicas and batch size at that service time"},
	{"sweep", "(--url URL | --config FILE) --model M [--path P] [--api-key-env VAR] [--max-tokens T] " +
		"[--start N] [--max N] [--step F|+N] [--duration D] [--timeout D] [--svg FILE]",
		"ramp concurrency against an upstream in steps and report its knee: the in-flight bound that gives (nearly) all its throughput, within the rate limit its headers report"},
	{"version", "", "print the version"},
	{"help", "[COMMAND]", "print this help, or a command's flags"},
}

// lookupCommand returns the command named name.
func lookupCommand(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// commandNames lists the commands for an error message.
func commandNames() string {
	names := make([]string, len(commands))
	for i, c := range commands {
		names[i] = c.name
	}
	return strings.Join(names, ", ")
}

// printUsage writes the overall help: the commands, then how to see one's
// flags.
func printUsage(w io.Writer) {
	var b strings.Builder
	b.WriteString("meterproxy: a metering reverse proxy for LLM providers.\n\nUsage:\n  meterproxy [COMMAND] [FLAGS]\n\nCommands:\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-13s %s\n", c.name, c.summary)
	}
	b.WriteString("\nRun `meterproxy help COMMAND` or `meterproxy COMMAND --help` for a command's flags.\n" +
		"Configuration: a YAML file (--config), with METERPROXY_* environment variables over it; see config.example.yaml.\n")
	_, _ = io.WriteString(w, b.String())
}

// setCommandUsage makes fs print c's usage line, summary and flags.
func setCommandUsage(fs *flag.FlagSet, c command) {
	fs.Usage = func() {
		w := fs.Output()
		_, _ = fmt.Fprintf(w, "Usage:\n  %s\n\n%s.\n", strings.TrimSpace("meterproxy "+c.name+" "+c.args), strings.ToUpper(c.summary[:1])+c.summary[1:])
		if c.args != "" {
			_, _ = fmt.Fprintln(w, "\nFlags:")
			fs.PrintDefaults()
		}
	}
}
