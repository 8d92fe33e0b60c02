#!/usr/bin/env bash
# benches/hop.sh BINARY RATE [DUR]: memshift (server.threads =
# $THREADS, default 1) over 3 local redis-servers, pinned like compare.sh
# (servers on CPU 1, load on CPU 0); an open-loop 90/10 load at RATE
# requests/s over 50 connections for DUR seconds (default 5). Prints the
# latency, memshift's own CPU per request (/proc/<pid>/stat utime + stime;
# the user-space part, utime, in brackets: the kernel splits the two by
# sampling at its tick, so it is coarser than the total),
# with STRACE=1 a `strace -c -f` of memshift during the run (syscalls per
# request; it slows memshift a lot), with PERF=1 `perf stat` syscall
# (futex and write: tokio's cross-thread wake-ups), context-switch and
# migration counts per request. The profile behind docs/benchmarks-history.md
# "Issue 14".
# Knobs: SHARDS (default 3) Redis shards; BACKEND_CPU (default 1, the proxy's
# core) for the redis-servers; LOAD_CPU (default 0) for the load generator;
# PROXY_CPU (default 1) for memshift, a list
# such as 0,1 for THREADS=2 on both cores; RATE=0 runs closed loop at
# PIPELINE (default 1) requests per connection instead of open loop;
# NICE=-20 runs every process of the benchmark at that nice level, so other
# work on a shared machine barely delays it (CFS weights: -20 vs 0 is ~87:1).
# CONNS_PER_SHARD (default 0: memshift's auto, 1 with THREADS=1) sets redis.connections_per_shard.
# SYSTEM=twemproxy measures nutcracker -> one memcached (-t 1) instead, placed
# the same way (BIN is then ignored; the "memshift" figures are nutcracker's,
# the backend's are memcached's). SCHED=1 prints, per process group (proxy,
# backends), the run-queue wait per request and per wake-up from
# /proc/<pid>/task/*/schedstat (run_delay: time spent runnable but not
# running) and the CPU time per request.
# SYSTEM=floor measures memshift-floor (target/release/memshift-floor, or
# $FLOOR) over the same shards: one epoll loop with memshift's codecs, the
# floor of a hop (BENCHMARKS.md, "The floor of a hop"; BIN is ignored);
# FLOOR_ARGS adds flags to it (e.g. --coalesce-us 50).
# SYSTEM=memcached measures memcached -t 1 alone (the "memshift" figures are
# memcached's). NEAR=1 turns memshift's near cache on (admit_reads = 1,
# max_ttl_ms = 10000, as compare.sh). LOAD_ARGS adds flags to the measured
# run only, e.g. LOAD_ARGS="--shape event-loop --dist zipf:0.99"; RATIO (default
# 90:10) the get:set mix. UNIX=1 also has memshift listen on a unix socket
# and runs the measured load there (warm-up and prefill stay on TCP).
# RESP=1 also has memshift listen for Redis clients (server.resp_listen) and
# runs the measured load there with RESP GET/SET (--protocol redis; prefill
# and warm-up stay on the memcached port, over the same items).
# PERF_RECORD=FILE writes a `perf record` of the proxy during the run, with
# PERF_RECORD_ARGS (default -g; e.g. "--call-graph dwarf -e cpu-clock:u").
# SERVER_EXTRA adds lines to memshift's [server] table, e.g.
# SERVER_EXTRA="idle_timeout_ms = 60000" (one per line; not a key hop.sh sets).
# PERF_USER=1 counts the proxy's user-space CPU per request from `perf`
# samples (4 kHz, user space only): finer than utime's ticks, for A/Bs of
# user-space changes of a few percent.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# NICE: the kernel's autogroups share the CPU between sessions first and
# apply nice only inside one, so a nice level alone does nothing against
# other sessions' work: run in a session of our own and set its autogroup's
# nice level.
if [ -n "${NICE:-}" ] && [ -z "${MEMSHIFT_BENCH_SESSION:-}" ]; then
    MEMSHIFT_BENCH_SESSION=1 exec setsid -w "$0" "$@"
