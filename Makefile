# dlock: build, run and test the Redis module.
SHELL := /bin/bash
CARGO ?= cargo
MODULE := $(CURDIR)/target/release/libdlock.so
CONF := redis.conf.example
# Port for `make run`, taken from the example config.
RUN_PORT = $(shell awk '$$1 == "port" { print $$2; exit }' $(CONF) 2>/dev/null || true)

# The server everything runs against (tests, `make run`, `make bench`):
#   SERVER=redis    Debian's redis-server, redis-cli, redis-benchmark (default)
#   SERVER=valkey   Debian's valkey-server, valkey-cli, valkey-benchmark
#   SERVER=<dir>    a folder holding redis-server, redis-cli, redis-benchmark
#                   (or valkey-server, valkey-cli, valkey-benchmark)
# DLOCK_SERVER, DLOCK_CLI and DLOCK_BENCHMARK override each binary.
SERVER ?= redis
ifeq ($(SERVER),redis)
SERVER_BIN_PREFIX := redis-
else ifeq ($(SERVER),valkey)
SERVER_BIN_PREFIX := valkey-
else ifneq ($(wildcard $(SERVER)/valkey-server),)
SERVER_BIN_PREFIX := $(abspath $(SERVER))/valkey-
else
SERVER_BIN_PREFIX := $(abspath $(SERVER))/redis-
endif
DLOCK_SERVER ?= $(SERVER_BIN_PREFIX)server
DLOCK_CLI ?= $(SERVER_BIN_PREFIX)cli
DLOCK_BENCHMARK ?= $(SERVER_BIN_PREFIX)benchmark
export DLOCK_SERVER DLOCK_CLI DLOCK_BENCHMARK

# `make install`: the module and the `dlock` tool.
PREFIX ?= /usr/local
MODULE_DIR = $(DESTDIR)$(PREFIX)/lib/redis/modules
BIN_DIR = $(DESTDIR)$(PREFIX)/bin

.PHONY: deps build run run-clean test test-intro deb check-deb test-python bench-python test-matrix install uninstall check-install bench bench-instructions bench-floor-instructions bench-guard-instructions fmt clippy clean \
	check-memory check-memory-canary fuzz check-history check-history-can-fail history-module

# Installs only what is missing (see .ci/deps.sh): the build's needs and the
# chosen SERVER.
deps:
	@.ci/deps.sh $(SERVER)

# The module (target/release/libdlock.so) and the `dlock` tool
# (target/release/dlock), with the client's tokio feature as `make test`
# tests it: one feature set for every release build, so the module is
# compiled once, not once here and again for the tests.
build: deps
	$(CARGO) build --release $(CLIENT_FEATURES)

# `make run` keeps its data (RDB, AOF, dlock.state) and its config file in
# RUN_DIR, so a run replays what the last `make run` left, never a stray AOF
# of the current folder or of /tmp; `make run-clean` deletes it. The config
# file (made once) includes redis.conf.example and loads the module itself,
# so `CONFIG REWRITE` rewrites it, not the example, and the next start loads
# the module once.
RUN_DIR := $(CURDIR)/target/run
RUN_CONF := $(RUN_DIR)/redis.conf
run: build
	@mkdir -p $(RUN_DIR)
	@[ -f $(RUN_CONF) ] || printf 'include %s\ndir %s\nloadmodule %s\n' '$(CURDIR)/$(CONF)' '$(RUN_DIR)' '$(MODULE)' > $(RUN_CONF)
	@echo "config $(RUN_CONF) (includes $(CONF)); data (RDB, AOF) in $(RUN_DIR): replayed at the next start; start afresh with: make run-clean"
	@echo "try: $(DLOCK_CLI) -p $(or $(RUN_PORT),6380) DLOCK.ACQUIRE res tok 30000"
	@echo "try: DLOCK_URL=redis://127.0.0.1:$(or $(RUN_PORT),6380)/ target/release/dlock exec demo -- sh -c 'echo holding fence \$$DLOCK_FENCE; sleep 5'"
	exec $(DLOCK_SERVER) $(RUN_CONF)

