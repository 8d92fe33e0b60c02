#!/usr/bin/env bash
# scripts/pgo-build.sh: the profile-guided release build of memshift, the
# binary `make release` ships and BENCHMARKS.md measures:
# target/pgo/memshift.
#
# Why: after the session loop, the driver and the request queue were built,
# memshift's user-space time per request was flat (≈ 20 parts of ≤ 5 %
# each, BENCHMARKS.md "Session driver: a table"), which is the profile
# profile-guided optimization helps most: the compiler lays out and inlines
# the request path by how often each branch runs. Measured against the
# plain release build: ≈ 25 % less user-space CPU per request and 10–20 %
# less proxy CPU (BENCHMARKS.md, "Profile-guided build").
#
# How (the rustc book's "Profile-guided Optimization" chapter, three steps;
# hand-written rather than `cargo pgo` so that no extra tool is installed):
#   1. build memshift instrumented (-Cprofile-generate) into
#      target/pgo/instrumented;
#   2. run it under the benches' own loads (benches/hop.sh: 3 local
#      redis-servers, memshift-load; text, binary and RESP fronts, task per
#      connection and event loop, pipelined, open loop, the near cache), each
#      a few seconds; every exit writes a .profraw;
#   3. merge them with the toolchain's own llvm-profdata (rustup's
#      llvm-tools component, installed here if missing: it must be the
#      LLVM rustc uses) and build with -Cprofile-use into
#      target/pgo/optimized; the binary is copied to target/pgo/memshift.
# The profile is made fresh from the sources being built, never committed:
# a stale one would silently optimize for code that changed.
#
# Needs what benches/hop.sh needs (redis-server, python3, taskset); takes
# two release builds plus ≈ 1 minute of training. PGO_TRAIN_SECS (default 3)
# sets each training run's length. RUSTFLAGS from the environment are kept.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
export PATH="$HOME/.cargo/bin:$PATH"

ROOT=$PWD
PGO=$ROOT/target/pgo
RAW=$PGO/raw
TRAIN_SECS=${PGO_TRAIN_SECS:-3}

if ! command -v redis-server >/dev/null 2>&1; then
    apt_install redis-server
    stop_packaged_service redis-server
fi
command -v taskset >/dev/null 2>&1 || apt_install util-linux
command -v python3 >/dev/null 2>&1 || apt_install python3
# hop.sh pins memshift and its shards to CPU 1, the load to CPU 0; a
# builder (a container, say) may be allowed other CPUs, or only one: the
# first two it may use, or its only one for all.
read -r -a cpus <<<"$(python3 -c 'import os; print(*sorted(os.sched_getaffinity(0)))')"
export LOAD_CPU=${cpus[0]} PROXY_CPU=${cpus[1]:-${cpus[0]}} BACKEND_CPU=${cpus[1]:-${cpus[0]}}

host=$(rustc -vV | sed -n 's/^host: //p')
PROFDATA=$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata
if [ ! -x "$PROFDATA" ]; then
    command -v rustup >/dev/null 2>&1 \
        || die "no $PROFDATA and no rustup to install it: a profile-guided build needs the llvm-profdata of rustc's own LLVM (rustup component add llvm-tools)"
    log "installing rustup's llvm-tools (llvm-profdata of rustc's own LLVM)"
    rustup component add llvm-tools
fi
[ -x "$PROFDATA" ] || die "no llvm-profdata at $PROFDATA"

log "building memshift-load (release) and memshift instrumented for PGO"
cargo build --release -q --locked -p memshift-benches
RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-generate=$RAW" CARGO_TARGET_DIR=$PGO/instrumented \
    cargo build --release -q --locked -p memshift-proxy
# Emptied after the build: RUSTFLAGS instrument the build scripts and
# proc-macros too, and their runs during the build would write profiles of
# their own.
rm -rf "$RAW"
mkdir -p "$RAW"
INSTRUMENTED=$PGO/instrumented/release/memshift

# The training loads: what users run and what the benchmarks measure. Each
# line is the rate of one benches/hop.sh run (0: closed loop), then its
# environment.
trainings=(
    "0 LOAD_ARGS=--shape=per-conn"
    "0 LOAD_ARGS=--shape=event-loop"
    "0 PIPELINE=16"
    "0 LOAD_ARGS=--protocol=binary"
    "0 PIPELINE=16 LOAD_ARGS=--protocol=binary"
    "0 RESP=1"
    "0 RESP=1 PIPELINE=16"
    "0 NEAR=1 LOAD_ARGS=--dist=zipf:0.99"
    "0 NEAR=1 RESP=1 LOAD_ARGS=--dist=zipf:0.99"
    "0 UNIX=1"
    "20000"
)
for t in "${trainings[@]}"; do
    read -r -a words <<<"$t"
    rate=${words[0]}
    env_args=("${words[@]:1}")
    log "training: ${env_args[*]:-plain} at rate $rate"
    env "${env_args[@]}" benches/hop.sh "$INSTRUMENTED" "$rate" "$TRAIN_SECS" >/dev/null
done
ls "$RAW"/*.profraw >/dev/null 2>&1 || die "the training wrote no profile"
"$PROFDATA" merge -o "$PGO/memshift.profdata" "$RAW"

log "building memshift with the profile"
RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-use=$PGO/memshift.profdata" CARGO_TARGET_DIR=$PGO/optimized \
    cargo build --release -q --locked -p memshift-proxy
install -m 0755 "$PGO/optimized/release/memshift" "$PGO/memshift"
log "done: $PGO/memshift"