fi
[ -z "${NICE:-}" ] || echo "$NICE" >/proc/self/autogroup 2>/dev/null || true
BIN=$1 RATE=$2 DUR=${3:-5} THREADS=${THREADS:-1}
NI=(nice -n "${NICE:-0}")
SHARDS=${SHARDS:-3} BACKEND_CPU=${BACKEND_CPU:-1} PROXY_CPU=${PROXY_CPU:-1} PIPELINE=${PIPELINE:-1}
LOAD_CPU=${LOAD_CPU:-0}
LOAD=${LOAD:-target/release/memshift-load}
SYSTEM=${SYSTEM:-memshift}
[ "$SYSTEM" = twemproxy ] && SHARDS=1
[ "$SYSTEM" = memcached ] && SHARDS=0
W=$(mktemp -d /tmp/memshift-hop.XXXXXX)
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null; rm -rf "$W"' EXIT
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
# SHARDS + 1 free ports (another run's servers on them would answer our load).
while :; do
    base=$(( 20000 + RANDOM % 12000 ))
    taken=0
    for i in $(seq 0 $(( SHARDS + 2 ))); do port_in_use $(( base + i )) && taken=1; done
    [ "$taken" = 1 ] || break
done
list=
BACKEND_PIDS=()
if [ "$SYSTEM" = twemproxy ]; then
    root_flag=()
    [ "$(id -u)" -eq 0 ] && root_flag=(-u root)
    "${NI[@]}" taskset -c "$BACKEND_CPU" memcached -l 127.0.0.1 -p "$base" -U 0 -t 1 -m 1024 "${root_flag[@]}" &
    PIDS+=($!); BACKEND_PIDS+=($!)
    MP=$(( base + 1 ))
    nutcracker_config "$W/nutcracker.yml" "$MP" "$base"
    "${NI[@]}" taskset -c "$PROXY_CPU" nutcracker -c "$W/nutcracker.yml" -s $(( base + 2 )) -a 127.0.0.1 \
        -p "$W/nutcracker.pid" -o "$W/m.log" &
    MS=$!; PIDS+=($MS)
elif [ "$SYSTEM" = memcached ]; then
    root_flag=()
    [ "$(id -u)" -eq 0 ] && root_flag=(-u root)
    MP=$base
    "${NI[@]}" taskset -c "$PROXY_CPU" memcached -l 127.0.0.1 -p "$MP" -U 0 -t 1 -m 1024 "${root_flag[@]}" &
    MS=$!; PIDS+=($MS)
else
for i in $(seq 0 $(( SHARDS - 1 ))); do
    "${NI[@]}" taskset -c "$BACKEND_CPU" redis-server --port $(( base + i )) --bind 127.0.0.1 --save "" --appendonly no \
        --dir "$W" --dbfilename "d$i" >/dev/null 2>&1 &
    PIDS+=($!); BACKEND_PIDS+=($!)
    list+="${list:+, }\"127.0.0.1:$(( base + i ))\""
