package test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/meterproxy/meterproxy/test/procs"
)

// TestImageBuildsLikeMakeBuild: docker cannot run here, so the Dockerfile's
// build stage must be the very build `make build` runs and these tests use
// (procs.Build): CGO_ENABLED=0, -trimpath, -s -w and main.version stamped.
// The binary built that way reports its version, and the final stage is
// distroless nonroot.
func TestImageBuildsLikeMakeBuild(t *testing.T) {
	t.Parallel()
	root, err := procs.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	docker, makefile := read("Dockerfile"), read("Makefile")
	build := regexp.MustCompile(`(?m)^RUN (CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main\.version=\$\{VERSION\}") -o \S+ \./cmd/meterproxy$`)
	if !build.MatchString(docker) {
		t.Errorf("the Dockerfile's build stage is not `CGO_ENABLED=0 go build -trimpath -ldflags \"-s -w -X main.version=${VERSION}\" … ./cmd/meterproxy`")
	}
	if !strings.Contains(makefile, `LDFLAGS  := -s -w -X main.version=$(VERSION)`) ||
		!strings.Contains(makefile, `CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o bin/meterproxy ./cmd/meterproxy`) {
		t.Errorf("make build no longer runs the Dockerfile's build (CGO_ENABLED=0, -trimpath, -s -w, main.version)")
	}
	for _, want := range []string{"FROM gcr.io/distroless/static-debian12:nonroot", "USER nonroot:nonroot", `ENTRYPOINT ["/usr/local/bin/meterproxy"]`} {
		if !strings.Contains(docker, want) {
			t.Errorf("the Dockerfile lacks %q", want)
		}
	}
	out, err := exec.CommandContext(t.Context(), meterproxyBin, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), procs.Version) {
		t.Errorf("meterproxy version = %q (%v), want it to print the stamped %q", out, err, procs.Version)
	}
}
