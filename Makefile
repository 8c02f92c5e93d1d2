# The one task runner. `make test` is the README's test command and what CI runs.
BUF := npx --yes @bufbuild/buf@1.75.0
GO_TEST_FLAGS ?= -race -count=1 -timeout 15m
# LEAN_MODULES are the Go modules a consumer of the client imports, each with
# its own go.mod (docs/decisions/0040-lean-client-module.md); the root module
# (server, binaries, harnesses) requires them through replace directives.
# `./...` at the root does not reach them: every Go target runs them too.
LEAN_MODULES := api client internal/breaker internal/keys
# staticcheck, built once from the root module's pinned tool, runs in every module.
STATICCHECK := $(CURDIR)/bin/tools/staticcheck

.PHONY: test preflight stress chaos generate check-generate lint fuzz bench bench-go storm build

## test: run the whole test suite (unit, real-Redis integration, e2e).
test: preflight
	go test $(GO_TEST_FLAGS) ./...
	@for m in $(LEAN_MODULES); do echo "go -C $$m test ./..."; go -C $$m test $(GO_TEST_FLAGS) ./... || exit 1; done
	go test -tags integration $(GO_TEST_FLAGS) ./test/...
	go -C deploy/helm/charttest test -count=1 ./...
	$(MAKE) helm-check
	$(MAKE) fuzz FUZZTIME=5s
	$(MAKE) test-ts

## preflight: say loudly, in make's own output, which real parts are missing.
## `go test ./...` hides the output of passing packages, so a test's own
## SKIPPING line would never be seen; under COOLDOWN_REQUIRE_REAL=1 (CI) a
## missing part fails the run here.
preflight:
	@missing=""; \
	for bin in redis-server redis-cli redis-sentinel; do command -v $$bin >/dev/null 2>&1 || missing="$$missing $$bin"; done; \
	command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || missing="$$missing chromium"; \
	if [ -n "$$missing" ]; then \
		echo ""; \
		echo "************************************************************************"; \
		echo "*** MISSING:$$missing"; \
		echo "*** The tests that need them are SKIPPED: real Redis, Cluster, Sentinel,"; \
		echo "*** the dashboard in a browser. Install: apt-get install -y redis-server"; \
		echo "*** redis-tools redis-sentinel chromium   (or run .ci/run)"; \
		echo "************************************************************************"; \
		echo ""; \
		if [ "$${COOLDOWN_REQUIRE_REAL:-}" = 1 ]; then exit 1; fi; \
	fi

STRESS_COUNT ?= 20
## stress: the client and the integration packages under -race, many times
## (STRESS_COUNT, 20 by default; CI runs a smaller count). A flaky test is a
## failing test.
stress: preflight
	go -C client test -race -count=$(STRESS_COUNT) -timeout 30m ./...
	go test -tags integration -race -count=$$(( ($(STRESS_COUNT) + 3) / 4 )) -timeout 30m ./test/...

# GENERATED are the checked-in files (and directories) make generate writes.
GENERATED := api/ clients/ts/src/gen/ clients/ts/src/knobs.gen.ts deploy/helm/cooldownd/values.schema.json README.md \
	internal/store/lua/schema.lua internal/store/schema_gen.go
## generate: regenerate the Go and Connect code (and clients/ts/src/gen) from api/v1/*.proto, and the
## policy knobs of internal/breaker/knobs.go into the chart's values.schema.json, the README's table and
## clients/ts/src/knobs.gen.ts (the TS knob table, Policy and the breaker state's shapes); and the store's
## Go↔Lua boundary (internal/store/schema) into internal/store/lua/schema.lua and schema_gen.go.
generate: ts-deps
	$(BUF) format -w
	$(BUF) generate
	go run ./tools/knobdoc
	go run ./tools/luaschema

## check-generate: fail when the checked-in generated code is stale.
check-generate: generate
	git diff --exit-code -- $(GENERATED)
	@test -z "$$(git status --porcelain -- $(GENERATED))" || (git status --porcelain -- $(GENERATED); echo "generated code is stale: run make generate"; exit 1)