done
MP=$(( base + SHARDS ))
[ "${UNIX:-0}" = 1 ] && UNIX_LISTEN=", \"unix:$W/m.sock\""
RESP_ADDR=127.0.0.1:$(( base + SHARDS + 2 ))
RESP_LISTEN=
[ "${RESP:-0}" = 1 ] && RESP_LISTEN="resp_listen = \"$RESP_ADDR\""
ADMIN_LISTEN=
[ "${SCHED:-0}" = 1 ] && ADMIN_LISTEN="127.0.0.1:$(( base + SHARDS + 1 ))"
cat >"$W/m.toml" <<T
[server]
listen = ["127.0.0.1:$MP"${UNIX_LISTEN:-}]
threads = $THREADS
$RESP_LISTEN
${SERVER_EXTRA:-}
[log]
level = "warn"
[admin]
listen = "$ADMIN_LISTEN"
[redis]
shards = [$list]
connections_per_shard = ${CONNS_PER_SHARD:-0}
[migration]
phase = "redis"
T
[ "${NEAR:-0}" = 1 ] && printf '\n[near_cache]\nenabled = true\nadmit_reads = 1\nmax_ttl_ms = 10000\n' >>"$W/m.toml"
if [ "$SYSTEM" = floor ]; then
    for i in $(seq 0 $(( SHARDS - 1 ))); do wait_for_port $(( base + i )) 15; done
    floor_args=()
    for i in $(seq 0 $(( SHARDS - 1 ))); do floor_args+=(--shard "127.0.0.1:$(( base + i ))"); done
    "${NI[@]}" taskset -c "$PROXY_CPU" "${FLOOR:-target/release/memshift-floor}" --listen "127.0.0.1:$MP" \
        "${floor_args[@]}" ${FLOOR_ARGS:-} >"$W/m.log" 2>&1 &
else
    "${NI[@]}" taskset -c "$PROXY_CPU" "$BIN" --config "$W/m.toml" >"$W/m.log" 2>&1 &
fi
MS=$!; PIDS+=($MS)
fi
for i in $(seq 0 "$SHARDS"); do wait_for_port $(( base + i )) 15 || { cat "$W/m.log" >&2; exit 1; }; done
A=127.0.0.1:$MP
"${NI[@]}" taskset -c "$LOAD_CPU" "$LOAD" --addr "$A" --warmup --requests 0 --keys 100000 --value-size 100 --conns 16 >/dev/null 2>&1
# The near cache starts cold: one unmeasured run of the measured load first.
[ "${NEAR:-0}" = 1 ] && "${NI[@]}" taskset -c "$LOAD_CPU" "$LOAD" --addr "$A" --conns 50 --ratio ${RATIO:-90:10} --keys 100000 \
    --value-size 100 --duration 3 --pipeline 1 ${LOAD_ARGS:-} --json >/dev/null
ticks() { awk '{print $14 + $15}' "/proc/$MS/stat"; }
uticks() { awk '{print $14}' "/proc/$MS/stat"; }
# Voluntary context switches of every memshift thread: each is a worker
# parking in epoll_wait with nothing to run (then woken by the next event).
parks() { cat /proc/"$MS"/task/*/status | awk '/^voluntary_ctxt/ {s += $2} END {print s}'; }
# schedstat PIDS...: summed over every thread, "run_ns wait_ns timeslices"
# (wait = runnable but not running: run-queue delay).
# (%.0f, not %d: Debian's mawk clamps %d at 2^31 - 1, 2.1 s of nanoseconds.)
schedstat() { [ $# -gt 0 ] || { echo 0 0 0; return; }; for p in "$@"; do cat /proc/"$p"/task/*/schedstat; done | awk '{r += $1; w += $2; n += $3} END {printf "%.0f %.0f %.0f\n", r, w, n}'; }
# memshift's own view of a request (read to reply rendered): its duration
# histogram for get, as cumulative bucket counts.
durations() {
    [ -n "${ADMIN_LISTEN:-}" ] || return 0
    curl -s "http://$ADMIN_LISTEN/metrics" | awk '/^memshift_request_duration_seconds_bucket\{command="get"/ {print}' >"$1"
}
# The near cache's counters (NEAR=1): hits misses coalesced invalidations.
nc_stats() {
    [ "${NEAR:-0}" = 1 ] || return 0
    near_cache_stats_lines "$MP" | awk '{v[$1] = $2} END {printf "%.0f %.0f %.0f %.0f\n", v["hits"], v["misses"], v["coalesced"], v["invalidations"]}'
}
n0=$(nc_stats)
s0=$(schedstat "$MS"); b0=$(schedstat "${BACKEND_PIDS[@]}"); durations "$W/d0"
cpuline() { awk -v c="cpu${PROXY_CPU%%,*}" '$1 == c {print $2 + $3, $4, $7 + $8, $5 + $6, $9}' /proc/stat; }
c0=$(cpuline)
t0=$(ticks); u0=$(uticks); v0=$(parks)
if [ "${STRACE:-0}" = 1 ]; then
    strace -c -f -p "$MS" -o "$W/strace.txt" &
    SP=$!; sleep 0.5
