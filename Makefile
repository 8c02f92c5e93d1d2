# The one task runner. `make test` is the README's test command and what CI runs.
BUF := npx --yes @bufbuild/buf@1.75.0
GO_TEST_FLAGS ?= -race -count=1 -timeout 15m

.PHONY: test generate check-generate lint fuzz bench storm build

## test: run the whole test suite (unit, real-Redis integration, e2e).
test:
	go test $(GO_TEST_FLAGS) ./...
	go test -tags integration $(GO_TEST_FLAGS) ./test/...
	go -C deploy/helm/charttest test -count=1 ./...
	$(MAKE) fuzz FUZZTIME=5s

## generate: regenerate the Go and Connect code from api/v1/*.proto.
generate:
	$(BUF) format -w
	$(BUF) generate

## check-generate: fail when the checked-in generated code is stale.
check-generate: generate
	git diff --exit-code -- api/
	@test -z "$$(git status --porcelain -- api/)" || (git status --porcelain -- api/; echo "generated code is stale: run make generate"; exit 1)

## lint: vet, staticcheck and buf lint.
lint:
	go vet ./...
	go tool staticcheck ./...
	$(BUF) lint

FUZZTIME ?= 10s
## fuzz: run every fuzz target briefly (FUZZTIME each) on its checked-in corpus and new inputs.
fuzz:
	@grep -rHoE --include='*_test.go' '^func Fuzz[A-Za-z0-9_]+' . | sort -u | while IFS=: read -r file fn; do \
		t=$${fn#func }; pkg=$$(dirname $$file); \
		echo "fuzz $$t in $$pkg"; \
		go test -run='^$$' -fuzz="^$$t$$" -fuzztime=$(FUZZTIME) -fuzzminimizetime=2s $$pkg || exit 1; \
	done

## bench: run the Go benchmarks (real Redis) and print their figures.
bench:
	go test -run='^$$' -bench=. -benchmem ./...

## storm: the multi-process outage-storm benchmark (about 2 minutes; see docs/storm.md).
storm:
	go run ./test/storm

build:
	go build -o bin/cooldownd ./cmd/cooldownd
