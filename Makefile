# meterproxy — build, test and lint. `make help` lists the targets.

# Pinned tool versions. Change them here, nowhere else.
GOLANGCI_LINT_VERSION ?= v2.15.0
HELM_VERSION          ?= v3.22.0

# Build and test knobs; override on the command line (make fuzz FUZZTIME=1m).
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
FUZZTIME ?= 15s
GO       ?= go
BIN      := $(CURDIR)/bin
LDFLAGS  := -s -w -X main.version=$(VERSION)

GOLANGCI_LINT := $(BIN)/golangci-lint
HELM          := $(BIN)/helm

.DEFAULT_GOAL := help
SHELL := bash
.SHELLFLAGS := -euo pipefail -c

.PHONY: help build run demo test test-chart test-load test-faults fuzz lint lint-install helm-install bench bench-micro docs tidy clean

help: ## List the targets with a one-line description of each.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## Build bin/meterproxy and bin/fakeprovider (static, trimmed, VERSION stamped).
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o bin/meterproxy ./cmd/meterproxy
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o bin/fakeprovider ./cmd/fakeprovider

run: ## Run the proxy on config.example.yaml with the in-process store (no Redis).
	@echo "building bin/meterproxy (the first build takes about 20 s; later ones are cached)…"
	@CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o bin/meterproxy ./cmd/meterproxy
	bin/meterproxy serve --config config.example.yaml

demo: ## Run the end-to-end demo (fake provider, proxy, bulk and interactive load).
	$(GO) run ./test/demo

# make test runs ./test's end-to-end tests that count rather than time four at
# a time (-parallel 4; they are t.Parallel and wait on processes and sockets
# more than on the CPU); the tests that time a rate run alone first. The
# chart's tests are make test-chart's: they need Helm, built from source
# (~6 CPU-minutes on a cold machine).
test: ## Run every test but the long load runs and the chart's, with the race detector (installs redis-server, promtool and the agent CLIs first if missing).
	./.ci/ensure-redis
	./.ci/ensure-prometheus
	./.ci/ensure-clis
	$(GO) test -race -count=1 -parallel 4 -timeout 20m -skip '^TestChart' ./...

test-chart: helm-install ## Run the Helm chart's tests (helm lint and template over every example; builds the pinned Helm into bin/ first if missing).
	HELM=$(HELM) $(GO) test -race -count=1 -run '^TestChart' ./test/

# LOAD_TESTS are the Test functions of test/'s files built only with the tag
# load: make test-load runs exactly them (TestEveryTestHasATier checks that
# every test of ./test is in a tier).
LOAD_TESTS = $(shell sed -n 's/^func \(Test[A-Za-z0-9_]*\)(t \*testing\.T) {$$/\1/p' $$(grep -l '^//go:build load$$' test/*_test.go) | paste -sd'|' -)

test-load: ## Run the long load runs (fixed-length throughput phases, real processes; build tag load; ~14 min).
	./.ci/ensure-redis
	./.ci/ensure-prometheus
	$(GO) test -race -count=1 -parallel 6 -tags load -run '^($(LOAD_TESTS))$$' -timeout 30m ./test/

test-faults: ## Run the fault suite (real processes; Redis, upstream and client faults; ~2 min).
	./.ci/ensure-redis
	$(GO) test -race -count=1 -tags faults -run '^TestFault' -timeout 10m ./test/

fuzz: ## Run each native fuzz target for FUZZTIME (default 15s) in turn.
	@for pkg in $$($(GO) list ./...); do \
		list=$$($(GO) test -list '^Fuzz' "$$pkg"); \
		for target in $$(grep '^Fuzz' <<<"$$list" || true); do \
			echo "fuzz $$pkg $$target ($(FUZZTIME))"; \
			$(GO) test -run='^$$' -fuzz="^$$target$$" -fuzztime=$(FUZZTIME) "$$pkg"; \
		done; \
	done

lint: lint-install ## Run golangci-lint (pinned, installed into ./bin) on every package.
	$(GOLANGCI_LINT) run ./...

lint-install: ## Install the pinned golangci-lint into ./bin when missing or the wrong version.
	@if ! $(GOLANGCI_LINT) version 2>/dev/null | grep -qF 'version $(patsubst v%,%,$(GOLANGCI_LINT_VERSION)) '; then \
		echo "installing golangci-lint $(GOLANGCI_LINT_VERSION) into bin/"; \
		GOBIN=$(BIN) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION); \
	fi

helm-install: ## Build the pinned Helm from the Go module proxy into ./bin (for the chart checks) when missing.
	@if [ ! -x $(HELM) ] || [ ! -f $(BIN)/.helm-$(HELM_VERSION) ]; then \
		echo "building helm $(HELM_VERSION) into bin/ (once; a few minutes on 2 cores)"; \
		GOBIN=$(BIN) $(GO) install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION); \
		rm -f $(BIN)/.helm-*; touch $(BIN)/.helm-$(HELM_VERSION); \
	fi

bench: ## Benchmark meterproxy against a plain ReverseProxy and nginx in one run (test/bench; installs redis-server and nginx-light if missing; ~7 min); BENCHFLAGS passes flags.
	./.ci/ensure-redis
	./.ci/ensure-nginx
	$(GO) run ./test/bench $(BENCHFLAGS)

bench-micro: ## Run every Go micro-benchmark once, with allocations.
	./.ci/ensure-redis
	$(GO) test -run='^$$' -bench=. -benchmem ./...

docs: ## Write the generated references, docs/configuration.md and docs/refusals.md, from the code (their tests check them).
	$(GO) test -count=1 -run '^TestDocs' ./cmd/meterproxy/ ./proxy/ -args -update

tidy: ## Tidy go.mod and go.sum.
	$(GO) mod tidy

clean: ## Remove build outputs (bin/) and the test cache.
	rm -rf bin
	$(GO) clean -testcache