run-clean:
	rm -rf $(RUN_DIR)

# Integration tests load target/release/libdlock.so, hence the release build
# before `cargo test --release`.
# The workspace's default members are the module and the client (clients/rust/),
# so build, clippy and test cover both; the client's async API (feature
# tokio) is linted and tested too.
CLIENT_FEATURES := --features dlock-client/tokio
# The previous release's module, for tests/durability/rollback/ (rollbacks and mixed
# versions): the commit in .ci/previous-release, built by
# .ci/baseline-module.sh into target/baseline/ (the first build compiles the
# dependencies, ~2 min; later runs reuse it). Needs the git history.
# DLOCK_PREVIOUS_MODULE=/path/to/libdlock.so uses that file instead.
PREVIOUS_RELEASE := $(shell sed -n '/^[^\#]/{p;q}' .ci/previous-release)
DLOCK_PREVIOUS_MODULE ?=
test: test-intro deps
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets -- -D warnings
	$(CARGO) clippy --all-targets $(CLIENT_FEATURES) -- -D warnings
	$(CARGO) clippy -p dlock-floor -- -D warnings
	$(CARGO) check --quiet --manifest-path fuzz/Cargo.toml
	$(CARGO) build --release $(CLIENT_FEATURES)
	@# The venv before the Rust suites: the tool's metrics test
	@# (clients/rust/tests/cli/metrics.rs) parses with its prometheus_client.
	$(MAKE) --no-print-directory $(PY_VENV)/.installed
	previous="$$(CARGO='$(CARGO)' .ci/baseline-module.sh '$(or $(DLOCK_PREVIOUS_MODULE),$(PREVIOUS_RELEASE))')" && \
		[ -n "$$previous" ] && \
		DLOCK_PREVIOUS_MODULE="$$previous" $(CARGO) test --release $(CLIENT_FEATURES)
	$(MAKE) --no-print-directory test-python PY_SERVERS="$(PY_SERVERS)"

test-intro:
	@echo "make test: about 13 minutes on 2 cores, more with a cold target/. It installs what is missing" \
		"(apt-get: libclang-dev, libfaketime, tmux, redis-server, and valkey-server from backports for the Python suite;" \
		"a Python venv in $(PY_VENV)) and builds the previous release's module ($(PREVIOUS_RELEASE), .ci/previous-release)" \
		"into target/baseline/ for tests/durability/rollback/ (about 2 minutes the first time)."

# The Python client (clients/python/, docs/python.md): pytest against real
# servers loading target/release/libdlock.so, in a virtual environment made
# here (clients/python/.venv; the package and its test dependencies from the
# package index). PY_SERVERS lists the servers it runs on (as SERVER takes
# them; default: the chosen SERVER and valkey), PYTEST_ARGS is passed on.
PYTHON ?= python3
PY_DIR := clients/python
PY_VENV := $(PY_DIR)/.venv
PY_SERVERS ?= $(SERVER) $(if $(filter valkey,$(SERVER)),,valkey)
PYTEST_ARGS ?=
$(PY_VENV)/.installed: $(PY_DIR)/pyproject.toml $(PY_DIR)/src/dlock/_version.py
	@$(PYTHON) -m venv --help >/dev/null 2>&1 && $(PYTHON) -c 'import ensurepip' 2>/dev/null || \
		{ apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y python3-venv; }
	@[ -x $(PY_VENV)/bin/python ] || $(PYTHON) -m venv $(PY_VENV)
	$(PY_VENV)/bin/python -m pip install -q -e '$(PY_DIR)[test,bench]'
	@touch $@

