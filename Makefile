# aegis: every target works from a clean checkout on Debian with Go 1.26
# (and Node 20 + npm for the interop suite), as root or not.

export PATH := $(PATH):/usr/local/go/bin
GO      ?= go
BIN     := bin
NODEDIR := .cache/node
# The official MCP reference servers used by the interop tests, pinned.
# conformance is the official MCP conformance suite: 0.1.13 is its last
# release that runs on Node 20 (later ones need Node 22); the newest, for
# MCP 2026-07-28, is installed beside it on Node 22 (NODE22_PKGS).
NPM_PKGS := @modelcontextprotocol/server-everything@2026.8.31 @modelcontextprotocol/server-filesystem@2026.8.31 @modelcontextprotocol/sdk@1.32.2 @modelcontextprotocol/conformance@0.1.13 @modelcontextprotocol/client@2.4.0
# conformance22-deps: the newest conformance suite on the registry
# (0.2.0-alpha.12, the first with the 2026-07-28 scenarios; no 0.2.0 yet)
# and the Node 22 it needs, from npm's node package (a node binary for this
# system, no root), in a folder of their own, apart from the Node 20 one
# of NPM_PKGS. About 25 s and 80 MB of downloads from an empty npm cache
# (240 MB installed); nothing once installed.
NODE22DIR  := .cache/node22
NODE22_PKGS := node@22.23.3 @modelcontextprotocol/conformance@0.2.0-alpha.12
FUZZTIME ?= 10s
DEMO    := .cache/demo
# install puts aegis in $(PREFIX)/bin.
PREFIX  ?= $(HOME)/.local
# The build records its VCS revision (aegis version prints it) wherever
# git can tell it, whatever GOFLAGS says.
BUILDFLAGS := -buildvcs=auto
# Every go command here (and the ones the tests run) builds with
# -trimpath: no build folder is compiled into a binary, and the build
# cache is shared by every checkout of the tree wherever it lies. Without
# it a package's cache key names its folder, so a fresh clone (as CI runs
# make test) compiled and vetted every package of aegis anew, three times
# over for vet alone.
export GOFLAGS := $(strip -trimpath $(filter-out -trimpath,$(GOFLAGS)))

.PHONY: all build install test test-prep test-build test-deps apt-deps vet cross release fmt-check unit bench fuzz demo interop-deps conformance22-deps witness-deps console-deps python-deps telemetry-deps jaeger-deps test-telemetry clean

all: build

build:
	$(GO) build $(BUILDFLAGS) -o $(BIN)/aegis ./cmd/aegis
	$(GO) build -o $(BIN)/aegis-example-server ./cmd/aegis-example-server
	$(GO) build -o $(BIN)/aegis-demo-client ./cmd/aegis-demo-client

# install: aegis into $(PREFIX)/bin (default ~/.local/bin), and a word
# when that is not on PATH.
install:
	mkdir -p $(PREFIX)/bin
	$(GO) build $(BUILDFLAGS) -o $(PREFIX)/bin/aegis ./cmd/aegis
	@echo "installed $(PREFIX)/bin/aegis"
	@case ":$$PATH:" in *":$(PREFIX)/bin:"*) ;; \
	  *) echo "note: $(PREFIX)/bin is not on your PATH; add it: export PATH=\"$(PREFIX)/bin:\$$PATH\"" ;; esac

