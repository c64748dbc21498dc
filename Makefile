# splitflow's build and test entry points. CI runs `make test` (.ci/run).

GO ?= go
GOLANGCI_LINT_VERSION ?= v2.15.0
# Integration tests start a real Kafka broker (integration/kafkatest); the
# whole run stays well under CI's limit, this only stops a hang.
TEST_TIMEOUT ?= 30m

.PHONY: test deps check tree lint bench

# All unit and integration tests, with the race detector, after the checks
# that keep the tree clean and after installing what the tests need. deps
# installs the broker's needs, so a broker that still cannot start fails
# the broker tests instead of skipping them (SPLITFLOW_REQUIRE_KAFKA; the
# schema registry tests of integration/registrytest and the PostgreSQL
# server of internal/pgtest honour it too).
#
# go test vets every package with all of vet's analyzers (-vet=all, what
# go vet runs), as part of its build: a separate go vet would compile
# every package once more before the first test starts. go test starts
# the test binaries in the order it is given the packages, each only once
# every package before it is built. The broker tests (minutes of waiting
# on brokers and child processes, quick to build) therefore come first,
# so that they run while runtime's test binary, the longest to compile
# (minutes, 8 GB), is built; runtime's own tests, minutes long, next;
# then the rest (SLOW_PACKAGES).
#
# deploy/ is a module of its own (Helm's and Kubernetes' modules stay out
# of the main go.mod): its tests check the Dockerfile, build the image's
# binaries static, and render the Helm chart. They run without -race:
# rendering a chart and parsing a Dockerfile start no goroutines of ours,
# and the race detector would only double the compile time of Helm's and
# Kubernetes' packages.
SLOW_PACKAGES = ./examples/wordcount/ ./integration/ ./connector/kafka/ ./runtime/
# Test binaries (and builds) go test runs at once; its default is the
# number of cores. The broker tests spend most of their time waiting on
# brokers and child processes (the main module's test binaries used 686
# CPU-seconds in 1,500 seconds of their summed wall time on this 2-core
# machine), so two at a time left the cores idle: make test with a warm
# build cache took 639 s at 2 and 487 s at 4 (one run each, quiet
# machine). A cold run is compile-bound and gains nothing (about 20 min
# either way).
TEST_PARALLEL ?= 4
# The programs tests run as child processes (SIGKILLed, restarted) and
# deploy/'s image test checks, built as the image builds them: one go
# build, beside the tests, into the directory internal/testbin reads
# from $SPLITFLOW_TEST_BINARIES. Each test package building its own
# would compile every dependency once more in this configuration (go
# test's binaries are -race builds) for each package building at the
# same time: minutes of CPU in a cold run.
TEST_PROGRAMS = ./examples/wordcount ./examples/cdc ./cmd/splitflow
# deploy/'s tests and the programs' build run beside the main tests, not
# before or after them: they are mostly compiling, which fills the cores
# while the broker tests wait on brokers.
#
# The tests create many small files: temporary directories, pebble
# databases, checkpoints, brokers' and PostgreSQL's data. On this
# machine's ext4 disk creating a file costs 0.2-0.6 ms of system CPU, on
# a tmpfs 10 us: runtime's tests alone took 31 CPU-seconds of system time
# with TMPDIR on the disk and 13 on tmpfs. So the run's TMPDIR (and go
# test's work directory in it) is a fresh directory on TEST_TMPFS when
# that is a writable directory, removed at the end; the build cache stays
# where it is. TEST_TMPFS= keeps TMPDIR as it is. The directory is
# open to all, as /tmp is: PostgreSQL runs as nobody under root. It is
# removed on an interrupt too (sh runs its EXIT trap on a signal only
# when the signal's own trap exits), so that no run leaves its files in
# memory.
TEST_TMPFS ?= /dev/shm
# The Go garbage collector's target for the run (GOGC): the compiler,
# the linker and the test binaries inherit it. The run is CPU-bound and
# compiling is its largest part, much of it the compiler's garbage
# collection: at 200 instead of Go's 100, compiling every test binary of
# the main module (a fresh clone, dependencies cached) took 403 instead
# of 460 CPU-seconds, and the largest compile (runtime's -race test
# package) peaked at 6.1 instead of 5.0 GB. 400 saved no more CPU and
# took 8.5 GB. TEST_GOGC= leaves GOGC as it is.
TEST_GOGC ?= 200
test: deps tree
	@if [ -n "$(TEST_GOGC)" ]; then export GOGC=$(TEST_GOGC); fi; \
	tmp=$${TMPDIR:-/tmp}; if [ -n "$(TEST_TMPFS)" ] && [ -d "$(TEST_TMPFS)" ] && [ -w "$(TEST_TMPFS)" ]; then tmp=$(TEST_TMPFS); fi; \
	tmp=$$(mktemp -d "$$tmp/splitflow-test.XXXXXX"); chmod 1777 "$$tmp"; bins=$$(mktemp -d); trap 'rm -rf "$$bins" "$$tmp"' EXIT; trap 'exit 130' INT TERM HUP; \
	export SPLITFLOW_TEST_BINARIES=$$bins TMPDIR=$$tmp; \
	(if CGO_ENABLED=0 $(GO) build -trimpath -o "$$bins/" $(TEST_PROGRAMS) > "$$bins/build.log" 2>&1; \
	 then touch "$$bins/ready"; else mv "$$bins/build.log" "$$bins/failed"; fi) & programs=$$!; \
	(cd deploy && $(GO) test -vet=all -shuffle=on -count=1 -timeout $(TEST_TIMEOUT) ./...) & deploy=$$!; \
	SPLITFLOW_REQUIRE_KAFKA=1 $(GO) test -p $(TEST_PARALLEL) -race -vet=all -shuffle=on -count=1 -timeout $(TEST_TIMEOUT) $(SLOW_PACKAGES) ./...; main=$$?; \
	wait $$deploy; deploy=$$?; wait $$programs; \
	if [ $$main -ne 0 ] || [ $$deploy -ne 0 ]; then echo "make test: main module exit $$main, deploy module exit $$deploy"; exit 1; fi

