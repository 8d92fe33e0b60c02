#!/usr/bin/env bash
# `CLUSTER=1 make run`: a 6-node Redis Cluster (3 masters, 3 replicas) on
# 127.0.0.1:7000-7005 with data under a temp dir, then memshift in the
# foreground in `mode = "cluster"`. Ctrl-C stops everything it started.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

PORTS=(7000 7001 7002 7003 7004 7005)
export PATH="$HOME/.cargo/bin:$PATH"
command -v redis-server >/dev/null 2>&1 || { apt_install redis-server; stop_packaged_service redis-server; }
command -v redis-cli >/dev/null 2>&1 || die "redis-cli not found"

local_run_setup memshift-cluster "${PORTS[@]}" 11211 9121

addrs=()
for port in "${PORTS[@]}"; do
    mkdir -p "$TMP/$port"
    redis-server --port "$port" --bind 127.0.0.1 --cluster-enabled yes \
        --cluster-config-file nodes.conf --save '' --appendonly no \
        --daemonize no --dir "$TMP/$port" >"$TMP/redis-$port.log" 2>&1 &
    pids+=("$!")
    addrs+=("127.0.0.1:$port")
done
for port in "${PORTS[@]}"; do
    wait_for_port "$port" 10 || die "nothing listens on 127.0.0.1:$port (logs in $TMP)"
done
redis-cli --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes >"$TMP/create.log"
for port in "${PORTS[@]}"; do
    for _ in $(seq 100); do
        redis-cli -p "$port" cluster info | grep -q 'cluster_state:ok' && break
        sleep 0.2
    done
done
write_memshift_toml <<TOML
mode = "cluster"
cluster_nodes = ["127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"]
TOML
log "redis cluster on ${PORTS[*]} (data and logs in $TMP)"
run_memshift_foreground
