# fabriq build, test and run targets. `make help` lists them.

GO        ?= go
BIN       := bin
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X main.version=$(VERSION)
BENCHTIME ?= 1s
FUZZTIME  ?= 30s
# Size of the large log the storage read, open and snapshot benchmarks build.
BENCH_LOG_BYTES ?= 1073741824
# The many-partitions benchmark: partitions of its 3-node cluster, and how
# long it stands idle while CPU, elections and memory are measured.
PARTITIONS ?= 1000
IDLE       ?= 10m
# The chaos suite: how long faults run, the plan's seed (0: random, printed),
# where run directories (history, plan, node logs, summary) go.
CHAOS_TIME ?= 20m
CHAOS_SEED ?= 0
CHAOS_OUT  ?= $(CURDIR)/chaos-runs
# Network namespaces (partitions) need root and iproute2; false runs on
# loopback without network faults.
CHAOS_NETNS ?= true
# Disk-full faults (lazyfs mounts that act as full); false leaves them out.
CHAOS_DISKFULL ?= true

.PHONY: help build test lint proto bench bench-partitions bench-wan fuzz chaos chaos-short run clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

build: ## build bin/fabriqd and bin/fabriq
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/fabriqd ./cmd/fabriq

test: ## run every unit and integration test with the race detector
	$(GO) test -race -count=1 -skip '^TestPulsar' ./...
	# pulsar-client-go v0.19.0 races with itself (a producer's reconnection,
	# a regex consumer's discovery against Ack): its tests run without -race.
	$(GO) test -count=1 -run '^TestPulsar' ./tests

lint: ## gofmt, go vet and staticcheck (pinned in go.mod)
	@files=$$(gofmt -l $$(find . -name '*.go' -not -path './.git/*')); \
	if [ -n "$$files" ]; then echo "gofmt would change:"; echo "$$files"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags chaos ./tests/chaos
	$(GO) vet -tags partitions ./tests
	$(GO) tool staticcheck ./...
	$(GO) tool staticcheck -tags chaos ./tests/chaos
	$(GO) tool staticcheck -tags partitions ./tests

proto: ## regenerate pulsarwire/pb/pulsar.pb.go from pulsar.proto (needs protoc: apt-get install protobuf-compiler)
	protoc --plugin=protoc-gen-go=$$($(GO) tool -n protoc-gen-go) --go_out=. --go_opt=module=github.com/fabriq-io/fabriq pulsarwire/pb/pulsar.proto

bench: ## run the benchmarks (BENCHTIME, BENCH_LOG_BYTES)
	FABRIQ_BENCH_LOG_BYTES=$(BENCH_LOG_BYTES) $(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) ./...

bench-wan: ## produce latency and failover between regions 40 ms apart (root, iproute2, /dev/net/tun)
	$(GO) test -run '^$$' -bench '^BenchmarkWANProduce$$' -benchtime 200x -timeout 30m -v ./tests/wan
	$(GO) test -run '^$$' -bench '^BenchmarkWANFailover$$' -benchtime 10x -timeout 30m -v ./tests/wan

bench-partitions: ## 1,000 partitions on 3 nodes: idle CPU, memory, elections, start and stop (PARTITIONS, IDLE)
	$(GO) test -tags partitions -run '^$$' -bench '^BenchmarkManyPartitions$$' -benchtime 1x -timeout 90m -v ./tests \
		-args -partitions.total $(PARTITIONS) -partitions.idle $(IDLE)

chaos: ## the chaos suite on 5 fabriqd processes for CHAOS_TIME (CHAOS_SEED replays a plan)
	@mkdir -p $(CHAOS_OUT)
	$(GO) test -tags chaos -count=1 -timeout 90m -run TestChaos -v ./tests/chaos \
		-args -chaos.time $(CHAOS_TIME) -chaos.seed $(CHAOS_SEED) -chaos.out $(CHAOS_OUT) -chaos.netns=$(CHAOS_NETNS) -chaos.diskfull=$(CHAOS_DISKFULL)

chaos-short: ## a 2-minute chaos run (part of CI)
	$(MAKE) chaos CHAOS_TIME=2m

fuzz: ## run each fuzz target for FUZZTIME
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeBatch$$' -fuzztime $(FUZZTIME) ./storage
	$(GO) test -run '^$$' -fuzz '^FuzzRecoverSegment$$' -fuzztime $(FUZZTIME) ./storage
	$(GO) test -run '^$$' -fuzz '^FuzzReadFrame$$' -fuzztime $(FUZZTIME) ./transport
	$(GO) test -run '^$$' -fuzz '^FuzzReadFrame$$' -fuzztime $(FUZZTIME) ./pulsarwire
	$(GO) test -run '^$$' -fuzz '^FuzzRouteState$$' -fuzztime $(FUZZTIME) ./cluster
	$(GO) test -run '^$$' -fuzz '^FuzzPartitionDir$$' -fuzztime $(FUZZTIME) ./broker

run: build ## build and run a local three-node cluster in the foreground (Ctrl-C stops it)
	@scripts/run.sh

clean: ## remove build output
	rm -rf $(BIN)