test-python: $(PY_VENV)/.installed
	$(CARGO) build --release $(CLIENT_FEATURES)
	cd $(PY_DIR) && $(abspath $(PY_VENV))/bin/python -m mypy  # the types; [tool.mypy] in pyproject.toml
	@for s in $(PY_SERVERS); do \
		echo "== python client on $$s"; \
		.ci/deps.sh $$s >/dev/null || exit 1; \
		case $$s in redis|valkey) p=$$s-;; *) p=$$(cd $$s && pwd)/$$( [ -x $$s/redis-server ] && echo redis || echo valkey)-;; esac; \
		DLOCK_SERVER=$${p}server DLOCK_CLI=$${p}cli DLOCK_MODULE=$(MODULE) \
			$(PY_VENV)/bin/python -m pytest $(PY_DIR)/tests -q $(PYTEST_ARGS) || exit 1; \
	done

# Lock/unlock cycles and critical sections per second under contention,
# against redis-py's Lock and python-redis-lock (docs/python.md has figures).
bench-python: $(PY_VENV)/.installed
	$(CARGO) build --release
	DLOCK_SERVER=$(DLOCK_SERVER) DLOCK_MODULE=$(MODULE) $(PY_VENV)/bin/python $(PY_DIR)/bench/bench.py

# The integration suites on every server (Redis 7.0, Valkey 8 and the builds
# in ../shared/servers/), as a table. MATRIX picks servers and suites (module
# paths of tests/main.rs, `layers`, `client:<suite>`), e.g.
#   make test-matrix MATRIX="valkey ../shared/servers/redis-7.2.6=locks::contract,blocking"
MATRIX ?=
# The venv: a client:cli suite runs the tool's metrics test, which parses
# with its prometheus_client.
test-matrix: deps $(PY_VENV)/.installed
	.ci/test-matrix.sh $(MATRIX)

install: build
	install -d $(MODULE_DIR)
	install -m 0755 $(MODULE) $(MODULE_DIR)/libdlock.so
	@if [ -x target/release/dlock ]; then \
		install -d $(BIN_DIR) && install -m 0755 target/release/dlock $(BIN_DIR)/dlock && \
		echo "installed $(BIN_DIR)/dlock"; \
	fi
	@echo "installed $(MODULE_DIR)/libdlock.so; add to redis.conf:"
	@echo "  loadmodule $(PREFIX)/lib/redis/modules/libdlock.so"

uninstall:
	rm -f $(MODULE_DIR)/libdlock.so $(BIN_DIR)/dlock

# install + a server loading the installed module + uninstall, in a
# throwaway PREFIX: what CI checks of the two targets.
check-install: build
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(MAKE) --no-print-directory install PREFIX=$$tmp/prefix | tee $$tmp/out && \
	grep -q "loadmodule $$tmp/prefix/lib/redis/modules/libdlock.so" $$tmp/out && \
	$(DLOCK_SERVER) --port 0 --unixsocket $$tmp/sock --dir $$tmp --save '' \
		--loadmodule $$tmp/prefix/lib/redis/modules/libdlock.so --daemonize yes \
		--pidfile $$tmp/pid --logfile $$tmp/log && \
	for i in $$(seq 50); do [ -S $$tmp/sock ] && break; sleep 0.1; done; \
	reply=$$($(DLOCK_CLI) -s $$tmp/sock DLOCK.ACQUIRE res tok 10000); \
	status=$$($$tmp/prefix/bin/dlock --url "unix://$$tmp/sock" status res 2>&1); \
	kill $$(cat $$tmp/pid) 2>/dev/null; \
	[ "$$reply" -gt 0 ] 2>/dev/null || { echo "check-install: the installed module did not grant ($$reply)"; cat $$tmp/log; exit 1; }; \
	case "$$status" in "res: held"*) ;; *) echo "check-install: the installed dlock tool said: $$status"; exit 1 ;; esac; \
	$(MAKE) --no-print-directory uninstall PREFIX=$$tmp/prefix && \
	[ ! -e $$tmp/prefix/lib/redis/modules/libdlock.so ] && [ ! -e $$tmp/prefix/bin/dlock ] && \
	echo "check-install: OK (installed, loaded, granted fence $$reply, dlock status saw it, uninstalled)"

