#!/usr/bin/env bash
# benches/nc-sidecar.sh: the near cache core for core, as a sidecar.
# memcached (-t 1) alone on CPU 1 for its runs; memshift (threads = 1, near
# cache on with admit_reads = 1, max_ttl_ms = 10000) alone on CPU 1 for its
# runs, its 3 Redis shards on CPU 0 with the load generator (as if remote).
# Both key spaces are filled first, the near-cache memshift is warmed with
# 10 s of the load, then zipf 0.99 / 90:10 / 100 B / 50 connections / no
# pipelining, 10 s per run, alternated, 3 rounds. Fixed loopback ports
# 17301-17303, 17401, 17502, 9133. Needs `cargo build --release -p
# memshift-proxy -p memshift-benches` first.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
B=$PWD/target/release; L=$B/memshift-load; W=$(mktemp -d)
stop() { pkill -f "redis-server 127.0.0.1:1730"; pkill -f "memcached -p 17401"; pkill -f "memshift --config $W"; }
trap stop EXIT
for p in 17301 17302 17303; do taskset -c 0 redis-server --bind 127.0.0.1 --port $p --save '' --appendonly no --daemonize yes --logfile $W/r$p.log; done
taskset -c 1 memcached -p 17401 -U 0 -t 1 -u root -l 127.0.0.1 -m 1024 -d
cat > $W/memshift.toml <<T
[server]
listen = "127.0.0.1:17502"
threads = 1
[admin]
listen = "127.0.0.1:9133"
[redis]
shards = ["127.0.0.1:17301","127.0.0.1:17302","127.0.0.1:17303"]
[near_cache]
enabled = true
admit_reads = 1
max_ttl_ms = 10000
T
taskset -c 1 $B/memshift --config $W/memshift.toml >$W/memshift.log 2>&1 &
sleep 1
Z="--keys 100000 --ratio 90:10 --value-size 100 --conns 50 --dist zipf:0.99 --pipeline 1"
taskset -c 0 $L --addr 127.0.0.1:17401 --keys 100000 --value-size 100 --warmup --duration 1 --ratio 100:0 >/dev/null
taskset -c 0 $L --addr 127.0.0.1:17502 --keys 100000 --value-size 100 --warmup --duration 1 --ratio 100:0 >/dev/null
taskset -c 0 $L --addr 127.0.0.1:17502 $Z --duration 10 >/dev/null   # near-cache warm-up (compare.sh NC_WARM does the same)
for r in 1 2 3; do
  for a in 17401 17502; do echo "round $r $a (load $(cut -d' ' -f1 /proc/loadavg))"; taskset -c 0 $L --addr 127.0.0.1:$a $Z --duration 10 | grep -E "^run|^lat"; done
done
printf "stats\r\n" | nc -q1 127.0.0.1 17502 | grep near_cache
