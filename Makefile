# frontdoor: mentat (LLM router) and mortred (image model serving).
# `make demo` and `make test` are the two commands of the README; both run
# `setup` first, which installs everything else and is quick when done.

SHELL        := /bin/bash
GO           ?= go
MODULE       := github.com/fe64bb06/frontdoor
BIN          := bin
VERSION      ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT       ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS      := -X $(MODULE)/internal/version.Version=$(VERSION) -X $(MODULE)/internal/version.Commit=$(COMMIT)
CMDS         := $(notdir $(wildcard cmd/*))
STATICCHECK  := honnef.co/go/tools/cmd/staticcheck@v0.8.2
TOOLBIN      := $(CURDIR)/.deps/bin
TEST_TIMEOUT ?= 30m

export MORTRED_ORT_LIB ?= $(CURDIR)/.deps/onnxruntime/libonnxruntime.so.1
export MORTRED_MODEL_DIR ?= $(CURDIR)/.deps/models

.PHONY: all setup setup-deb setup-go setup-npm setup-models build test test-unit lint demo bench soak clean

all: build

## setup: install Debian packages, Go modules, npm tools, ONNX Runtime and models
setup: setup-deb setup-go setup-npm setup-models

setup-deb:
	@scripts/setup-deb.sh

setup-go:
	@$(GO) mod download
	@test -x $(TOOLBIN)/staticcheck || GOBIN=$(TOOLBIN) $(GO) install $(STATICCHECK)

setup-npm:
	@scripts/setup-npm.sh

setup-models:
	@scripts/setup-models.sh

## build: every binary into bin/
build:
	@mkdir -p $(BIN)
	$(if $(CMDS),$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/ $(addprefix ./cmd/,$(CMDS)),@echo "build: no binaries yet")

## test: setup, then every test (unit tests with -race)
test: setup build
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...

## lint: gofmt, go vet, staticcheck
lint: setup-go
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(TOOLBIN)/staticcheck ./...

## demo: a local mentat cluster behind the router, and the mortred stack
demo: setup build
	@scripts/demo.sh

## bench: side-by-side benchmarks, written to docs/benchmarks.md
bench: setup build
	@scripts/bench.sh

## soak: the chaos soak of both products, report in docs/soak.md
## (SOAK_DURATION, default 30m; SOAK_SEED, default 1; SOAK_OUT; SOAK_DIR keeps configs and logs)
soak: setup build
	$(GO) run ./bench/soak/cmd

clean:
	rm -rf $(BIN)