# `make deb`: a Debian package of the module and the `dlock` tool
# (.ci/deb.sh: dpkg-deb alone, no debhelper), in
# target/debian/dlock_<version>_<arch>.deb. `make check-deb` builds and
# lists it; with DEB_INSTALL=1 (CI's throwaway root machine) it installs it,
# loads it into a server by `include /etc/dlock/dlock.conf` and by a
# `loadmodule` line (a `dlock.*` setting kept by `CONFIG REWRITE` across a
# restart), uses it, and removes it (.ci/check-deb.sh).
deb: build
	@.ci/deb.sh target/debian

check-deb: build
	@deb=$$(.ci/deb.sh target/debian) && DEB_INSTALL=$(DEB_INSTALL) .ci/check-deb.sh "$$deb"

# A benchmark, not a test: prints Markdown tables (see docs/performance.md).
# BASELINE (in the environment or on the make command line) also compares
# this build with another build of the module, on the `appendonly yes`
# configuration: ACQUIRE, owner RELEASE and owner EXTEND throughput at
# pipeline 1 and 16, the ACQUIRE ... WAIT handoff latency (p50, p99) and
# memory per lock (the `baseline` section; benches/dlock/baseline.rs has the
# goals); unset, that section is skipped with a note.
#   BASELINE=/path/to/other/libdlock.so   that file (relative: from here)
#   BASELINE=<git commit-ish>             that commit's module, built by
#       .ci/baseline-module.sh into target/baseline/libdlock-<sha>.so (the
#       first build compiles the dependencies, ~2 min; a built commit is
#       reused). BASELINE=HEAD is an A/A run: its ratios show the noise.
# Only that comparison, e.g. before and after a change:
#   make bench BASELINE=main DLOCK_BENCH_SECTIONS=baseline
# The `floor` section measures ACQUIRE, RELEASE and EXTEND against
# FLOOR.CHECK, the least a module command on a lock does, from a bench-only
# module (benches/floor/, target/release/libdlock_floor.so, built here):
#   make bench DLOCK_BENCH_SECTIONS=floor
# Guarded writes (DLOCK.GUARD) against the Lua script and a plain SET:
#   make bench DLOCK_BENCH_SECTIONS=guard
# What PRIORITY costs a queue (vs FIFO, BLPOP beside), and the longest wait
# of priority 0 under a stream of higher ones against its bound:
#   make bench DLOCK_BENCH_SECTIONS=priorities DLOCK_BENCH_CONFIGS=aof
BASELINE ?=
bench: build
	$(CARGO) build --release -p dlock-floor
	baseline="$$(CARGO='$(CARGO)' .ci/baseline-module.sh '$(BASELINE)')" && \
		BASELINE="$$baseline" $(CARGO) bench --bench dlock

# Instructions per plain-lock command, this build against BASELINE, counted
# by callgrind (.ci/instructions.sh): what the machine's load cannot blur.
bench-instructions: build
	@command -v valgrind >/dev/null || apt-get install -y valgrind
	baseline="$$(CARGO='$(CARGO)' .ci/baseline-module.sh '$(or $(BASELINE),HEAD)')" && \
		.ci/instructions.sh $(MODULE) "$$baseline"

# Instructions per plain-lock command against the floor (FLOOR.CHECK,
# benches/floor/) and the native primitives, counted by callgrind
# (.ci/floor-instructions.sh), with where the difference goes: what the
# `floor` section's throughput cannot tell on a loaded machine.
bench-floor-instructions: build
	@command -v valgrind >/dev/null || apt-get install -y valgrind
	$(CARGO) build --release -p dlock-floor
	.ci/floor-instructions.sh $(MODULE) $(CURDIR)/target/release/libdlock_floor.so

# Instructions per guarded write (DLOCK.GUARD ... SET, FENCE and TOKEN, and
# a BATCH of 10) against the Lua GET-compare-SET script and a plain SET,
# counted by callgrind (.ci/guard-instructions.sh), with where the guard's
# instructions go: the profile behind the `guard` section of `make bench`.
bench-guard-instructions: build
	@command -v valgrind >/dev/null || apt-get install -y valgrind
	.ci/guard-instructions.sh $(MODULE)