# test: vet (for Linux, macOS and Windows), gofmt, then every test with
# the race detector, each package printed as it finishes, and a summary.
# The two longest packages, proxy (in two parts, PROXY_ALONE below) and
# cmd/aegis, start at once, each in a go test of its own, beside one more
# that runs the others three at a time
# (every package is compiled once before, so that they do not
# compile the same ones side by side). Within a package, the tests that
# mostly wait (on processes, a fleet hub's retries) run side by side
# (t.Parallel, -parallel 8). The interop suite needs the Node reference
# servers, the console's browser test Debian's chromium, and the reading's
# differential test Python 3 (beside Node), the telemetry tests Debian's
# prometheus, the anchor log's tests a litewitness, installed beside the
# builds (test-prep); AEGIS_REQUIRE_BROWSER, AEGIS_REQUIRE_TELEMETRY and
# AEGIS_REQUIRE_WITNESS make those tests fail rather than skip without
# them. The OTLP test's Jaeger is built from source (jaeger-deps, many
# minutes of compiling once): make test runs that test where it was built,
# and make test-telemetry builds it and runs the telemetry tests with it.
# GORACE=atexit_sleep_ms=0: a race-built binary otherwise sleeps a second
# as it exits, and the tests run theirs as helper processes many
# times (the sandbox's confined helper, crash and scale tests).
# -ldflags=-w: the test binaries are linked without DWARF, as the
# binaries they run are (a third less CPU to link each, about 3 s for
# cmd/aegis's); panics and race reports come from the symbol table.
TESTFLAGS := -race -count=1 -parallel 8 -timeout 30m -ldflags=-w
# The binaries the tests run as processes (aegis, the example server, the
# test servers and hosts, the go-sdk's conformance server and client, the
# hub's nats-server, the sandbox's static probe), built once into TESTBIN
# beside the race build and handed to every package's tests in
# AEGIS_TEST_BINDIR; without it (go test alone) each package builds its
# own.
TESTBIN   := $(CURDIR)/.cache/testbin
TESTBINS  := ./cmd/aegis ./cmd/aegis-example-server ./cmd/aegis/testdata/openkey \
	./proxy/testdata/rawserver ./proxy/testdata/growserver ./proxy/testdata/taskserver \
	./proxy/testdata/spawner ./proxy/testdata/pinserver ./proxy/testdata/authclient \
	./proxy/testdata/floodserver ./cmd/aegis/testdata/stdiohost ./cmd/aegis-demo-client \
	github.com/nats-io/nats-server/v2 github.com/modelcontextprotocol/go-sdk/conformance/everything-server \
	github.com/modelcontextprotocol/go-sdk/conformance/everything-client
LONG      := ./proxy ./cmd/aegis
# The other packages' longest, which their go test (-p 3) starts first:
# it starts packages in the order given, and in alphabetical order
# verifier, one of the longest, came last and ran a minute after every
# other package had ended, on a machine left half idle.
FIRST     := ./verifier ./events ./projector ./schemas ./sandbox
# proxy's three 16 MiB frame tests run one at a time, before any of the
# package's parallel tests may start (see their comments): in a go test of
# their own they run beside the rest of the package instead of ahead of it.
PROXY_ALONE := ^(TestWrapServerFloodOfLargeFramesKeepsMemoryBounded|TestWrapSlowHostOfLargeAnswersKeepsMemoryBounded|TestWrapRelaysAFrameJustUnderTheLimitExactly)$$
# The data-heavy sweeps (every byte of a record flipped, every cut of a
# read, mutated records, a catch-up of every kind of damage to a 4 MiB
# record) take 4 to 7 times their CPU under the race detector, which finds
# nothing more in the thousandth input than in the tenth: under it they
# test a sample (raceDetector in their packages' tests), and a go test of
# their own runs them whole without it.
SWEEPS      := ^(TestRoundTripByteFlips|TestCatchUpRefusesARecordItCannotAccountFor|TestParallelMatchesSequentialOnMutations|TestParallelReadErrors)$$
SWEEP_PKGS  := ./projector ./verifier
# test-prep runs the CPU-bound builds (vet, cross, the race build, the
# test binaries) beside the network-bound installs (npm, apt-get), which on
# a fresh machine wait about a minute on downloads; each one's output is
# printed whole when it ends.
test:
	@start=$$(date +%s); echo "== make test: vet, builds and installs, side by side"; \
	$(MAKE) --no-print-directory -j3 --output-sync=target test-prep || exit 1; \
	prep=$$(( $$(date +%s) - start )); tests=$$(date +%s); export AEGIS_TEST_BINDIR=$(TESTBIN); \
	rest=$$({ $(GO) list $(FIRST); $(GO) list ./...; } | awk '!seen[$$0]++' | grep -v -x $(foreach p,$(LONG),-e $$($(GO) list $(p)))); \
	export AEGIS_REQUIRE_BROWSER=1 AEGIS_REQUIRE_TELEMETRY=1 AEGIS_REQUIRE_WITNESS=1 GORACE=atexit_sleep_ms=0; \
	$(GO) test $(TESTFLAGS) -run '$(PROXY_ALONE)' ./proxy & pids="$$!"; \
	$(GO) test $(TESTFLAGS) -skip '$(PROXY_ALONE)' ./proxy & pids="$$pids $$!"; \
	$(GO) test $(TESTFLAGS) ./cmd/aegis & pids="$$pids $$!"; \
	$(GO) test $(TESTFLAGS) -p 3 $$rest & pids="$$pids $$!"; \
	{ $(GO) test $(filter-out -race,$(TESTFLAGS)) -run '$(SWEEPS)' $(SWEEP_PKGS) >$(TESTBIN)/sweeps.out 2>&1; st=$$?; \
	  sed 's/^\(ok\|FAIL\)\([[:space:]]*\)\(github\S*\)/\1\2\3 (sweeps, without the race detector)/' $(TESTBIN)/sweeps.out; exit $$st; } & pids="$$pids $$!"; \
	status=0; for p in $$pids; do wait $$p || status=1; done; \
	if [ $$status = 0 ]; then verdict="every package passed"; else verdict="FAILED: see the FAIL lines above"; fi; \
	echo "== make test: $$verdict in $$(( $$(date +%s) - start )) s: builds and installs $$prep s, the tests $$(( $$(date +%s) - tests )) s"; exit $$status

