#!/usr/bin/env bash
# benches/ab.sh ROUNDS SYSTEM [SYSTEM...]: an A/B of builds (or of memshift
# against twemproxy / memcached / the floor) with benches/hop.sh, the way
# BENCHMARKS.md's alternated tables are made: ROUNDS rounds, each running
# every SYSTEM once in the order given, so a drift of the host (this VM's
# speed moves by tens of percent within an hour) hits every system alike;
# then each system's medians.
#
# SYSTEM: a memshift binary, or twemproxy, memcached or floor (hop.sh's
# SYSTEM=...); BINARY@LINE runs that binary with LINE added to its [server]
# table (hop.sh's SERVER_EXTRA), e.g. target/pgo/memshift@idle_timeout_ms=60000.
# Every other knob is hop.sh's, passed through the environment
# (NICE, NEAR, RATIO, LOAD_ARGS, SCHED, PERF_USER, THREADS, ...), plus RATE
# (default 0: closed loop) and DUR (default 5 s). NEAR=1 applies to memshift
# binaries only. Example, two builds and twemproxy, near-cache load:
#   NICE=-20 NEAR=1 LOAD_ARGS="--dist zipf:0.99" benches/ab.sh 3 /tmp/a /tmp/b
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[ $# -ge 2 ] || { sed -n '2,16p' "$0" >&2; exit 2; }
ROUNDS=$1
shift
OUT=$(mktemp /tmp/memshift-ab.XXXXXX)
trap 'rm -f "$OUT"' EXIT
for round in $(seq 1 "$ROUNDS"); do
    for system in "$@"; do
        case $system in
            twemproxy | memcached | floor) lines=$(NEAR=0 SYSTEM=$system benches/hop.sh x "${RATE:-0}" "${DUR:-5}" 2>&1) ;;
            *@*) lines=$(SERVER_EXTRA=${system#*@} benches/hop.sh "${system%%@*}" "${RATE:-0}" "${DUR:-5}" 2>&1) ;;
            *) lines=$(benches/hop.sh "$system" "${RATE:-0}" "${DUR:-5}" 2>&1) ;;
        esac
        rate=$(printf '%s\n' "$lines" | grep '^rate ' | tail -1) || {
            printf '%s\n' "$lines" >&2
            echo "ab.sh: no result from $system" >&2
            exit 1
        }
        echo "round $round $(date -u +%H:%M:%S) $system: $rate"
        printf '%s\n' "$lines" | grep '^  ' || true
        printf '%s\t%s\n' "$system" "$rate" >>"$OUT"
    done
done
echo "medians over $ROUNDS rounds (ops/s, p99 us, proxy CPU us/request):"
python3 - "$OUT" "$@" <<'PY'
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    system, rate = line.rstrip("\n").split("\t", 1)
    ops = re.search(r": ([0-9.]+) ops/s", rate)
    p99 = re.search(r"p99 ([0-9.]+) us", rate)
    cpu = re.search(r"CPU ([0-9.]+) us/request", rate)
    runs.setdefault(system, []).append(tuple(float(m.group(1)) if m else float("nan") for m in (ops, p99, cpu)))
first = None
for system in dict.fromkeys(sys.argv[2:]):
    med = [statistics.median(v[i] for v in runs[system]) for i in range(3)]
    first = first or med
    print(f"  {system}: {med[0]:,.0f} ops/s ({med[0] / first[0]:.2f}x), p99 {med[1]:,.0f}, CPU {med[2]:.2f} ({med[2] / first[2]:.2f}x)")
PY