# A JDK and Maven (the local Kafka broker), a JDK 21+ (the local schema
# registry, Apicurio), Chromium (the status page tests) and PostgreSQL
# (internal/pgtest's server), installed with
# apt-get where missing and possible.
deps:
	@bash scripts/install-deps.sh

# gofmt (of deploy/'s files too), and go.mod/go.sum files, the main
# module's and deploy/'s, that go mod tidy would not change.
tree:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.cache/*')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) mod tidy -diff
	cd deploy && $(GO) mod tidy -diff

# tree plus go vet with all its analyzers, without running the tests.
check: tree
	$(GO) vet ./...
	cd deploy && $(GO) vet ./...

# check plus golangci-lint v2 (built from the Go module proxy on first use;
# config in .golangci.yml).
lint: check
	$(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION) run ./...

# Benchmarks. Never part of CI. The Go benchmarks, then the side-by-side
# harness's EmitLatest sections (bench/README.md; a local Kafka broker and
# Kafka Streams 4.4, both from Maven Central jars), whose tables go to
# .cache/bench/emit-latest.md (bench/RESULTS.md keeps the reviewed runs).
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count=1 ./...
	mkdir -p .cache/bench
	$(GO) run ./bench --sections emit-latest,emit-latest-latency --out .cache/bench/emit-latest.md $(BENCH_ARGS)

# The side-by-side benchmark (bench/README.md): splitflow, raw franz-go and
# Kafka Streams 4.4 on one local Kafka broker. Takes long at full size;
# `make bench-e2e BENCH_ARGS=--quick` for a small run. Never part of CI.
.PHONY: bench-e2e
BENCH_ARGS ?=
bench-e2e:
	$(GO) run ./bench $(BENCH_ARGS)