test-prep: test-build test-deps

# test-build: vet and gofmt, then every package compiled with the race
# detector (so that the go tests below do not compile the same ones side
# by side) beside the binaries the tests run as processes, linked without
# DWARF (-ldflags=-w: a third less CPU to link them, and no test reads
# it; stack traces come from the symbol table, which stays).
test-build: vet cross fmt-check
	@rm -rf $(TESTBIN) && mkdir -p $(TESTBIN) || exit 1; \
	{ $(GO) build -ldflags=-w -o $(TESTBIN)/ $(TESTBINS) && CGO_ENABLED=0 $(GO) build -o $(TESTBIN)/probe ./sandbox/testdata/probe; } & bins=$$!; \
	$(GO) build -race $$($(GO) list -f '{{if ne .Name "main"}}{{.ImportPath}}{{end}}' ./...) || exit 1; \
	wait $$bins

# test-deps: npm beside apt-get; the apt-get installs one after another
# (they take the same lock).
test-deps: interop-deps conformance22-deps witness-deps apt-deps
apt-deps:
	@MAKEFLAGS= $(MAKE) --no-print-directory console-deps python-deps telemetry-deps

vet:
	$(GO) vet ./...

# cross: macOS and Windows compile and vet clean, tests included (their
# Linux-only tests are tagged linux, or skip), for arm64 and amd64; make
# release builds the other architectures as well. The tests themselves run
# on Linux, the platform-neutral logic of the other systems' seams
# included (events/platform). About 2 minutes a target on a cold build
# cache.
CROSS := darwin/arm64 windows/amd64
cross:
	@set -e; for t in $(CROSS); do echo "== vet for $$t"; \
	  GOOS=$${t%/*} GOARCH=$${t#*/} $(GO) vet ./...; done