## lint: gofmt, vet, staticcheck and buf lint.
lint:
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; test -z "$$out" || { echo "gofmt -w these files:"; echo "$$out"; exit 1; }
	go vet ./...
	@for m in $(LEAN_MODULES); do echo "go -C $$m vet ./..."; go -C $$m vet ./... || exit 1; done
	go build -o $(STATICCHECK) honnef.co/go/tools/cmd/staticcheck
	$(STATICCHECK) ./...
	@for m in $(LEAN_MODULES); do echo "staticcheck in $$m"; (cd $$m && $(STATICCHECK) ./...) || exit 1; done
	@for m in . $(LEAN_MODULES); do (cd $$m && go mod tidy -diff) || { echo "$$m/go.mod is not tidy: run go mod tidy in $$m"; exit 1; }; done
	$(BUF) lint
	$(MAKE) apicheck

# HELM is the helm the README names, pinned in its own module (tools/helm/go.mod) so that helm's
# dependencies stay out of go.mod and out of buf's. Its first run builds it from the Go module
# proxy (a few minutes on a cold cache); later runs start it from the build cache.
HELM_MODFILE := tools/helm/go.mod
HELM := go tool -modfile=$(HELM_MODFILE) helm
CHART := deploy/helm/cooldownd
## helm-check: the real helm binary lints (--strict) and renders the chart as a user runs it, with no
## --kube-version: the defaults, then each ci/*-values.yaml. Decision 0039.
.PHONY: helm-check
helm-check:
	@$(HELM) version
	@set -e; helm="$$(go tool -n -modfile=$(HELM_MODFILE) helm)"; \
	for f in "" $(sort $(wildcard $(CHART)/ci/*-values.yaml)); do \
		vals=$${f:+-f $$f}; \
		echo "helm lint --strict $(CHART) $$vals"; \
		out="$$("$$helm" lint --strict $(CHART) $$vals 2>&1)" || { echo "$$out"; exit 1; }; \
		echo "helm template cooldownd $(CHART) $$vals"; \
		out="$$("$$helm" template cooldownd $(CHART) $$vals 2>&1 >/dev/null)" || { echo "$$out"; exit 1; }; \
	done

# APIDIFF is golang.org/x/exp/cmd/apidiff, pinned in its own module (tools/apidiff/go.mod) so that
# x/exp and x/tools stay out of go.mod. APIDIFF_BASELINE is the client module's exported API at its
# last release (written by make apibaseline from the release's commit), so the check needs no tags and
# no history: a fresh or shallow clone runs it. Decision 0043.
APIDIFF_MODFILE := $(CURDIR)/tools/apidiff/go.mod
APIDIFF := go tool -modfile=$(APIDIFF_MODFILE) apidiff
APIDIFF_BASELINE := client/api/v0.1.0.apidiff
CLIENT_MODULE := github.com/cooldownd/cooldownd/client
.PHONY: apicheck apibaseline
## apicheck: the client module's exported API (client, client/clienttest) against its last release:
## an incompatible change fails unless CHANGELOG.md's Unreleased section names it under ### Breaking.
## Run by make lint.
apicheck:
	go -C tools/apidiff mod tidy -diff
	go -C tools/apidiff vet ./...
	go -C tools/apidiff test -count=1 ./...
	@set -e; dir="$$(mktemp -d)"; trap 'rm -rf "$$dir"' EXIT; \
	echo "apidiff -m $(APIDIFF_BASELINE) $(CLIENT_MODULE)"; \
	(cd client && $(APIDIFF) -m "$(CURDIR)/$(APIDIFF_BASELINE)" $(CLIENT_MODULE)) >"$$dir/report" 2>"$$dir/err" || { cat "$$dir/err"; exit 1; }; \
	go -C tools/apidiff run ./apicheck -changelog "$(CURDIR)/CHANGELOG.md" <"$$dir/report"

API_REF ?= HEAD
## apibaseline: write the exported API of the client module as committed at API_REF (default HEAD; a
## clean worktree, so uncommitted edits never leak in) to client/api/$(API_VERSION).apidiff. A release:
## commit its CHANGELOG section, make apibaseline API_VERSION=vX.Y.Z, point APIDIFF_BASELINE at the
## file, commit both and tag that commit client/vX.Y.Z.
apibaseline:
	@test -n "$(API_VERSION)" || { echo "usage: make apibaseline API_VERSION=vX.Y.Z [API_REF=commit]"; exit 1; }
	@set -e; dir="$$(mktemp -d)"; trap 'git worktree remove --force "$$dir/src" 2>/dev/null; rm -rf "$$dir"' EXIT; \
	git worktree add --quiet --detach "$$dir/src" "$(API_REF)"; \
	out="$(CURDIR)/client/api/$(API_VERSION).apidiff"; mkdir -p "$$(dirname "$$out")"; \
	(cd "$$dir/src/client" && $(APIDIFF) -m -w "$$out" $(CLIENT_MODULE)) 2>"$$dir/err" || { cat "$$dir/err"; exit 1; }; \
	echo "wrote $$out: the client module at $(API_REF) ($$(git rev-parse --short "$(API_REF)^{commit}"))"

FUZZTIME ?= 10s
# FUZZ_GO is the go command the fuzz step runs: Go 1.26's fuzz coordinator can report its own
# -fuzztime deadline as a failure ("context deadline exceeded", no input written; go.dev/issue/75804,
# fixed in Go 1.27), so the step takes 1.27.3 from the module proxy (docs/decisions/0062).
FUZZ_GO ?= GOTOOLCHAIN=go1.27.3 go
## fuzz: run every fuzz target briefly (FUZZTIME each) on its checked-in corpus and new inputs.
fuzz:
	@grep -rHoE --include='*_test.go' '^func Fuzz[A-Za-z0-9_]+' . | sort -u | while IFS=: read -r file fn; do \
		t=$${fn#func }; pkg=$$(dirname $$file); mod=$$pkg; \
		while [ ! -f $$mod/go.mod ]; do mod=$$(dirname $$mod); done; \
		echo "fuzz $$t in $$pkg"; \
		$(FUZZ_GO) -C $$mod test -run='^$$' -fuzz="^$$t$$" -fuzztime=$(FUZZTIME) -fuzzminimizetime=2s .$${pkg#$$mod} || exit 1; \
	done

## bench: the short benchmark command (about a minute): its own redis-server and cooldownd, each
## phase beside its references as ratios (the no-op handler of the same protocol, the Redis floor,
## envoyproxy/ratelimit when RATELIMIT or $COOLDOWN_BENCH_RATELIMIT names its binary) and issue 25's
## goals met or not met (docs/benchmarks.md).
RATELIMIT ?=
bench:
	go run ./test/bench -short $(if $(RATELIMIT),-ratelimit $(RATELIMIT))

## bench-go: run the Go benchmarks (real Redis) and print their figures.
bench-go:
	go test -run='^$$' -bench=. -benchmem ./...
	@for m in $(LEAN_MODULES); do go -C $$m test -run='^$$' -bench=. -benchmem ./... || exit 1; done

## chaos: the fault run with checked histories (about 2 minutes; see docs/reliability.md).
chaos:
	go run ./test/chaos

## storm: the multi-process outage-storm benchmark (about 2 minutes; see docs/storm.md).
storm:
	go run ./test/storm

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
BUILDINFO := github.com/cooldownd/cooldownd/cmd/internal/buildinfo
LDFLAGS := -X $(BUILDINFO).version=$(VERSION) -X $(BUILDINFO).revision=$(REVISION)
## build: bin/cooldownd, bin/cooldownctl and bin/cooldown-proxy, stamped with the version (git describe) and revision.
build:
	go build -ldflags "$(LDFLAGS)" -o bin/cooldownd ./cmd/cooldownd
	go build -ldflags "$(LDFLAGS)" -o bin/cooldownctl ./cmd/cooldownctl
	go build -ldflags "$(LDFLAGS)" -o bin/cooldown-proxy ./cmd/cooldown-proxy

## ts-deps: the TypeScript client's pinned npm dependencies (clients/ts/package-lock.json), once.
ts-deps:
	@test -d clients/ts/node_modules || (cd clients/ts && npm ci --no-audit --no-fund)

## test-ts: the TypeScript client: tsc, then node --test (unit, the fixtures shared with Go, the
## breaker differential against internal/breaker, e2e against a real cooldownd and a Go client).
test-ts: ts-deps
	cd clients/ts && rm -rf build/src build/test && npx tsc -p tsconfig.json && node --test --test-timeout=180000 build/test/*.test.js