elif [ "${PERF:-0}" = 1 ]; then
    # epoll_wait with timeout 0: the worker polling the I/O driver without
    # parking (tokio's yield_now defers a task until such a poll).
    # futex and eventfd writes (tokio's cross-thread wake-ups), and
    # migrations: what THREADS > 1 shares between worker threads.
    perf stat -e raw_syscalls:sys_enter,context-switches,cpu-migrations,task-clock \
        -e syscalls:sys_enter_epoll_wait -e syscalls:sys_enter_epoll_wait --filter 'timeout == 0' \
        -e syscalls:sys_enter_sendto,syscalls:sys_enter_recvfrom,syscalls:sys_enter_futex,syscalls:sys_enter_write \
        -p "$MS" -o "$W/perf.txt" &
    SP=$!; sleep 0.5
elif [ -n "${PERF_RECORD:-}" ]; then
    # shellcheck disable=SC2086 # the knob is a list of flags
    perf record ${PERF_RECORD_ARGS:--g} -p "$MS" -o "$PERF_RECORD" >/dev/null 2>&1 &
    SP=$!; sleep 0.5
elif [ "${PERF_USER:-0}" = 1 ]; then
    perf record -F 4000 -e cpu-clock:u -p "$MS" -o "$W/user.data" >/dev/null 2>&1 &
    SP=$!; sleep 0.5
fi
mode=(--rate "$RATE")
[ "$RATE" = 0 ] && mode=(--pipeline "$PIPELINE")
MA=$A
[ "${UNIX:-0}" = 1 ] && MA=unix:$W/m.sock
PROTO=()
[ "${RESP:-0}" = 1 ] && { MA=$RESP_ADDR; PROTO=(--protocol redis); }
out=$("${NI[@]}" taskset -c "$LOAD_CPU" "$LOAD" --addr "$MA" --conns 50 --ratio ${RATIO:-90:10} --keys 100000 --value-size 100 \
    --duration "$DUR" "${mode[@]}" "${PROTO[@]}" ${LOAD_ARGS:-} --json)
t1=$(ticks); u1=$(uticks); v1=$(parks)
s1=$(schedstat "$MS"); b1=$(schedstat "${BACKEND_PIDS[@]}"); durations "$W/d1"; c1=$(cpuline)
if [ "${STRACE:-0}" = 1 ] || [ "${PERF:-0}" = 1 ] || [ -n "${PERF_RECORD:-}" ] || [ "${PERF_USER:-0}" = 1 ]; then kill -INT "$SP"; wait "$SP" 2>/dev/null || true; fi
printf '%s' "$out" | python3 -c '
import json, sys
r = json.load(sys.stdin); l = r["latency_us"]; n = r["requests"]
cpu = (int(sys.argv[2]) - int(sys.argv[1])) / 100.0
user = (int(sys.argv[7]) - int(sys.argv[6])) / 100.0
print("rate %s: %.0f ops/s p50 %.1f p90 %.1f p99 %.1f us, errors %d, memshift CPU %.2f us/request (user %.2f), %.2f thread parks/request (load %s)" % (
    sys.argv[3], r["ops_per_sec"], l["p50"], l["p90"], l["p99"], r["errors"]["total"], 1e6 * cpu / max(n, 1),
    1e6 * user / max(n, 1), (int(sys.argv[5]) - int(sys.argv[4])) / max(n, 1), open("/proc/loadavg").read().split()[0]))
if r["errors"]["total"]:
    print("  errors:", json.dumps(r["errors"]))