# release: aegis for each system it is built for, in bin/release
# (aegis-windows-amd64.exe for Windows), with their SHA-256 sums in
# bin/release/SHA256SUMS. linux/amd64 is built with cgo where the host has
# a C compiler, as the tests' binaries are, so it runs the code paths the
# tests ran; the others are cross-built without.
RELEASE := linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64
release:
	rm -rf $(BIN)/release && mkdir -p $(BIN)/release
	@set -e; for t in $(RELEASE); do \
	  out=$(BIN)/release/aegis-$${t%/*}-$${t#*/}; [ $${t%/*} != windows ] || out=$$out.exe; echo "== $$out"; \
	  GOOS=$${t%/*} GOARCH=$${t#*/} $(GO) build $(BUILDFLAGS) -trimpath -o $$out ./cmd/aegis; done
	cd $(BIN)/release && sha256sum aegis-* > SHA256SUMS && cat SHA256SUMS

fmt-check:
	@out="$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.cache/*'))"; \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

# witness-deps builds a real C2SP tlog-witness for the anchor log's tests:
# litewitness and witnessctl of filippo.io/torchwood v0.6.1 (v0.10.0 needs
# a newer Go), into an ignored folder; once, from the Go module proxy.
WITNESSBIN := .cache/witness/bin
witness-deps: $(WITNESSBIN)/litewitness
$(WITNESSBIN)/litewitness:
	GOBIN=$(CURDIR)/$(WITNESSBIN) GOFLAGS='-mod=mod -trimpath' $(GO) install filippo.io/torchwood/cmd/litewitness@v0.6.1 filippo.io/torchwood/cmd/witnessctl@v0.6.1

# interop-deps installs the npm reference servers into an ignored folder.
interop-deps: $(NODEDIR)/.installed

$(NODEDIR)/.installed: Makefile
	mkdir -p $(NODEDIR)
	cd $(NODEDIR) && { [ -f package.json ] || npm init -y >/dev/null; } && \
	  npm install --no-audit --no-fund --save-exact $(NPM_PKGS)
	touch $@

conformance22-deps: $(NODE22DIR)/.installed

$(NODE22DIR)/.installed: Makefile
	mkdir -p $(NODE22DIR)
	cd $(NODE22DIR) && { [ -f package.json ] || npm init -y >/dev/null; } && \
	  npm install --no-audit --no-fund --save-exact $(NODE22_PKGS) && \
	  node_modules/.bin/node --version
	touch $@

# console-deps installs Debian's chromium (headless, for the console's
# browser test) when it is missing: with apt-get as root, else it says
# what to run.
console-deps:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get install -y chromium || { apt-get update && apt-get install -y chromium; }; \
	  else echo "console-deps: chromium is missing; run: sudo apt-get install -y chromium" >&2; exit 1; fi; }

# telemetry-deps installs Debian's prometheus package when promtool is
# missing: the telemetry tests check the metrics page with promtool and
# start a Prometheus server of their own that scrapes it. The package's
# own service is not started (a policy-rc.d that says no, for the
# install's time, where none is there).
telemetry-deps:
	@command -v promtool >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    rc=/usr/sbin/policy-rc.d; made=; \
	    if [ ! -e $$rc ]; then printf '#!/bin/sh\nexit 101\n' > $$rc && chmod 755 $$rc && made=1; fi; \
	    apt-get install -y --no-install-recommends prometheus || { apt-get update && apt-get install -y --no-install-recommends prometheus; }; s=$$?; \
	    [ -z "$$made" ] || rm -f $$rc; exit $$s; \
	  else echo "telemetry-deps: promtool is missing; run: sudo apt-get install -y prometheus" >&2; exit 1; fi; }

# jaeger-deps builds Jaeger v1.75.0 (its cmd/jaeger, an OpenTelemetry
# Collector with Jaeger's storage and query API), the OTLP receiver of the
# telemetry test, once into .cache/bin/jaeger, from the Go tool module
# cmd/aegis/testdata/jaeger. From a cold module and build cache it
# downloads about 1.3 GB of modules and compiles for many minutes (see
# docs/telemetry.md); after that it is up to date until that module
# changes.
JAEGER := .cache/bin/jaeger
jaeger-deps: $(JAEGER)