fmt:
	$(CARGO) fmt --all

clippy:
	$(CARGO) clippy --all-targets -- -D warnings
	$(CARGO) clippy --all-targets $(CLIENT_FEATURES) -- -D warnings
	$(CARGO) clippy -p dlock-floor -- -D warnings

clean:
	$(CARGO) clean

# --- Memory checking: the integration suites with every redis-server under
# valgrind memcheck (see tests/common/valgrind.rs). The module is built with
# the system allocator (feature system-alloc) so valgrind tracks its heap;
# Debian's redis-server has jemalloc linked in, so the server's own heap is
# not tracked. Fails on any invalid read/write/free, mismatched free or use
# of uninitialised values, and on "definitely lost" blocks allocated from
# module frames. Details land in $(MEMCHECK_REPORT).
#   make check-memory                      clean run, must pass
#   make check-memory CANARY=1             module leaks 4 KiB at load: must fail
#   make check-memory-canary               asserts that the CANARY=1 run fails
#                                          because of that leak
#   make check-memory MEMCHECK_SUITES="locks::contract"
#   make check-memory MEMCHECK_FILTER=locks::contract::acquire::
MEMCHECK_DIR := $(CURDIR)/target/memcheck
MEMCHECK_MODULE := $(MEMCHECK_DIR)/release/libdlock.so
MEMCHECK_REPORT := $(MEMCHECK_DIR)/valgrind-report.txt
MEMCHECK_FEATURES = system-alloc$(if $(CANARY),$(COMMA)leak-canary)
COMMA := ,
# Suites run under valgrind: module paths in the test binary tests/main.rs
# (`--test dlock`). replication, concurrency and harness are left out for
# time (their server-side paths are also covered by the contract suite's
# replica tests and persistence's restarts).
MEMCHECK_SUITES ?= locks::contract durability::persistence durability::effects blocking holds::durable sets::durable
MEMCHECK_THREADS ?= 2
# Test-name filters (cargo test's, substrings) run instead of the suites.
MEMCHECK_FILTER ?=
# Tests skipped under valgrind's 10-50x slowdown (name substrings), because
# their assertions depend on wall-clock margins, not on memory behaviour:
# - paused_writes_hold_back_expiry_handoff: a 200 ms lease must still be held
#   when the waiter has queued; under valgrind it expires first.
# - a_waiter_whose_connection_closes_in_the_grant_turn_is_revoked: the close
#   must be read while a 2.5 s script runs; under valgrind it may come after.
# - leave_no_server_memory (holds::durable, sets::durable): thousands of cycles
#   measure the server's heap, which valgrind does not see; too slow under it.
MEMCHECK_SKIP ?= paused_writes_hold_back_expiry_handoff \
	a_waiter_whose_connection_closes_in_the_grant_turn_is_revoked \
	leave_no_server_memory

check-memory:
	@command -v valgrind >/dev/null || { echo "valgrind not installed: apt-get install -y valgrind"; exit 1; }
	CARGO_TARGET_DIR=$(MEMCHECK_DIR) $(CARGO) build --release --features $(MEMCHECK_FEATURES)
	@rm -f $(MEMCHECK_REPORT)
	@start=$$(date +%s); \
	DLOCK_VALGRIND=1 DLOCK_MODULE=$(MEMCHECK_MODULE) DLOCK_VALGRIND_REPORT=$(MEMCHECK_REPORT) \
	CARGO_TARGET_DIR=$(MEMCHECK_DIR) $(CARGO) test --release --features $(MEMCHECK_FEATURES) \
		--test dlock --no-fail-fast -- \
		--test-threads=$(MEMCHECK_THREADS) $(or $(MEMCHECK_FILTER),$(addsuffix ::,$(MEMCHECK_SUITES))) \
		$(foreach t,$(MEMCHECK_SKIP),--skip $(t)); \
	rc=$$?; \
	echo "check-memory: tests [$(or $(MEMCHECK_FILTER),$(MEMCHECK_SUITES))], features $(MEMCHECK_FEATURES), $$(( $$(date +%s) - start )) s"; \
	if [ -s $(MEMCHECK_REPORT) ]; then \
		echo "check-memory: FAILED, valgrind findings ($(MEMCHECK_REPORT)):"; \
		cat $(MEMCHECK_REPORT); exit 1; \
	fi; \
	if [ $$rc -ne 0 ]; then echo "check-memory: FAILED, test failures (cargo test exit $$rc), no valgrind findings"; exit $$rc; fi; \
	echo "check-memory: OK, no valgrind findings"

