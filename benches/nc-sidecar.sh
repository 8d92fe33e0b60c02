#!/usr/bin/env bash
# benches/nc-sidecar.sh: the near cache core for core, as a sidecar.
# memcached (-t 1) alone on CPU 1 for its runs; memshift (threads = 1, near
# cache on) alone on CPU 1 for its runs, its 3 Redis shards on CPU 0 with
# the load generator (as if remote). Both key spaces are filled first, the
# near-cache memshift is warmed with 10 s of the load, then the load runs
# DUR s per run, alternated, ROUNDS rounds. Each run prints the server's own
# CPU per request (utime + stime of its process from /proc/<pid>/stat over
# the run, divided by the requests served), and for memshift the 3 shards'
# CPU per request too. Fixed loopback ports 17301-17303, 17401, 17502, 9133.
# Needs `cargo build --release -p memshift-proxy -p memshift-benches` first.
#
# Knobs (defaults: the issue 15 benchmark, zipf 0.99 over 100,000 keys,
# 90:10 get/set, 100 B values, 50 connections, no pipelining):
#   KEYS=100000 RATIO=90:10 DIST=zipf:0.99 CONNS=50 DUR=10 ROUNDS=3
#   NC_SETTINGS='admit_reads = 1\nmax_ttl_ms = 10000' ([near_cache] lines, separated
#   by \n as in compare.sh's knob of that name, or by ';')
#   NICE=-20: run everything in a session of its own at that autogroup nice
#   level (see benches/hop.sh), so other work on the box barely delays it.
# KEYS=1000 RATIO=100:0 DIST=uniform measures a hit against a memcached
# request: every read after the warm-up is a near-cache hit.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ -n "${NICE:-}" ] && [ -z "${MEMSHIFT_BENCH_SESSION:-}" ]; then
    MEMSHIFT_BENCH_SESSION=1 exec setsid -w "$0" "$@"
fi
[ -z "${NICE:-}" ] || echo "$NICE" >/proc/self/autogroup 2>/dev/null || true
KEYS=${KEYS:-100000} RATIO=${RATIO:-90:10} DIST=${DIST:-zipf:0.99} CONNS=${CONNS:-50}
DUR=${DUR:-10} ROUNDS=${ROUNDS:-3} NC_SETTINGS=${NC_SETTINGS:-"admit_reads = 1\nmax_ttl_ms = 10000"}
B=$PWD/target/release; L=$B/memshift-load; W=$(mktemp -d)
# Stop this script's servers (and a previous run's), and wait until their
# ports are free again.
stop() {
  local pat="redis-server 127.0.0.1:1730|memcached -p 17401|memshift --config /tmp/tmp\..*/memshift.toml"
  pkill -f "$pat"
  for _ in $(seq 50); do pgrep -f "$pat" >/dev/null || return 0; sleep 0.1; done
}
stop
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
$(printf '%b\n' "$NC_SETTINGS" | tr ';' '\n')
T
taskset -c 1 $B/memshift --config $W/memshift.toml >$W/memshift.log 2>&1 &
sleep 1
pid_mc=$(pgrep -f "memcached -p 17401"); pid_ms=$(pgrep -f "memshift --config $W")
if [ -z "$pid_ms" ] || [ -z "$pid_mc" ]; then
  echo "nc-sidecar.sh: memshift or memcached did not start:" >&2; cat "$W/memshift.log" >&2; exit 1
fi
pids_redis=$(pgrep -f "redis-server 127.0.0.1:1730" | tr '\n' ' ')
# CPU ticks (utime + stime) of the given processes.
ticks() { local s=0 p; for p in "$@"; do read -r -a f </proc/"$p"/stat; s=$((s + f[13] + f[14])); done; echo $s; }
Z="--keys $KEYS --ratio $RATIO --value-size 100 --conns $CONNS --dist $DIST --pipeline 1"
taskset -c 0 $L --addr 127.0.0.1:17401 --keys $KEYS --value-size 100 --warmup --duration 1 --ratio 100:0 >/dev/null
taskset -c 0 $L --addr 127.0.0.1:17502 --keys $KEYS --value-size 100 --warmup --duration 1 --ratio 100:0 >/dev/null
taskset -c 0 $L --addr 127.0.0.1:17502 $Z --duration 10 >/dev/null   # near-cache warm-up (compare.sh NC_WARM does the same)
hz=$(getconf CLK_TCK)
for r in $(seq 1 "$ROUNDS"); do
  for a in 17401 17502; do
    if [ $a = 17401 ]; then name=memcached; p=$pid_mc; else name=memshift+nc; p=$pid_ms; fi
    t0=$(ticks $p); r0=$(ticks $pids_redis)
    out=$(taskset -c 0 $L --addr 127.0.0.1:$a $Z --duration "$DUR")
    t1=$(ticks $p); r1=$(ticks $pids_redis)
    n=$(echo "$out" | awk '/^run/{print $4}')
    ops=$(echo "$out" | awk '/^run/{print $6}')
    p50=$(echo "$out" | awk '/^lat/{print $3}')
    extra=""
    [ $a = 17502 ] && extra=$(awk -v t=$((r1 - r0)) -v n="$n" -v hz="$hz" 'BEGIN{printf ", shards %.1f us/request", t * 1e6 / hz / n}')
    awk -v r="$r" -v name="$name" -v ops="$ops" -v p50="$p50" -v t=$((t1 - t0)) -v n="$n" -v hz="$hz" -v extra="$extra" \
      'BEGIN{printf "round %s %-11s %9s ops/s  p50 %7s us  server CPU %.1f us/request%s\n", r, name, ops, p50, t * 1e6 / hz / n, extra}'
  done
done
printf "stats\r\n" | nc -q1 127.0.0.1 17502 | grep -E "near_cache_(hits|misses|bytes|entries) "
