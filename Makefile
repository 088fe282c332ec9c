# dlock: build, run and test the Redis module.
SHELL := /bin/bash
CARGO ?= cargo
MODULE := $(CURDIR)/target/release/libdlock.so
CONF := redis.conf.example
# Port for `make run`, taken from the example config.
RUN_PORT = $(shell awk '$$1 == "port" { print $$2; exit }' $(CONF) 2>/dev/null || true)
# sudo only when not already root.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: deps build run test bench fmt clippy clean

# Installs only what is missing; `apt-get update` runs once, only if needed.
deps:
	@pkgs=""; \
	command -v redis-server >/dev/null 2>&1 || pkgs="$$pkgs redis-server"; \
	command -v redis-cli >/dev/null 2>&1 || pkgs="$$pkgs redis-tools"; \
	dpkg -s libclang-dev >/dev/null 2>&1 || pkgs="$$pkgs libclang-dev"; \
	if [ -n "$$pkgs" ]; then \
		echo "installing:$$pkgs"; \
		$(SUDO) apt-get update && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y $$pkgs || exit 1; \
		case "$$pkgs" in *redis-server*) \
			echo "stopping the redis-server service the package may have started"; \
			$(SUDO) service redis-server stop >/dev/null 2>&1 || true;; \
		esac; \
	fi
	@$(CARGO) fmt --version >/dev/null 2>&1 && $(CARGO) clippy --version >/dev/null 2>&1 \
		|| rustup component add rustfmt clippy

build: deps
	$(CARGO) build --release

run: build
	@echo "try: redis-cli -p $(or $(RUN_PORT),6380) DLOCK.ACQUIRE res tok 30000"
	exec redis-server $(CONF) --loadmodule $(MODULE)

# Integration tests load target/release/libdlock.so, hence the release build
# before `cargo test --release`.
test: deps
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets -- -D warnings
	$(CARGO) build --release
	$(CARGO) test --release

# A benchmark, not a test: prints Markdown tables (see README, Performance).
bench: build
	$(CARGO) bench --bench dlock

fmt:
	$(CARGO) fmt --all

clippy:
	$(CARGO) clippy --all-targets -- -D warnings

clean:
	$(CARGO) clean