# The proof that check-memory can fail: with the leak canary it must fail,
# and because of a definitely-lost block from module frames. One suite is
# enough (every server start loads the module and leaks).
check-memory-canary:
	@if $(MAKE) --no-print-directory check-memory CANARY=1 \
		MEMCHECK_FILTER=locks::contract::acquire:: > $(MEMCHECK_DIR)-canary.log 2>&1; then \
		cat $(MEMCHECK_DIR)-canary.log; \
		echo "check-memory-canary: FAILED, check-memory passed although the module leaks"; exit 1; \
	fi; \
	if ! grep -q "are definitely lost" $(MEMCHECK_REPORT) || ! grep -qE "libdlock|dlock::" $(MEMCHECK_REPORT); then \
		cat $(MEMCHECK_DIR)-canary.log; \
		echo "check-memory-canary: FAILED, check-memory failed but not on the canary leak"; exit 1; \
	fi; \
	grep -m1 -B3 -A6 "are definitely lost" $(MEMCHECK_REPORT); \
	echo "check-memory-canary: OK, check-memory failed on the canary leak ($$(grep -c 'are definitely lost' $(MEMCHECK_REPORT)) report(s)); full log: $(MEMCHECK_DIR)-canary.log"

# --- The history checker (docs/history.md): a seeded workload over every
# kind of lock against real servers while faults are injected, its history
# recorded (HISTORY_OUT, JSON lines) and checked. Exit 1 on any violation
# or coverage gap, 2 on a usage error or a run that broke down.
#   make check-history                         60 s, random seed (printed)
#   make check-history HISTORY_SECS=1800 HISTORY_SEED=42 HISTORY_CLIENTS=16
#   make check-history HISTORY_BROKEN=fence    a planted bug: must fail
#     (fence, release, set, quarantine, fifo, observe, session, guard, priority,
#     permits, or 1 for all; into target/broken/release/)
#   make check-history HISTORY_WORKLOAD=election   one workload (locks,
#     election, sessions, guard, priority, handover, permits; default all)
#   target/release/check-history check FILE    re-check a saved history
HISTORY_SECS ?= 60
HISTORY_SEED ?=
HISTORY_CLIENTS ?= 16
HISTORY_OUT ?= target/history/history.jsonl
HISTORY_BROKEN ?=
HISTORY_WORKLOAD ?=
PLANTED_fence := planted-fence-reuse
PLANTED_release := planted-release-any
PLANTED_set := planted-set-partial
PLANTED_quarantine := planted-no-quarantine
PLANTED_fifo := planted-fifo-newest
PLANTED_observe := planted-observe-miss
PLANTED_session := planted-session-leaves-hold
PLANTED_guard := planted-guard-skips-check
PLANTED_priority := planted-priority-no-aging
PLANTED_permits := planted-permits-as-one
PLANTED_1 := $(PLANTED_fence),$(PLANTED_release),$(PLANTED_set),$(PLANTED_quarantine),$(PLANTED_fifo),$(PLANTED_observe),$(PLANTED_session),$(PLANTED_guard),$(PLANTED_priority),$(PLANTED_permits)
PLANTED_all := $(PLANTED_1)
HISTORY_FEATURES = $(PLANTED_$(HISTORY_BROKEN))
HISTORY_MODULE = $(if $(HISTORY_BROKEN),$(CURDIR)/target/broken/release/libdlock.so,$(MODULE))

