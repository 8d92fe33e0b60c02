# memshift entry points: `make run`, `make test`, `make bench`.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
# rustup installs cargo here; scripts/ensure-deps.sh may just have done so.
export PATH := $(HOME)/.cargo/bin:$(PATH)
.NOTPARALLEL:

CARGO ?= cargo

.PHONY: run run-tls test bench release deps

## run: install what is missing, start 3 Redis shards + memcached on loopback,
##      build and run memshift with config/local.toml (Ctrl-C stops everything);
##      CLUSTER=1 make run: a local 6-node Redis Cluster (3 masters, 3 replicas)
##      on 127.0.0.1:7000-7005 instead, memshift in mode = "cluster";
##      SENTINEL=1 make run: 3 Sentinel masters (primary + replica each) and
##      3 sentinels, memshift with [redis] sentinels (run-local-sentinel.sh)
run:
	./scripts/run-local.sh

## run-tls: like run, plus the memcached protocol over TLS 1.3 on
##          127.0.0.1:11212 with a throwaway CA and certificates generated into
##          a temp dir (MTLS=1 make run-tls: clients need a certificate too)
run-tls:
	./scripts/run-local-tls.sh

## test: install what is missing, then fmt, clippy, build (the integration
##       tests run target/debug/memshift) and the whole test suite
test: deps
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) build -p memshift-proxy
	$(CARGO) test --workspace

## release: the binary to ship and to benchmark: the release build made with
##          profile-guided optimization (scripts/pgo-build.sh: an instrumented
##          build, ≈ 1 minute of the benches' own loads over 3 local Redis
##          shards, then the optimized build) -> target/pgo/memshift
release:
	./scripts/pgo-build.sh

## bench: install what is missing (redis-server), then the criterion micro
##        benches and the end-to-end bench (3 Redis shards + memshift, built
##        in release by the bench); results in target/criterion/ (HTML report
##        and e2e-summary.json). benches/compare.sh: memcached/twemproxy/Redis.
bench: deps
	$(CARGO) bench --workspace

deps:
	./scripts/ensure-deps.sh