$(JAEGER): cmd/aegis/testdata/jaeger/go.mod cmd/aegis/testdata/jaeger/go.sum
	mkdir -p $(dir $@)
	cd cmd/aegis/testdata/jaeger && $(GO) build -o $(abspath $@) github.com/jaegertracing/jaeger/cmd/jaeger

# test-telemetry: the telemetry tests with every receiver they start,
# Jaeger included (built first by jaeger-deps when missing).
test-telemetry: telemetry-deps jaeger-deps
	AEGIS_REQUIRE_TELEMETRY=1 AEGIS_REQUIRE_JAEGER=1 $(GO) test -race -count=1 -run 'Telemetry|TraceContext' ./cmd/aegis/ ./proxy/ ./projector/ ./cmd/aegis/telemetry/

# python-deps installs Python 3 when it is missing: proxy/reading holds
# its reading of frames to Python's json, as to Node's JSON.parse.
python-deps:
	@command -v python3 >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get install -y python3 || { apt-get update && apt-get install -y python3; }; \
	  else echo "python-deps: python3 is missing; run: sudo apt-get install -y python3" >&2; exit 1; fi; }

# bench: ratios measured within one run (see docs/BENCHMARKS.md): every
# benchmark of ./events and ./proxy once, then the scale benchmark (a store
# of 300 000 recorded calls, about 1.4 GB in the temp dir; AEGIS_SCALE_CALLS
# changes the number), each merging its figures into BENCH_JSON, then the
# table of goals from cmd/aegis-benchreport. Its A/B mode against a
# baseline commit is make bench-ab BASE=COMMIT (below).
BENCH_JSON ?= .cache/bench/bench.json
bench:
	mkdir -p $(dir $(BENCH_JSON)) && rm -f $(BENCH_JSON)
	AEGIS_BENCH_JSON=$(abspath $(BENCH_JSON)) $(GO) test -run '^$$' -bench . -benchtime 1x -count 1 -timeout 30m ./events/ ./proxy/
	AEGIS_BENCH_JSON=$(abspath $(BENCH_JSON)) $(GO) test -run '^$$' -bench 'BenchmarkScale' -benchtime 1x -count 1 -timeout 60m ./cmd/aegis/
	$(GO) run ./cmd/aegis-benchreport $(BENCH_JSON)
	@echo "== policy evaluation per call, the confine helper's start cost, replay and recheck of 1M events"
	$(GO) test -run '^$$' -bench 'BenchmarkEvaluate' -benchmem -count 1 ./policy/
	$(GO) test -run '^$$' -bench 'BenchmarkStart|BenchmarkStore' -benchtime 1x -count 1 -timeout 30m ./sandbox/ ./projector/

# bench-report: make bench 3 times into .cache/bench/run-N.json, then the
# min/median/max table in docs/BENCHMARKS.md and the plot docs/bench-inflight.svg.
BENCH_RUNS := 1 2 3
.PHONY: bench-report
bench-report:
	@set -e; for n in $(BENCH_RUNS); do \
	  echo "== make bench, run $$n of $(words $(BENCH_RUNS))"; \
	  $(MAKE) --no-print-directory bench BENCH_JSON=.cache/bench/run-$$n.json; \
	done
	$(GO) run ./cmd/aegis-benchreport -update docs/BENCHMARKS.md -svg docs/bench-inflight.svg \
	  $(foreach n,$(BENCH_RUNS),.cache/bench/run-$(n).json)