HISTORY_RUN = HISTORY_BROKEN="$(HISTORY_BROKEN)" DLOCK_MODULE=$(HISTORY_MODULE) \
	target/release/check-history run --secs $(HISTORY_SECS) --clients $(HISTORY_CLIENTS) \
	--out $(HISTORY_OUT) $(if $(HISTORY_SEED),--seed $(HISTORY_SEED)) \
	$(if $(HISTORY_WORKLOAD),--workload $(HISTORY_WORKLOAD))

# The module with the planted bugs HISTORY_BROKEN names (nothing without it),
# in target/broken/release/. Built in target/ itself, where the dependencies
# are compiled already (a target directory of its own compiles them all
# again: minutes of CI), then copied; target/release/libdlock.so is built
# back without the bugs at once (cargo recompiles the module alone).
history-module: build
	@if [ -n "$(HISTORY_BROKEN)" ]; then \
		[ -n "$(HISTORY_FEATURES)" ] || { echo "HISTORY_BROKEN: fence, release, set, quarantine, fifo, observe, session, guard, priority, permits or 1 (all), not $(HISTORY_BROKEN)"; exit 2; }; \
		mkdir -p target/broken/release; \
		$(CARGO) build --release -p dlock --features $(HISTORY_FEATURES) && \
			cp target/release/libdlock.so target/broken/release/libdlock.so; \
		built=$$?; \
		$(CARGO) build --release $(CLIENT_FEATURES) || exit 1; \
		exit $$built; \
	fi

check-history: history-module
	$(HISTORY_RUN)

# The proof that check-history can fail (CI runs it): with the planted bugs
# (all of them unless HISTORY_BROKEN names one) the run must end in
# violations: exit 1 and a non-zero count, not a pass and not a breakdown
# (exit 2).
check-history-can-fail: HISTORY_BROKEN := $(or $(HISTORY_BROKEN),1)
check-history-can-fail: HISTORY_OUT := target/history/broken.jsonl
check-history-can-fail: history-module
	@out=target/history/broken.log; mkdir -p target/history; \
	$(HISTORY_RUN) > $$out 2>&1; rc=$$?; \
	grep -A8 "^violations" $$out; tail -n 1 $$out; last=$$(tail -n 1 $$out); \
	case "$$rc:$$last" in \
	1:history:*" 0 violations"*) echo "check-history-can-fail: FAILED, exit 1 without violations ($$out)"; exit 1 ;; \
	1:history:*) echo "check-history-can-fail: OK, the planted bugs ($(HISTORY_BROKEN)) were caught; report in $$out" ;; \
	0:*) echo "check-history-can-fail: FAILED, the broken build passed ($$out)"; exit 1 ;; \
	*) tail -n 40 $$out; echo "check-history-can-fail: FAILED, the run broke down (exit $$rc)"; exit 1 ;; \
	esac

# --- Fuzzing (cargo-fuzz, libFuzzer + AddressSanitizer; needs nightly):
# fuzz/fuzz_targets/args.rs (command argument parsers) and decode.rs (the
# RDB value decoder, with an encode/decode round trip). fuzz/ is a separate
# workspace, so build/test/clippy at the root never touch it.
#   make fuzz                          each target for FUZZ_SECONDS
#   make fuzz FUZZ_TARGETS=decode FUZZ_SECONDS=600
# Crashes land in fuzz/artifacts/<target>/; replay with
#   cargo +nightly fuzz run <target> fuzz/artifacts/<target>/<crash-file>
FUZZ_TARGETS ?= args decode
FUZZ_SECONDS ?= 30

fuzz:
	@command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz --locked
	@for t in $(FUZZ_TARGETS); do \
		echo "fuzz: $$t for $(FUZZ_SECONDS) s"; \
		$(CARGO) +nightly fuzz run $$t -- -max_total_time=$(FUZZ_SECONDS) || exit 1; \
	done