' "$t0" "$t1" "$RATE" "$v0" "$v1" "$u0" "$u1"
if [ "${PERF_USER:-0}" = 1 ]; then
    n=$(printf '%s' "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["requests"])')
    ns=$(perf report -i "$W/user.data" --stdio 2>/dev/null | awk '/Event count/ && !seen++ {print $NF}')
    awk -v ns="${ns:-0}" -v n="$n" 'BEGIN { printf "  user space from perf samples: %.3f us/request (perf slows the run)\n", ns / 1e3 / (n > 0 ? n : 1) }'
fi
if [ "${NEAR:-0}" = 1 ]; then
    n1=$(nc_stats)
    python3 - "$n0" "$n1" <<'PY'
import sys
d = [int(b) - int(a) for a, b in zip(sys.argv[1].split(), sys.argv[2].split())]
gets = max(d[0] + d[1], 1)
print("  near cache: %d hits, %d misses (%.1f %% of its lookups), %d coalesced, %d key invalidations" % (d[0], d[1], 100.0 * d[1] / gets, d[2], d[3]))
PY
fi
if [ "${SCHED:-0}" = 1 ]; then
    n=$(printf '%s' "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["requests"])')
    python3 - "$n" "$SYSTEM" "$s0" "$s1" "$b0" "$b1" "$c0" "$c1" <<'PY'
import sys
c = [int(y) - int(x) for x, y in zip(sys.argv[7].split(), sys.argv[8].split())]
print("  proxy's core: user %.0f%% system %.0f%% irq+softirq %.0f%% idle %.0f%% steal %.0f%%" % tuple(100.0 * v / max(sum(c), 1) for v in c))
n = max(int(sys.argv[1]), 1)
def delta(a, b):
    return [int(y) - int(x) for x, y in zip(a.split(), b.split())]
for name, a, b in (("proxy (%s)" % sys.argv[2], sys.argv[3], sys.argv[4]), ("backends", sys.argv[5], sys.argv[6])):
    run, wait, slices = delta(a, b)
    print("  %-20s CPU %5.1f us/req, run-queue wait %6.1f us/req, %.2f wake-ups/req, %6.1f us wait per wake-up" % (
        name, run / 1e3 / n, wait / 1e3 / n, slices / n, wait / 1e3 / max(slices, 1)))
PY
    if [ -s "$W/d1" ]; then
        # Fraction of gets that memshift answered within each bucket bound.
        paste "$W/d0" "$W/d1" | awk '{ split($1, a, "le=\""); split(a[2], b, "\""); d[NR] = $4 - $2; le[NR] = b[1] }
            END { printf "  memshift-internal get latency (read to reply rendered), share within:"
                  for (i = 1; i <= NR; i++) if (le[i] + 0 <= 0.005 && le[i] != "+Inf") printf " %gus %.0f%%", le[i] * 1e6, 100 * d[i] / d[NR]
                  print "" }'
    fi
fi
if [ "${STRACE:-0}" = 1 ]; then
    n=$(printf '%s' "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["requests"])')
    python3 - "$W/strace.txt" "$n" <<'PY'
import sys
n = int(sys.argv[2])
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) >= 5 and f[3].isdigit() and not line.startswith("---"):
        print("  %-14s %7.3f per request" % (f[-1], int(f[3]) / n))
PY
elif [ "${PERF:-0}" = 1 ]; then
    n=$(printf '%s' "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["requests"])')
    # The second epoll_wait line is the filtered one (timeout 0).
    awk -v n="$n" '$2 ~ /raw_syscalls|context-switches|cpu-migrations|sys_enter_/ {
        gsub(",", "", $1); name = $2; sub("syscalls:sys_enter_", "", name)
        if (name == "epoll_wait" && seen++) name = "epoll_wait(timeout 0)"
        printf "  %-28s %7.3f per request\n", name, $1 / n}' "$W/perf.txt"
fi