# bench-ab: what the candidate (this working tree) costs against a
# baseline commit BASE (default 8ff31f5, the commit before issues 14-22),
# as a host sees it: cmd/aegis-ab runs both aegis binaries for ROUNDS
# rounds, A and B back to back in each step of a round and in alternating
# order (A B, B A, ...), in front of one example server built from this
# tree, and prints the table of docs/BENCHMARKS.md "A/B against
# a baseline commit" (JSON in .cache/ab/ab.json). The baseline is built
# from `git archive BASE` in .cache/ab/base, removed once built. Where
# taskset exists (and AB_CPUS can be used), the driver and every process it
# starts are pinned to AB_CPUS (default: CPUs 0 and 1, or 0 alone on a
# one-CPU machine). AB_ARGS passes flags to aegis-ab (-calls, -starts, ...).
BASE    ?= 8ff31f5
ROUNDS  ?= 3
AB_DIR  := .cache/ab
AB_ARGS ?=
AB_CPUS ?= $(shell [ "$$(nproc 2>/dev/null || echo 1)" -ge 2 ] && echo 0,1 || echo 0)
AB_PIN   = $(shell command -v taskset >/dev/null 2>&1 && taskset -c $(AB_CPUS) true 2>/dev/null && echo taskset -c $(AB_CPUS))
.PHONY: bench-ab
bench-ab:
	@git cat-file -e '$(BASE)^{commit}' 2>/dev/null || { \
	  echo "bench-ab: error: $(BASE) is not a commit of this repository (in a shallow clone: git fetch --unshallow)" >&2; exit 1; }
	rm -rf $(AB_DIR)/base && mkdir -p $(AB_DIR)/base
	git archive '$(BASE)' | tar -x -C $(AB_DIR)/base
	cd $(AB_DIR)/base && $(GO) build -buildvcs=false -o ../aegis-base ./cmd/aegis
	rm -rf $(AB_DIR)/base
	$(GO) build $(BUILDFLAGS) -o $(AB_DIR)/aegis-cand ./cmd/aegis
	$(GO) build -o $(AB_DIR)/aegis-example-server ./cmd/aegis-example-server
	$(GO) build -o $(AB_DIR)/aegis-ab ./cmd/aegis-ab
	@echo "== A = $(BASE) ($$(git rev-parse --short '$(BASE)^{commit}')), B = the working tree ($$(git rev-parse --short HEAD)$$(git diff --quiet HEAD -- . 2>/dev/null || echo ', with changes')); pinned: $(if $(AB_PIN),$(AB_PIN),no (taskset missing or AB_CPUS unusable))"
	$(AB_PIN) $(AB_DIR)/aegis-ab -rounds $(ROUNDS) -a '$(BASE)' -b 'working tree' -json $(AB_DIR)/ab.json $(AB_ARGS) \
	  $(AB_DIR)/aegis-base $(AB_DIR)/aegis-cand $(AB_DIR)/aegis-example-server

# fuzz: a short run of every fuzz target.
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "fuzz $$pkg $$f"; \
	    $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

# demo: a signing key, the bundled example server wrapped by aegis, a
# scripted go-sdk client through it, then an offline verify pinned to the key.
demo: build
	rm -rf $(DEMO) && mkdir -p $(DEMO)
	@echo "== aegis keygen"
	$(BIN)/aegis keygen --out $(DEMO)/signing.key | tee $(DEMO)/keygen.out
	@echo "== a scripted MCP client -> aegis wrap -> the example server"
	$(BIN)/aegis-demo-client -- $(BIN)/aegis wrap --audit $(DEMO)/calls.aarl \
	  --signing-key $(DEMO)/signing.key --state-dir $(DEMO)/state -- $(BIN)/aegis-example-server
	@echo "== the record ($(DEMO)/calls.aarl): one line per open/intent/outcome/close"
	@cut -c1-150 $(DEMO)/calls.aarl
	@echo "== aegis export rebuilds it from the event stream, byte for byte"
	$(BIN)/aegis export --state-dir $(DEMO)/state --out $(DEMO)/rebuilt.aarl
	cmp $(DEMO)/calls.aarl $(DEMO)/rebuilt.aarl && echo "identical"
	@echo "== aegis verify, pinned to the public key keygen printed"
	$(BIN)/aegis verify --key $$(awk '/^public_key/{print $$2}' $(DEMO)/keygen.out) $(DEMO)/calls.aarl

clean:
	rm -rf $(BIN) .cache/demo
