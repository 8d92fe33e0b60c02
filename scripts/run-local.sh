#!/usr/bin/env bash
# `make run`: 3 Redis shards (127.0.0.1:6379-6381) and the legacy memcached
# (127.0.0.1:21211) with data under a temp dir, then memshift in the
# foreground with config/local.toml. Ctrl-C stops everything it started.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

# CLUSTER=1: a local Redis Cluster instead of standalone shards.
[ "${CLUSTER:-0}" = 1 ] && exec ./scripts/run-local-cluster.sh
# SENTINEL=1: Sentinel-managed shards (a primary and a replica each).
[ "${SENTINEL:-0}" = 1 ] && exec ./scripts/run-local-sentinel.sh

CONFIG=${MEMSHIFT_CONFIG:-config/local.toml}
REDIS_PORTS=(6379 6380 6381)
MEMCACHED_PORT=21211
export PATH="$HOME/.cargo/bin:$PATH"

installed=()
command -v redis-server >/dev/null 2>&1 || installed+=(redis-server)
command -v memcached >/dev/null 2>&1 || installed+=(memcached)
if [ "${#installed[@]}" -gt 0 ]; then
    apt_install "${installed[@]}"
    for pkg in "${installed[@]}"; do stop_packaged_service "$pkg"; done
fi
command -v cargo >/dev/null 2>&1 || die "cargo not found: install Rust (scripts/ensure-deps.sh does)"
[ -f "$CONFIG" ] || die "$CONFIG not found"

log "cargo build --release -p memshift-proxy"
cargo build --release -p memshift-proxy
bin=${CARGO_TARGET_DIR:-target}/release/memshift

for port in "${REDIS_PORTS[@]}" "$MEMCACHED_PORT" 11211 9121; do
    if port_in_use "$port"; then
        die "127.0.0.1:$port is already in use (a system redis-server/memcached service? e.g. sudo systemctl stop redis-server memcached)"
    fi
done

TMP=$(mktemp -d -t memshift-run.XXXXXX)
pids=()
cleanup() {
    trap - INT TERM EXIT
    local pid
    for pid in "${pids[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${pids[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$TMP"
    log "stopped; removed $TMP"
}
trap cleanup INT TERM EXIT

for port in "${REDIS_PORTS[@]}"; do
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
        --daemonize no --dir "$TMP" --dbfilename "dump-$port.rdb" \
        >"$TMP/redis-$port.log" 2>&1 &
    pids+=("$!")
done
mc_user=()
[ "$(id -u)" -eq 0 ] && mc_user=(-u root)
memcached -l 127.0.0.1 -p "$MEMCACHED_PORT" -U 0 "${mc_user[@]}" >"$TMP/memcached.log" 2>&1 &
pids+=("$!")

for port in "${REDIS_PORTS[@]}" "$MEMCACHED_PORT"; do
    wait_for_port "$port" 10 || die "nothing listens on 127.0.0.1:$port (logs in $TMP)"
done
log "redis shards on ${REDIS_PORTS[*]}, memcached on $MEMCACHED_PORT (data and logs in $TMP)"
log "memshift --config $CONFIG (Ctrl-C to stop everything)"
log "connect over TCP:         127.0.0.1:11211   (telnet 127.0.0.1 11211)"
if grep -q '"unix:/tmp/memshift.sock"' "$CONFIG"; then
    log "connect over unix socket: /tmp/memshift.sock (socat - UNIX-CONNECT:/tmp/memshift.sock; PHP addServer('/tmp/memshift.sock', 0); pymemcache Client('/tmp/memshift.sock'))"
fi
"$bin" --config "$CONFIG" &
pids+=("$!")
status=0
wait "$!" || status=$?
exit "$status"
