package main

import (
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// develVersion is the version of a build that says nothing of its own:
// the Go toolchain's word for it.
const develVersion = "(devel)"

// buildVersion is the version of this binary: the one stamped at build
// time (main.version, as make build and the image stamp it), else the
// main module's version (go install …@v1.2.3), else its VCS revision
// (with "+dirty" when the tree had changes), else "(devel)".
func buildVersion() string {
	bi, _ := debug.ReadBuildInfo()
	return versionOf(version, bi)
}

// versionOf is buildVersion from stamped (main.version) and bi (nil when
// the binary carries no build information).
func versionOf(stamped string, bi *debug.BuildInfo) string {
	if stamped != "" && stamped != "dev" {
		return stamped
	}
	if bi == nil {
		return develVersion
	}
	if v := bi.Main.Version; v != "" && v != develVersion {
		return v
	}
	var revision, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	switch {
	case revision == "":
		return develVersion
	case modified == "true":
		return revision + "+dirty"
	}
	return revision
}

// registerBuildInfo registers meterproxy_build_info on reg: 1, labelled
// with the binary's version and Go version.
func registerBuildInfo(reg prometheus.Registerer) {
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "meterproxy_build_info",
		Help:        "The binary this replica runs: 1, labelled with its version (stamped at build, the module's, or the VCS revision; (devel) when it says none) and the Go version that built it.",
		ConstLabels: prometheus.Labels{"version": buildVersion(), "goversion": runtime.Version()},
	})
	info.Set(1)
	reg.MustRegister(info)
}
