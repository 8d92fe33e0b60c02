#!/usr/bin/env bash
# `SENTINEL=1 make run`: 3 Redis Sentinel masters s1..s3 (each a primary on
# 127.0.0.1:7100-7102 and a replica on 7110-7112) watched by 3 sentinels on
# 127.0.0.1:26379-26381 (quorum 2, down-after-milliseconds 1000), data under
# a temp dir, then memshift in the foreground with `[redis] sentinels` and
# `{ master = "sN" }` shards. Try a failover: `redis-cli -p 26379 sentinel
# failover s1`, or kill a primary. Ctrl-C stops everything it started.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

PRIMARIES=(7100 7101 7102)
REPLICAS=(7110 7111 7112)
SENTINELS=(26379 26380 26381)
export PATH="$HOME/.cargo/bin:$PATH"
# Sentinel is redis-server's `--sentinel` mode (Debian's redis-sentinel
# package only adds a service around the same binary).
command -v redis-server >/dev/null 2>&1 || { apt_install redis-server; stop_packaged_service redis-server; }
command -v redis-cli >/dev/null 2>&1 || die "redis-cli not found"

local_run_setup memshift-sentinel "${PRIMARIES[@]}" "${REPLICAS[@]}" "${SENTINELS[@]}" 11211 9121

start_redis() { # port [replicaof-port]
    local port=$1
    mkdir -p "$TMP/$port"
    local extra=()
    [ $# -gt 1 ] && extra=(--replicaof 127.0.0.1 "$2")
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
        --daemonize no --dir "$TMP/$port" "${extra[@]}" >"$TMP/redis-$port.log" 2>&1 &
    pids+=("$!")
}
for i in 0 1 2; do
    start_redis "${PRIMARIES[$i]}"
    start_redis "${REPLICAS[$i]}" "${PRIMARIES[$i]}"
done
for port in "${PRIMARIES[@]}" "${REPLICAS[@]}"; do
    wait_for_port "$port" 10 || die "nothing listens on 127.0.0.1:$port (logs in $TMP)"
done
for port in "${SENTINELS[@]}"; do
    mkdir -p "$TMP/$port"
    conf="$TMP/$port/sentinel.conf"
    { echo "port $port"; echo "bind 127.0.0.1"; echo "dir $TMP/$port"
      for i in 0 1 2; do
          m="s$((i + 1))"
          echo "sentinel monitor $m 127.0.0.1 ${PRIMARIES[$i]} 2"
          echo "sentinel down-after-milliseconds $m 1000"
          echo "sentinel failover-timeout $m 5000"
      done
    } >"$conf"
    redis-server "$conf" --sentinel >"$TMP/sentinel-$port.log" 2>&1 &
    pids+=("$!")
done
for port in "${SENTINELS[@]}"; do
    wait_for_port "$port" 10 || die "no sentinel on 127.0.0.1:$port (logs in $TMP)"
done
write_memshift_toml <<TOML
sentinels = ["127.0.0.1:26379", "127.0.0.1:26380", "127.0.0.1:26381"]
shards = [{ master = "s1" }, { master = "s2" }, { master = "s3" }]
TOML
log "masters s1..s3 on ${PRIMARIES[*]} (replicas ${REPLICAS[*]}), sentinels on ${SENTINELS[*]} (logs in $TMP)"
run_memshift_foreground
