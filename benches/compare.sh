#!/usr/bin/env bash
# benches/compare.sh [--quick] [--profile]
#
# One run, one machine, the same load settings for every system:
#   memcached   memcached 1.6 directly
#   twemproxy   twemproxy (Debian nutcracker) -> that memcached
#   memshift    memshift -> 3 redis-server shards
#   redis       one redis-server directly: memshift-load speaking RESP, and
#               redis-benchmark (GET and SET, combined 90/10) for reference
#   memshift_binary  the same memshift spoken to in memcached's binary
#               protocol (closed-loop scenarios only, after the text ones)
#   memshift_unix  the same memshift over its unix socket (listen also
#               takes unix:/path), and memcached_unix: a second memcached
#               on its own `-s` socket, the fair comparison (UNIX_BENCH=0
#               skips both): closed loop (no pipelining, pipeline 16) and
#               the open-loop rate, after the TCP runs
#   floor       memshift-floor -> the same shards: one epoll loop with
#               memshift's parser, ring and item layout, no runtime (get and
#               set only), the floor of a hop; FLOOR=0 skips it. Its own
#               block after the open-loop runs: the two closed-loop shapes
#               without pipelining and the open-loop rate, alternated with
#               memshift and twemproxy (scenarios fl-np, fl-el-np, fl-rate50)
#   memshift RESP  redis-benchmark GET, SET and a 10-key MGET (-P 1 and -P 16)
#               through memshift's RESP port vs Redis direct (RESP=0 skips it;
#               RESP_N requests per run)
# Scenarios: 90% get / 10% set, 100-byte values, 100,000 uniform keys,
# 50 connections, without pipelining and with pipeline depth 16; latency in
# open loop at 50% of memshift's max throughput; memory per idle client
# connection (10,000 idle connections); a 100-key multi-get; and (full runs)
# the largest idle-connection count the fd limit allows with a 50-connection
# load running. Scenario "cluster": memshift -> a 3-master Redis Cluster vs
# memshift -> the 3 shards, back to back per round (CLUSTER_BENCH=0 skips it).
#
# Near cache (its own block): zipf 0.99 over the same 100,000 keys, 90/10,
# 100 B, 50 connections, no pipelining: memcached direct vs memshift vs a
# second memshift over the same shards with `[near_cache] enabled = true`
# (and NC_SETTINGS, default the settings docs/near-cache.md recommends for
# a hot-key workload); its hit ratio and bytes held come from its `stats`
# lines. Before each of its runs the near-cache memshift gets one
# unmeasured run of the same load (NC_WARM seconds, default DUR):
# memcached and the shards are prefilled, so its cache starts warm too.
#
# Load shapes: every closed-loop 90/10 scenario (and the near cache's) runs
# twice, with memshift-load's task per connection (scenarios np, p16,
# zipf-nc) and with one event loop over all connections (`--shape
# event-loop`: el-np, el-p16, zipf-nc-el), whose requests reach the server in
# bursts as node's, Go's or async Python's do. SHAPES="per-conn" skips the
# event-loop runs.
#
# Latency vs load: each of memcached, twemproxy, memshift and Redis in open
# loop at CURVE_STEPS percent (default "10 20 30 40 50 60 70 80 90") of its
# own closed-loop maximum (its median no-pipelining ops/s), CURVE_DUR
# seconds per step (default DUR), one round, the systems alternated at each
# step: p50 / p99 / p99.9 per step (scenarios curve10 .. curve90).
# CURVE_STEPS="" skips it.
#
# Plots: gnuplot (Debian gnuplot-nox, installed when missing) draws one
# throughput bar chart per scenario and the latency-vs-load curves into the
# run's directory as PNG (benches/compare_report.py); summary.md links them.
#
# Rounds: 3 (1 with --quick), medians. --quick takes under 3 minutes once
# the release binaries are built. --profile adds a `perf record -g` of
# memshift under the no-pipelining load (report in the output directory).
#
# CPU pinning (when the machine has >= 2 CPUs): every server process of the
# system under test on CPU $SUT_CPU (default 1), the load generator on
# CPU $LOAD_CPU (default 0), identically for every system. PIN=0 disables it.
# memshift runs with server.threads = $MEMSHIFT_THREADS (default 1),
# memcached with -t 1 (both get one core).
# SHARDS=N (default 3): memshift's Redis shard count. SHARDS=1 gives memshift
# the same process count as twemproxy (proxy + one backend).
# BACKEND_CPU=C: run the backends (memshift's shards, the memcached behind
# twemproxy, and so the two direct rows, memcached and Redis) on CPU C
# instead of $SUT_CPU; the proxies stay on $SUT_CPU. On a 2-CPU machine
# BACKEND_CPU=0 shares the load generator's core; "other" CPU is then
# counted over every core the run uses (the busy time of those cores not
# charged to the system's processes or the load generator).
# NICE=-20: every server and load generator runs at that nice level, so
# other work on a shared machine barely delays them (CFS weights -20 vs 0:
# ~87 to 1); the "other" CPU columns show what still ran beside them.
#
# Other work on the machine skews every number (a pinned server shares its
# core with whatever else runs there): each run records the CPU used by the
# system's processes, by the load generator, and by anything else on the
# server core. QUIET_LOAD=1.0 waits (up to 10 minutes per round) for the
# 1-minute load average to fall below 1.0 first.
#
# Everything listens on free loopback ports; every process is stopped on exit.
# Proxy CPU per request: in the open-loop runs, the CPU time (utime + stime
# from /proc/<pid>/stat) of the proxy process alone (memshift, nutcracker;
# not their backends) divided by the requests answered.
# Results: target/compare/<timestamp>/ (results.jsonl, summary.md, logs).
# Knobs (environment): ROUNDS, DUR (seconds per run), MEMSHIFT_THREADS,
# SUT_CPU, LOAD_CPU, BACKEND_CPU, SHARDS, NICE, PIN, QUIET_LOAD, RATE (open-loop
# requests/s; default 50% of memshift's closed-loop max), MEMSHIFT_BIN
# (binary to measure; default the profile-guided build `make release` makes,
# built first), PGO (0: build and measure the plain release build instead),
# CLUSTER_BENCH (1: run the cluster scenario, default;
# 0: skip it), SHAPES, CURVE_STEPS, CURVE_DUR, NC_WARM, RESP (0: skip the
# RESP block), RESP_N, UNIX_BENCH (1: the unix-socket rows, default; 0: skip
# them), FLOOR (1: the floor of a hop, default; 0: skip it).
# --summary DIR: print the summary of an earlier run again (and redraw its plots).
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
ROOT=$PWD
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
export PATH="$HOME/.cargo/bin:$PATH"

QUICK=0
PROFILE=0
SUMMARY_OF=
for arg in "$@"; do
    if [ "$SUMMARY_OF" = next ]; then SUMMARY_OF=$arg; continue; fi
    case $arg in
        --summary) SUMMARY_OF=next ;;
        --quick) QUICK=1 ;;
        --profile) PROFILE=1 ;;
        -h | --help) awk 'NR > 1 && !/^#/ {exit} NR > 1' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument $arg (see --help)" ;;
    esac
done

if [ "$QUICK" -eq 1 ]; then
    ROUNDS=${ROUNDS:-1}; DUR=${DUR:-5}
else
    ROUNDS=${ROUNDS:-3}; DUR=${DUR:-10}
fi
SHAPES=${SHAPES:-per-conn event-loop}
EVENT_LOOP=0
case " $SHAPES " in *" event-loop "*) EVENT_LOOP=1 ;; esac
CURVE_STEPS=${CURVE_STEPS-10 20 30 40 50 60 70 80 90}
CURVE_DUR=${CURVE_DUR:-$DUR}
CONNS=50
VALUE=100
KEYS=100000
RATIO=90:10
IDLE=10000
MEMSHIFT_THREADS=${MEMSHIFT_THREADS:-1}
SUT_CPU=${SUT_CPU:-1}
LOAD_CPU=${LOAD_CPU:-0}
PIN=${PIN:-1}
[ "$(nproc)" -ge 2 ] || PIN=0
SHARDS=${SHARDS:-3}
[ "$SHARDS" -ge 1 ] 2>/dev/null || die "SHARDS must be a number >= 1"
BACKEND_CPU=${BACKEND_CPU:-}

# summarize DIR ARGS: the tables and the goals, from DIR/results.jsonl.
summarize() {
    python3 - "$1/results.jsonl" "$1/machine.txt" "$2" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
machine, argv = open(sys.argv[2]).read(), sys.argv[3]
rate = int(next((r["report"]["rate"] for r in rows if r["scenario"] == "rate50"), 0) or 0)
fdlimit = next((l.split(":", 1)[1].strip() for l in machine.splitlines() if l.startswith("fd limit:")), "?")
shards = next((l.split(":", 1)[1].strip() for l in machine.splitlines() if l.startswith("shards:")), "3")
med = statistics.median

def get(system, scen, f=lambda r: r["ops_per_sec"]):
    v = [f(r["report"]) for r in rows if r["system"] == system and r["scenario"] == scen]
    return med(v) if v else None

def fmt(v, d=0):
    return "-" if v is None else f"{v:,.{d}f}"

def ratio(ms, x):
    return "-" if (ms is None or not x) else f"{ms / x:.2f}x"

names = {
    "memcached": "memcached direct",
    "twemproxy": "twemproxy -> memcached",
    "memshift": f"memshift -> {shards} Redis shard{'s' if shards != '1' else ''}",
    "redis": "Redis direct (memshift-load, RESP)",
    "redis-benchmark": "Redis direct (redis-benchmark)",
    "memshift_binary": "memshift, binary protocol",
    "memcached_unix": "memcached direct, unix socket (-s)",
    "memshift_unix": f"memshift -> {shards} Redis shard{'s' if shards != '1' else ''}, unix socket",
}
p99 = lambda r: r["latency_us"]["p99"]
out = []
out.append(f"memshift comparison (`benches/compare.sh{(' ' + argv) if argv else ''}`)\n")
out.append("```\n" + machine.strip() + "\n```\n")
out.append("Throughput, 90% get / 10% set, 100 B values, 100,000 uniform keys, 50 connections "
           "(median of the rounds; `memshift / x` = memshift's throughput divided by the row's):\n")
out.append("| system | ops/s, no pipelining | memshift / x | p99 us | ops/s, pipeline 16 | memshift / x | p99 us |")
out.append("|---|---:|---:|---:|---:|---:|---:|")
ms_np, ms_p = get("memshift", "np"), get("memshift", "p16")
for s in ["memcached", "twemproxy", "memshift", "redis", "redis-benchmark"]:
    np_, p16 = get(s, "np"), get(s, "p16")
    lat = s != "redis-benchmark"
    out.append(f"| {names[s]} | {fmt(np_)} | {ratio(ms_np, np_)} | {fmt(get(s, 'np', p99) if lat else None, 1)} "
               f"| {fmt(p16)} | {ratio(ms_p, p16)} | {fmt(get(s, 'p16', p99) if lat else None, 1)} |")
out.append("")
bin_np, bin_p = get("memshift_binary", "np"), get("memshift_binary", "p16")
if bin_np or bin_p:
    out.append("memshift spoken to in memcached's binary protocol vs its text protocol (same run, same shape; "
               "`binary / text` = binary throughput divided by text's):\n")
    out.append("| protocol | ops/s, no pipelining | binary / text | p99 us | ops/s, pipeline 16 | binary / text | p99 us |")
    out.append("|---|---:|---:|---:|---:|---:|---:|")
    for s, label in [("memshift", "text"), ("memshift_binary", "binary")]:
        np_, p16 = get(s, "np"), get(s, "p16")
        out.append(f"| {label} | {fmt(np_)} | {ratio(np_, ms_np)} | {fmt(get(s, 'np', p99), 1)} "
                   f"| {fmt(p16)} | {ratio(p16, ms_p)} | {fmt(get(s, 'p16', p99), 1)} |")
    out.append("")
out.append("CPU used during those runs, in cores (server side = every process of the system: "
           f"memshift + its {shards} shard(s), twemproxy + memcached; 1.00 = the pinned core is saturated):\n")
out.append("| system | server, no pipelining | load generator | other on the server core | server, pipeline 16 | load generator | other on the server core | steal % (np / p16) |")
out.append("|---|---:|---:|---:|---:|---:|---:|---:|")
sut = lambda r: r["sut_cpu"]
def cpu(system, scen, f):
    v = [f(r) for r in rows if r["system"] == system and r["scenario"] == scen and "sut_cpu" in r]
    v = [x for x in v if x is not None]
    return med(v) if v else None
lg = lambda r: r["report"].get("cpu_cores")
stl = lambda r: 100 * r.get("steal", 0.0)
for s in ["memcached", "twemproxy", "memshift", "redis", "redis-benchmark"]:
    oth = lambda r: r.get("other_cpu")
    out.append(f"| {names[s]} | {fmt(cpu(s, 'np', sut), 2)} | {fmt(cpu(s, 'np', lg) if s != 'redis-benchmark' else None, 2)} "
               f"| {fmt(cpu(s, 'np', oth) if s != 'redis-benchmark' else None, 2)} "
               f"| {fmt(cpu(s, 'p16', sut), 2)} | {fmt(cpu(s, 'p16', lg) if s != 'redis-benchmark' else None, 2)} "
               f"| {fmt(cpu(s, 'p16', oth) if s != 'redis-benchmark' else None, 2)} "
               f"| {fmt(cpu(s, 'np', stl) if s != 'redis-benchmark' else None, 1)} / {fmt(cpu(s, 'p16', stl) if s != 'redis-benchmark' else None, 1)} |")
out.append("")
out.append(f"Open loop at {rate:,} req/s, latency from the intended send time; proxy CPU = CPU time of "
           "the proxy process alone (memshift, nutcracker; for the direct rows the server) per request; "
           "server CPU = every process of the system (proxy + backends), in cores: near 1.00 (when pinned "
           "to one core) the core is saturated and latency is queueing:\n")
out.append("| system | achieved ops/s | p50 us | p90 us | p99 us | p99.9 us | errors | send lag p50 / p99 us | other CPU on the load core | steal % | proxy CPU us/request | server CPU, cores |")
out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
def cpu_per_req(s, scen="rate50"):
    v = [1e6 * r["proxy_cpu_s"] / max(r["report"]["requests"], 1) for r in rows
         if r["system"] == s and r["scenario"] == scen and "proxy_cpu_s" in r]
    return med(v) if v else None
for s in ["memcached", "twemproxy", "memshift", "redis"]:
    q = lambda k: get(s, "rate50", lambda r: r["latency_us"][k])
    lag = lambda k: get(s, "rate50", lambda r: (r.get("send_lag_us") or {}).get(k, 0.0))
    stl = cpu(s, "rate50", lambda r: 100 * r.get("steal", 0.0))
    out.append(f"| {names[s]} | {fmt(get(s, 'rate50'))} | {fmt(q('p50'), 1)} | {fmt(q('p90'), 1)} | {fmt(q('p99'), 1)} "
               f"| {fmt(q('p99_9'), 1)} | {fmt(get(s, 'rate50', lambda r: r['errors']['total']))} "
               f"| {fmt(lag('p50'), 1)} / {fmt(lag('p99'), 1)} | {fmt(cpu(s, 'rate50', lambda r: r.get('other_load_cpu')), 2)} | {fmt(stl, 1)} "
               f"| {fmt(cpu_per_req(s), 1)} | {fmt(cpu(s, 'rate50', sut), 2)} |")
out.append("")
out.append("Multi-get, 100 keys per get, 1 connection, one request at a time:\n")
out.append("| system | gets/s | p50 us | p99 us |")
out.append("|---|---:|---:|---:|")
for s in ["memcached", "twemproxy", "memshift", "redis"]:
    out.append(f"| {names[s]}{' (MGET)' if s == 'redis' else ''} | {fmt(get(s, 'mget100'))} "
               f"| {fmt(get(s, 'mget100', lambda r: r['latency_us']['p50']), 1)} | {fmt(get(s, 'mget100', p99), 1)} |")
cmds = get("memshift", "mget100-commands", lambda r: r["commands_per_multiget"])
out.append(f"\nRedis commands per memshift 100-key get (all shards, INFO commandstats): {fmt(cmds, 2)}\n")
out.append("Memory per idle client connection (RSS with N idle connections minus RSS with none):\n")
out.append("| system | idle connections | load running | RSS before KiB | RSS with them KiB | KiB per connection | errors |")
out.append("|---|---:|---|---:|---:|---:|---:|")
idle = {}
for r in rows:
    if r["scenario"] in ("idle", "idle-load"):
        rep = r["report"]
        per = (r["rss_during_kb"] - r["rss_before_kb"]) / r["idle"]
        errs = rep["errors"]["total"] + rep["idle"]["open_errors"] + rep["idle"]["errors_at_end"]
        idle[(r["system"], r["scenario"])] = (per, errs, r["idle"], rep)
        out.append(f"| {names[r['system']]} | {r['idle']:,} | {'yes, %s ops/s' % fmt(rep['ops_per_sec']) if r['scenario'] == 'idle-load' else 'no'} "
                   f"| {r['rss_before_kb']:,} | {r['rss_during_kb']:,} | {per:.2f} | {errs} |")
out.append("")

floor_goals = []
if any(r["system"] == "floor" for r in rows):
    names["floor"] = "memshift-floor (one epoll loop, no runtime)"
    out.append("The floor of a hop: memshift-floor (one epoll loop with memshift's parser, ring and item layout; get "
               "and set only) over memshift's shards, alternated with memshift and twemproxy in each round (median of "
               "the rounds); CPU = the proxy process alone per request, its ratio to twemproxy's in brackets:\n")
    out.append("| system | ops/s, per-conn | CPU us/req | ops/s, event loop | CPU us/req | open loop p50 us | p99 us | CPU us/req |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|")
    tw_cpu = {scen: cpu_per_req("twemproxy", scen) for scen in ("fl-np", "fl-el-np", "fl-rate50")}
    def cpu_cell(s, scen):
        c, t = cpu_per_req(s, scen), tw_cpu[scen]
        return f"{fmt(c, 2)} ({c / t:.2f}x)" if c and t else fmt(c, 2)
    for s in ["floor", "memshift", "twemproxy"]:
        out.append(f"| {names[s]} | {fmt(get(s, 'fl-np'))} | {cpu_cell(s, 'fl-np')} | {fmt(get(s, 'fl-el-np'))} "
                   f"| {cpu_cell(s, 'fl-el-np')} | {fmt(get(s, 'fl-rate50', lambda r: r['latency_us']['p50']), 1)} "
                   f"| {fmt(get(s, 'fl-rate50', p99), 1)} | {cpu_cell(s, 'fl-rate50')} |")
    out.append("")
    for scen, label in (("fl-np", "closed loop, task per connection"), ("fl-el-np", "closed loop, one event loop"),
                        ("fl-rate50", f"open loop at {rate:,} req/s")):
        m, f, t = cpu_per_req("memshift", scen), cpu_per_req("floor", scen), tw_cpu[scen]
        if m and f and t:
            floor_goals.append((f"{label}: memshift's proxy CPU per request <= 0.8x twemproxy's (issue 27)", m <= 0.8 * t,
                                f"memshift {m:.2f} us, twemproxy {t:.2f} us: {m / t:.2f}x; the floor {f:.2f} us: {f / t:.2f}x"))

cl = [(s, get("memshift", s), get("memshift_cluster", s)) for s in ("cl-np", "cl-p16")]
if any(c for _, _, c in cl):
    out.append("memshift -> 3-master Redis Cluster vs memshift -> 3 standalone shards, same settings, "
               "back to back in each round (median of the rounds):\n")
    out.append("| load | shards ops/s | p99 us | cluster ops/s | p99 us | cluster / shards |")
    out.append("|---|---:|---:|---:|---:|---:|")
    for scen, sh, c in cl:
        out.append(f"| {'no pipelining' if scen == 'cl-np' else 'pipeline 16'} | {fmt(sh)} | {fmt(get('memshift', scen, p99), 1)} "
                   f"| {fmt(c)} | {fmt(get('memshift_cluster', scen, p99), 1)} | {ratio(c, sh)} |")
    out.append("")

def goal(text, ok, detail):
    out.append(f"- {'MET' if ok else 'MISSED'}: {text} — {detail}")

unix_goals = []
if any(r["system"] == "memshift_unix" for r in rows):
    out.append("Unix-domain socket vs TCP loopback, same processes and shape (median of the rounds; "
               "proxy CPU = CPU time of memshift alone, of memcached for the direct rows, per request; "
               "open loop at the rate above):\n")
    out.append("| system | transport | ops/s, no pipelining | p99 us | CPU us/req | ops/s, pipeline 16 | p99 us | CPU us/req | open loop p50 us | p99 us | CPU us/req |")
    out.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for base in ("memcached", "memshift"):
        for s, tr in ((base, "tcp"), (base + "_unix", "unix")):
            out.append(f"| {names[base]} | {tr} | {fmt(get(s, 'np'))} | {fmt(get(s, 'np', p99), 1)} | {fmt(cpu_per_req(s, 'np'), 2)} "
                       f"| {fmt(get(s, 'p16'))} | {fmt(get(s, 'p16', p99), 1)} | {fmt(cpu_per_req(s, 'p16'), 2)} "
                       f"| {fmt(get(s, 'rate50', lambda r: r['latency_us']['p50']), 1)} | {fmt(get(s, 'rate50', p99), 1)} "
                       f"| {fmt(cpu_per_req(s, 'rate50'), 2)} |")
    out.append("")
    if any(r["system"] == "memshift_unix" and r["scenario"] == "el-np" for r in rows):
        out.append("The same, one event loop over all connections (`--shape event-loop`, closed loop):\n")
        out.append("| system | transport | ops/s, no pipelining | p99 us | CPU us/req | ops/s, pipeline 16 | p99 us | CPU us/req |")
        out.append("|---|---|---:|---:|---:|---:|---:|---:|")
        for base in ("memcached", "memshift"):
            for s, tr in ((base, "tcp"), (base + "_unix", "unix")):
                out.append(f"| {names[base]} | {tr} | {fmt(get(s, 'el-np'))} | {fmt(get(s, 'el-np', p99), 1)} | {fmt(cpu_per_req(s, 'el-np'), 2)} "
                           f"| {fmt(get(s, 'el-p16'))} | {fmt(get(s, 'el-p16', p99), 1)} | {fmt(cpu_per_req(s, 'el-p16'), 2)} |")
        out.append("")
    for scen, label in (("np", "no pipelining"), ("p16", "pipeline 16"),
                        ("el-np", "event loop, no pipelining"), ("el-p16", "event loop, pipeline 16")):
        u, t = cpu_per_req("memshift_unix", scen), cpu_per_req("memshift", scen)
        if u and t:
            unix_goals.append((f"{label}: memshift CPU per request over the unix socket <= 0.75x over TCP loopback",
                               u <= 0.75 * t, f"{u:.2f} us vs {t:.2f} us: {u / t:.2f}x"))

out.append("Goals:\n")
for g in unix_goals + floor_goals:
    goal(*g)
tw, mc = get("twemproxy", "np"), get("memcached", "np")
if ms_np and tw:
    goal("no pipelining, memshift >= 1.3x twemproxy", ms_np / tw >= 1.3, f"{ms_np / tw:.2f}x")
if ms_np and mc:
    goal("no pipelining, memshift >= 0.8x memcached direct", ms_np / mc >= 0.8, f"{ms_np / mc:.2f}x")
twp = get("twemproxy", "p16")
if ms_p and twp:
    goal("pipeline 16, memshift >= 1.5x twemproxy", ms_p / twp >= 1.5, f"{ms_p / twp:.2f}x")
m99, r99 = get("memshift", "rate50", p99), get("redis", "rate50", p99)
if m99 is not None and r99 is not None:
    m90, r90 = get("memshift", "rate50", lambda r: r["latency_us"]["p90"]), get("redis", "rate50", lambda r: r["latency_us"]["p90"])
    m50, r50 = get("memshift", "rate50", lambda r: r["latency_us"]["p50"]), get("redis", "rate50", lambda r: r["latency_us"]["p50"])
    goal("p99 added over direct Redis at 50% load <= 100 us", m99 - r99 <= 100,
         f"memshift p99 {m99:.1f} us, Redis direct p99 {r99:.1f} us: {m99 - r99:+.1f} us "
         f"(p90 {m90 - r90:+.1f} us, p50 {m50 - r50:+.1f} us)")
t50 = get("twemproxy", "rate50", lambda r: r["latency_us"]["p50"])
if m99 is not None and t50 is not None:
    goal("open loop p50: memshift <= twemproxy and <= Redis direct + 30 us", m50 <= t50 and m50 <= r50 + 30,
         f"memshift {m50:.1f} us, twemproxy {t50:.1f} us, Redis direct {r50:.1f} us")
mcpu, tcpu = cpu_per_req("memshift"), cpu_per_req("twemproxy")
if mcpu and tcpu:
    goal("proxy CPU per request (open loop): memshift <= 0.7x twemproxy", mcpu <= 0.7 * tcpu,
         f"memshift {mcpu:.1f} us, twemproxy {tcpu:.1f} us: {mcpu / tcpu:.2f}x")
big = idle.get(("memshift", "idle-load")) or idle.get(("memshift", "idle"))
if big:
    per, errs, n, _ = big
    goal("idle connections <= 4 KiB RSS each, no errors (goal: 50,000 with a load running)",
         per <= 4 and errs == 0 and n >= 50000,
         f"{per:.2f} KiB per connection with {n:,} idle, {errs} errors"
         + ("" if n >= 50000 else f" (only {n:,} measured; 50,000 needs an open-files limit above 50,100 "
                                  f"for memshift and the load generator, this machine's is {fdlimit})"))
if bin_np and ms_np and bin_p and ms_p:
    goal("binary protocol throughput within 10% of text (no pipelining and pipeline 16)",
         bin_np >= 0.9 * ms_np and bin_p >= 0.9 * ms_p,
         f"no pipelining {bin_np / ms_np:.2f}x, pipeline 16 {bin_p / ms_p:.2f}x")
mm, rm = get("memshift", "mget100", lambda r: r["latency_us"]["p50"]), get("redis", "mget100", lambda r: r["latency_us"]["p50"])
if mm and rm and cmds is not None:
    goal("100-key multi-get <= 3 Redis round trips and <= 1.5x a single-shard MGET", cmds <= 3 and mm / rm <= 1.5,
         f"{cmds:.2f} commands per get; p50 {mm:.1f} us vs {rm:.1f} us = {mm / rm:.2f}x")
zrows = [r for r in rows if r["scenario"] == "zipf-nc"]
if zrows:
    names["memshiftnc"] = f"memshift + near cache -> {shards} Redis shard{'s' if shards != '1' else ''}"
    out.append("\nNear cache: zipf 0.99 over 100,000 keys, 90% get / 10% set, 100 B, 50 connections, no pipelining:\n")
    out.append("| system | ops/s | p50 us | p99 us | errors |")
    out.append("|---|---:|---:|---:|---:|")
    for s in ["memcached", "memshift", "memshiftnc"]:
        out.append(f"| {names[s]} | {fmt(get(s, 'zipf-nc'))} | {fmt(get(s, 'zipf-nc', lambda r: r['latency_us']['p50']), 1)} "
                   f"| {fmt(get(s, 'zipf-nc', p99), 1)} | {fmt(get(s, 'zipf-nc', lambda r: r['errors']['total']))} |")
    # The stats are cumulative over the rounds: the last line has them all.
    st = [r["report"] for r in rows if r["scenario"] == "zipf-nc-stats"]
    if st:
        st = st[-1]
        h, m = st.get("near_cache_hits", 0), st.get("near_cache_misses", 0)
        out.append(f"\nNear-cache hit ratio {h / max(h + m, 1):.1%} ({h:,} hits, {m:,} misses); "
                   f"held {st.get('near_cache_bytes', 0):,} bytes in {st.get('near_cache_entries', 0):,} entries "
                   f"at the end; {st.get('near_cache_evictions', 0):,} evictions, "
                   f"{st.get('near_cache_invalidations', 0):,} key invalidations.\n")
    nc, mcz = get("memshiftnc", "zipf-nc"), get("memcached", "zipf-nc")
    n50, c50 = (get(s, "zipf-nc", lambda r: r["latency_us"]["p50"]) for s in ("memshiftnc", "memcached"))
    if nc and mcz:
        goal("near cache, zipf 0.99, no pipelining: memshift >= 1.0x memcached direct, p50 <= memcached's",
             nc / mcz >= 1.0 and n50 <= c50,
             f"{nc / mcz:.2f}x; p50 {n50:.1f} us vs {c50:.1f} us")
for scen, sh, c in cl:
    if sh and c:
        goal(f"{'no pipelining' if scen == 'cl-np' else 'pipeline 16'}: memshift on a 3-master cluster >= 0.9x on 3 shards",
             c / sh >= 0.9, f"{c / sh:.2f}x")
print("\n".join(out))
PY
}

# --summary DIR: print the summary of an earlier run again.
if [ -n "$SUMMARY_OF" ]; then
    [ -f "$SUMMARY_OF/results.jsonl" ] || die "--summary: no $SUMMARY_OF/results.jsonl"
    summarize "$SUMMARY_OF" "(re-rendered)"
    python3 benches/compare_report.py "$SUMMARY_OF"
    exit 0
fi

# --- tools --------------------------------------------------------------------
pkgs=()
command -v memcached >/dev/null 2>&1 || pkgs+=(memcached)
command -v nutcracker >/dev/null 2>&1 || pkgs+=(nutcracker)
command -v redis-server >/dev/null 2>&1 || pkgs+=(redis-server)
command -v redis-benchmark >/dev/null 2>&1 || pkgs+=(redis-tools)
command -v python3 >/dev/null 2>&1 || pkgs+=(python3)
command -v taskset >/dev/null 2>&1 || pkgs+=(util-linux)
command -v gnuplot >/dev/null 2>&1 || pkgs+=(gnuplot-nox)
if [ "${#pkgs[@]}" -gt 0 ]; then
    apt_install "${pkgs[@]}"
    for unit in memcached nutcracker redis-server; do stop_packaged_service "$unit"; done
fi
if [ "$PROFILE" -eq 1 ] && ! command -v perf >/dev/null 2>&1; then
    apt_install linux-perf || log "perf unavailable: no profile"
fi

log "building release binaries (memshift-load, memshift-floor)"
cargo build --release -q -p memshift-benches
# memshift as shipped (`make release`): the profile-guided build; PGO=0
# measures the plain release build instead. MEMSHIFT_BIN: another memshift
# binary (an A/B of two builds, same script); no build then.
if [ -n "${MEMSHIFT_BIN:-}" ]; then
    MEMSHIFT=$MEMSHIFT_BIN
    MEMSHIFT_BUILD="given: $MEMSHIFT_BIN"
elif [ "${PGO:-1}" = 1 ]; then
    log "building memshift with profile-guided optimization (scripts/pgo-build.sh)"
    scripts/pgo-build.sh
    MEMSHIFT=$ROOT/target/pgo/memshift
    MEMSHIFT_BUILD="profile-guided (make release)"
else
    cargo build --release -q -p memshift-proxy
    MEMSHIFT=$ROOT/target/release/memshift
    MEMSHIFT_BUILD="plain release (PGO=0)"
fi
LOAD=$ROOT/target/release/memshift-load
FLOOR_BIN=$ROOT/target/release/memshift-floor

# Idle connections need one fd each on both sides.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
NOFILE=$(ulimit -n)
# Servers need a few fds of their own on top of the client connections.
MAXCONN=$(( NOFILE - 200 ))

SECONDS=0 # measurement time, the build excluded
OUT=$ROOT/target/compare/$(date +%Y%m%d-%H%M%S)
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/memshift-compare.XXXXXX)
RESULTS=$OUT/results.jsonl
: >"$RESULTS"

# --- processes ----------------------------------------------------------------
PIDS=()
cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Prefixes, not functions: a backgrounded function would be a subshell, and
# $! (what cleanup kills and whose RSS is read) would not be the server.
SUT=(); LOADGEN=(); BACKEND=()
if [ "$PIN" -eq 1 ]; then
    SUT=(nice -n "${NICE:-0}" taskset -c "$SUT_CPU"); LOADGEN=(nice -n "${NICE:-0}" taskset -c "$LOAD_CPU")
    BACKEND=(nice -n "${NICE:-0}" taskset -c "${BACKEND_CPU:-$SUT_CPU}")
fi
# The cores whose busy time is charged to the run ("other" = the rest of it).
SERVER_CPUS=$SUT_CPU
if [ -n "$BACKEND_CPU" ] && [ "$BACKEND_CPU" != "$SUT_CPU" ]; then
    SERVER_CPUS="$SUT_CPU $BACKEND_CPU"
    [ "$BACKEND_CPU" = "$LOAD_CPU" ] || SERVER_CPUS+=" $LOAD_CPU"
fi

USED_PORTS=" "
free_port() {
    local p
    while :; do
        # Below the ephemeral range, so no outgoing connection holds it.
        p=$(( 20000 + RANDOM % 12000 ))
        case $USED_PORTS in *" $p "*) continue ;; esac
        port_in_use "$p" && continue
        USED_PORTS+="$p "
        echo "$p"
        return
    done
}

# start NAME PORT CMD...: start in the background (pinned to the proxies'
# core), wait for PORT. PLACE=backend: on the backends' core.
start() {
    local name=$1 port=$2; shift 2
    local pin=("${SUT[@]}")
    [ "${PLACE:-}" = backend ] && pin=("${BACKEND[@]}")
    "${pin[@]}" "$@" >"$OUT/$name.log" 2>&1 &
    PIDS+=($!)
    eval "PID_$name=$!"
    wait_for_port "$port" 15 || { cat "$OUT/$name.log" >&2; die "$name did not start on :$port"; }
}

rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }

MC_PORT=$(free_port); NC_PORT=$(free_port); NC_STATS=$(free_port)
MS_PORT=$(free_port); RD_PORT=$(free_port)
R_PORTS=()
for _ in $(seq 1 "$SHARDS"); do R_PORTS+=("$(free_port)"); done
MS_RESP_PORT=$(free_port)

root_flag=()
[ "$(id -u)" -eq 0 ] && root_flag=(-u root)
PLACE=backend start memcached "$MC_PORT" memcached -l 127.0.0.1 -p "$MC_PORT" -U 0 -t 1 -m 1024 -c "$MAXCONN" "${root_flag[@]}"

nutcracker_config "$WORK/nutcracker.yml" "$NC_PORT" "$MC_PORT"
start twemproxy "$NC_PORT" nutcracker -c "$WORK/nutcracker.yml" -s "$NC_STATS" -a 127.0.0.1 \
    -p "$WORK/nutcracker.pid" -o "$OUT/twemproxy.log"

redis_start() {
    local name=$1 port=$2
    mkdir -p "$WORK/$name"
    PLACE=backend start "$name" "$port" redis-server --port "$port" --bind 127.0.0.1 --save "" \
        --appendonly no --daemonize no --dir "$WORK/$name" --maxclients "$MAXCONN"
}
SHARD_PIDS=()
SHARD_LIST=
for i in "${!R_PORTS[@]}"; do
    redis_start "shard$i" "${R_PORTS[$i]}"
    eval "SHARD_PIDS+=(\$PID_shard$i)"
    SHARD_LIST+="${SHARD_LIST:+, }\"127.0.0.1:${R_PORTS[$i]}\""
done
redis_start redis "$RD_PORT"

UNIX_BENCH=${UNIX_BENCH:-1}
MS_SOCK=$WORK/memshift.sock
MC_SOCK=$WORK/memcached.sock
MS_LISTEN="\"127.0.0.1:$MS_PORT\""
[ "$UNIX_BENCH" = 1 ] && MS_LISTEN+=", \"unix:$MS_SOCK\""
cat >"$WORK/memshift.toml" <<EOF
[server]
listen = [$MS_LISTEN]
resp_listen = "127.0.0.1:$MS_RESP_PORT"
threads = $MEMSHIFT_THREADS

[log]
level = "warn"

[admin]
listen = ""

[redis]
shards = [$SHARD_LIST]

[migration]
phase = "redis"
EOF
cp "$WORK/memshift.toml" "$OUT/memshift.toml"
start memshift "$MS_PORT" "$MEMSHIFT" --config "$WORK/memshift.toml"

declare -A ADDR=(
    [memcached]=127.0.0.1:$MC_PORT [twemproxy]=127.0.0.1:$NC_PORT
    [memshift]=127.0.0.1:$MS_PORT [redis]=127.0.0.1:$RD_PORT
)
FLOOR=${FLOOR:-1}
if [ "$FLOOR" = 1 ]; then
    FL_PORT=$(free_port)
    floor_shards=()
    for port in "${R_PORTS[@]}"; do floor_shards+=(--shard "127.0.0.1:$port"); done
    start floor "$FL_PORT" "$FLOOR_BIN" --listen "127.0.0.1:$FL_PORT" "${floor_shards[@]}"
    ADDR[floor]=127.0.0.1:$FL_PORT
    # shellcheck disable=SC2154 # PID_floor is set by start() through eval
    SUT_PIDS_floor="$PID_floor ${SHARD_PIDS[*]}"
fi
# The unix-socket rows: memshift's second listener, and a memcached of its
# own on `-s` (memcached serves either TCP or a socket, not both), set up
# like the TCP one.
if [ "$UNIX_BENCH" = 1 ]; then
    "${BACKEND[@]}" memcached -s "$MC_SOCK" -a 0700 -t 1 -m 1024 -c "$MAXCONN" "${root_flag[@]}" \
        >"$OUT/memcached_unix.log" 2>&1 &
    PIDS+=($!); PID_memcached_unix=$!
    for _ in $(seq 1 150); do
        python3 -c "import socket, sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])" "$MC_SOCK" 2>/dev/null && break
        sleep 0.1
    done
    ADDR[memcached_unix]=unix:$MC_SOCK
    ADDR[memshift_unix]=unix:$MS_SOCK
    # shellcheck disable=SC2034 # read by run() through eval
    SUT_PIDS_memcached_unix=$PID_memcached_unix
fi
# shellcheck disable=SC2154 # PID_* are set by start() through eval
{
    SUT_PIDS_memcached="$PID_memcached"
    SUT_PIDS_twemproxy="$PID_twemproxy $PID_memcached"
    SUT_PIDS_memshift="$PID_memshift ${SHARD_PIDS[*]}"
    SUT_PIDS_redis="$PID_redis"
}
# shellcheck disable=SC2034 # read by run() through eval
SUT_PIDS_memshift_unix=$SUT_PIDS_memshift
declare -A PROTO=([memcached]=memcache [twemproxy]=memcache [memshift]=memcache [redis]=redis
    [memcached_unix]=memcache [memshift_unix]=memcache [floor]=memcache)
SYSTEMS=(memcached twemproxy memshift redis)

# --- machine --------------------------------------------------------------------
{
    echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- crates 2>/dev/null || echo ' + uncommitted changes in crates/'); memshift build: ${MEMSHIFT_BUILD:-unknown}"
    echo "nproc: $(nproc)"
    echo "cpu: $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)$(lscpu 2>/dev/null | awk -F': +' '/Hypervisor vendor/ {print ", hypervisor " $2}')"
    echo "kernel: $(uname -sr)"
    echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
    echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "versions: $(memcached -V), $(nutcracker -V 2>&1 | head -1), redis $(redis-server --version | awk '{print $3}' | cut -d= -f2), $("$MEMSHIFT" --version 2>&1 | head -1)"
    if [ "$PIN" -eq 1 ]; then
        echo "pinning: servers on CPU $SUT_CPU, load generator on CPU $LOAD_CPU (taskset)"
        [ -z "$BACKEND_CPU" ] || echo "backends (shards, memcached, the direct rows' servers) on CPU $BACKEND_CPU; other = busy time of CPUs $SERVER_CPUS not charged to the system or the load generator"
    else
        echo "pinning: none"
    fi
    echo "memshift: server.threads = $MEMSHIFT_THREADS, $SHARDS shard(s), connections_per_shard = auto (1 with threads = 1)"
    echo "shards: $SHARDS"
    echo "memcached: -t 1; twemproxy: 1 server connection to memcached"
    echo "fd limit: $NOFILE"
    echo "nice: ${NICE:-0}"
    echo "rounds: $ROUNDS x ${DUR}s"
} | tee "$OUT/machine.txt" >&2

# --- runs -------------------------------------------------------------------------
# CPU ticks (user + system, all threads) of the given pids.
ticks() {
    local pid total=0
    for pid in "$@"; do
        total=$(( total + $(awk '{print $14 + $15}' "/proc/$pid/stat") ))
    done
    echo "$total"
}
CLK_TCK=$(getconf CLK_TCK)
# Busy ticks of one CPU (user nice system irq softirq steal), from /proc/stat.
cpu_busy() {
    local c total=0
    for c in "$@"; do
        total=$(( total + $(awk -v c="cpu$c" '$1 == c {print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat) ))
    done
    echo "$total"
}
# Steal ticks of every CPU: time the hypervisor ran something else instead.
steal() { awk '/^cpu / {print $9}' /proc/stat; }

# run SYSTEM SCENARIO ROUND memshift-load-args...: one JSON line into results,
# with the CPU the system's server processes used (in cores) during the run.
run() {
    local sys=$1 scen=$2 round=$3; shift 3
    local out t0 t1 s0 s1
    # shellcheck disable=SC2086 # SUT_PIDS_* are pid lists
    eval "local pids=\$SUT_PIDS_$sys"
    # shellcheck disable=SC2154,SC2086
    t0=$(ticks $pids); s0=$(date +%s.%N)
    # The first pid is the proxy (or the server itself, for the direct runs).
    local proxy=${pids%% *} p0 p1
    p0=$(ticks "$proxy")
    local b0 b1 st0 st1 l0 l1
    # shellcheck disable=SC2086 # a list of CPUs
    b0=$(cpu_busy $SERVER_CPUS); st0=$(steal); l0=$(cpu_busy "$LOAD_CPU")
    out=$("${LOADGEN[@]}" "$LOAD" --addr "${ADDR[$sys]}" --protocol "${PROTO[$sys]}" --json "$@" 2>>"$OUT/load.err") \
        || die "memshift-load failed for $sys/$scen (see $OUT/load.err)"
    # shellcheck disable=SC2086
    t1=$(ticks $pids); s1=$(date +%s.%N)
    p1=$(ticks "$proxy")
    # shellcheck disable=SC2086
    b1=$(cpu_busy $SERVER_CPUS); st1=$(steal); l1=$(cpu_busy "$LOAD_CPU")
    local sut_cpu other stolen other_load
    sut_cpu=$(python3 -c "print(($t1 - $t0) / $CLK_TCK / ($s1 - $s0))")
    # The server core's busy time not charged to the system's processes:
    # other processes (noise) plus interrupt work. Meaningful when pinned.
    other=$(python3 -c "print(max(0.0, ($b1 - $b0 - $t1 + $t0) / $CLK_TCK / ($s1 - $s0)))")
    # Same for the load generator's core (its own CPU time comes in the report).
    other_load=$(printf '%s' "$out" | python3 -c "import json, sys; r = json.load(sys.stdin); d = $s1 - $s0; print(max(0.0, ($l1 - $l0) / $CLK_TCK / d - r['cpu_cores'] * r['elapsed_s'] / d))")
    if [ "$SERVER_CPUS" != "$SUT_CPU" ]; then
        # BACKEND_CPU: the counted cores include the load generator's; the
        # noise on all of them is one figure.
        other=$(printf '%s' "$out" | python3 -c "import json, sys; r = json.load(sys.stdin); d = $s1 - $s0; print(max(0.0, ($b1 - $b0 - $t1 + $t0) / $CLK_TCK / d - r['cpu_cores'] * r['elapsed_s'] / d))")
        other_load=$other
    fi
    # Share of the machine's CPU time the hypervisor took (all CPUs).
    stolen=$(python3 -c "print(($st1 - $st0) / $CLK_TCK / ($s1 - $s0) / $(nproc))")
    printf '{"system":"%s","scenario":"%s","round":%s,"proxy_cpu_s":%s,"sut_cpu":%s,"other_cpu":%s,"other_load_cpu":%s,"steal":%s,"load":"%s","report":%s}\n' \
        "$sys" "$scen" "$round" "$(python3 -c "print(($p1 - $p0) / $CLK_TCK)")" "$sut_cpu" "$other" "$other_load" "$stolen" "$(cut -d' ' -f1 /proc/loadavg)" "$out" >>"$RESULTS"
    printf '%s' "$out" | python3 -c '
import json, sys
r = json.load(sys.stdin); l = r["latency_us"]
if r["warmup"]:
    w = r["warmup"]
    print("    %-10s %d keys set in %.2f s, %d errors" % (sys.argv[1], w["sets"], w["secs"], w["errors"]), file=sys.stderr)
else:
    print("    %-10s %-9s %10.0f ops/s  p50 %7.1f us  p99 %8.1f us  errors %d  cpu: server %.2f, load generator %.2f, other on the server core %.2f, steal %.1f%%" % (
          sys.argv[1], sys.argv[2], r["ops_per_sec"], l["p50"], l["p99"], r["errors"]["total"],
          float(sys.argv[3]), r["cpu_cores"], float(sys.argv[4]), 100 * float(sys.argv[5])), file=sys.stderr)' "$sys" "$scen" "$sut_cpu" "$other" "$stolen"
}

shape=(--conns "$CONNS" --ratio "$RATIO" --keys "$KEYS" --value-size "$VALUE" --duration "$DUR")

log "prefilling $KEYS keys (memcached, memshift, redis)"
PREFILL=(memcached memshift redis)
[ "$UNIX_BENCH" = 1 ] && PREFILL+=(memcached_unix)
for sys in "${PREFILL[@]}"; do
    run "$sys" prefill 0 --warmup --requests 0 --keys "$KEYS" --value-size "$VALUE" --conns 16
done

redis_benchmark() { # SCENARIO ROUND PIPELINE OPS_PER_SEC_HINT
    local scen=$1 round=$2 pipe=$3 hint=$4 n csv
    # Sized from memshift-load's RESP run so each test lasts about DUR/2.
    n=$(python3 -c "print(max(10000, int($hint * $DUR / 2)))")
    local t0 s0
    t0=$(ticks "$PID_redis"); s0=$(date +%s.%N)
    csv=$("${LOADGEN[@]}" redis-benchmark -h 127.0.0.1 -p "$RD_PORT" -c "$CONNS" -P "$pipe" -d "$VALUE" \
        -r "$KEYS" -n "$n" -t set,get --csv 2>>"$OUT/load.err")
    local sut_cpu
    sut_cpu=$(python3 -c "print(($(ticks "$PID_redis") - $t0) / $CLK_TCK / ($(date +%s.%N) - $s0))")
    printf '%s\n' "$csv" >>"$OUT/redis-benchmark.csv"
    python3 - "$scen" "$round" "$csv" "$sut_cpu" >>"$RESULTS" <<'PY'
import csv, io, json, sys
scen, rnd, text, sut_cpu = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
rps = {row[0]: float(row[1]) for row in csv.reader(io.StringIO(text)) if len(row) > 1 and row[0] in ("SET", "GET")}
# 90/10 mix: time-weighted (harmonic) combination of the two rates.
mix = 1.0 / (0.9 / rps["GET"] + 0.1 / rps["SET"])
print(json.dumps({"system": "redis-benchmark", "scenario": scen, "round": rnd, "sut_cpu": sut_cpu,
                  "report": {"ops_per_sec": mix, "get_ops": rps["GET"], "set_ops": rps["SET"],
                             "errors": {"total": 0}, "latency_us": None}}))
print("    %-10s %-9s %10.0f ops/s  (GET %.0f, SET %.0f)  cpu: server %.2f" % ("redis-bm", scen, mix, rps["GET"], rps["SET"], sut_cpu), file=sys.stderr)
PY
}

last_ops() { # SYSTEM SCENARIO: ops/s of the last result line
    python3 - "$RESULTS" "$1" "$2" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print([r for r in rows if r["system"] == sys.argv[2] and r["scenario"] == sys.argv[3]][-1]["report"]["ops_per_sec"])
PY
}

# QUIET_LOAD=x: before each round, wait (at most 10 minutes) for the 1-minute
# load average to drop below x; other work on this machine skews every number.
wait_quiet() {
    [ -n "${QUIET_LOAD:-}" ] || return 0
    local tries=120
    while python3 -c "import sys; sys.exit(0 if float(open('/proc/loadavg').read().split()[0]) >= $QUIET_LOAD else 1)"; do
        [ "$tries" -gt 0 ] || { log "load still >= $QUIET_LOAD, going on"; return 0; }
        [ "$tries" -eq 120 ] && log "waiting for the load average to drop below $QUIET_LOAD"
        sleep 5; tries=$(( tries - 1 ))
    done
}

for round in $(seq 1 "$ROUNDS"); do
    wait_quiet
    log "round $round/$ROUNDS: 90/10, $CONNS conns, no pipelining (load average $(cut -d' ' -f1 /proc/loadavg))"
    for sys in "${SYSTEMS[@]}"; do run "$sys" np "$round" "${shape[@]}" --pipeline 1; done
    redis_benchmark np "$round" 1 "$(last_ops redis np)"
    log "round $round/$ROUNDS: 90/10, $CONNS conns, pipeline 16"
    for sys in "${SYSTEMS[@]}"; do run "$sys" p16 "$round" "${shape[@]}" --pipeline 16; done
    redis_benchmark p16 "$round" 16 "$(last_ops redis p16)"
    if [ "$EVENT_LOOP" -eq 1 ]; then
        log "round $round/$ROUNDS: the same two loads from one event loop (--shape event-loop)"
        for sys in "${SYSTEMS[@]}"; do run "$sys" el-np "$round" "${shape[@]}" --pipeline 1 --shape event-loop; done
        for sys in "${SYSTEMS[@]}"; do run "$sys" el-p16 "$round" "${shape[@]}" --pipeline 16 --shape event-loop; done
    fi
done

# memcached's binary protocol: the same memshift (same shards, same shape),
# closed loop, after the text runs; the summary compares it with text.
ADDR[memshift_binary]=${ADDR[memshift]}
PROTO[memshift_binary]=binary
# shellcheck disable=SC2034 # read by run() through eval
SUT_PIDS_memshift_binary=$SUT_PIDS_memshift
for round in $(seq 1 "$ROUNDS"); do
    wait_quiet
    log "round $round/$ROUNDS: binary protocol through memshift, 90/10, no pipelining and pipeline 16"
    run memshift_binary np "$round" "${shape[@]}" --pipeline 1
    run memshift_binary p16 "$round" "${shape[@]}" --pipeline 16
done

# Open loop at half of memshift's median closed-loop throughput.
[ -n "${RATE:-}" ] || RATE=$(python3 - "$RESULTS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(int(0.5 * statistics.median(r["report"]["ops_per_sec"] for r in rows
                                  if r["system"] == "memshift" and r["scenario"] == "np")))
PY
)
for round in $(seq 1 "$ROUNDS"); do
    wait_quiet
    log "round $round/$ROUNDS: open loop at $RATE req/s (load average $(cut -d' ' -f1 /proc/loadavg))"
    for sys in "${SYSTEMS[@]}"; do run "$sys" rate50 "$round" "${shape[@]}" --rate "$RATE"; done
done

# The floor of a hop: memshift-floor over memshift's shards (so their data
# is memshift's), alternated with memshift and twemproxy in each round: the
# two closed-loop shapes without pipelining and the open-loop rate. The
# summary puts each proxy's CPU per request beside the floor's.
if [ "$FLOOR" = 1 ]; then
    for round in $(seq 1 "$ROUNDS"); do
        wait_quiet
        log "round $round/$ROUNDS: the floor of a hop (memshift-floor) beside memshift and twemproxy"
        for sys in floor memshift twemproxy; do
            run "$sys" fl-np "$round" "${shape[@]}" --pipeline 1
            run "$sys" fl-el-np "$round" "${shape[@]}" --pipeline 1 --shape event-loop
            run "$sys" fl-rate50 "$round" "${shape[@]}" --rate "$RATE"
        done
    done
fi

# Unix sockets: memcached over -s and memshift over its socket, the same
# shapes and open-loop rate as the TCP rows above.
if [ "$UNIX_BENCH" = 1 ]; then
    for round in $(seq 1 "$ROUNDS"); do
        wait_quiet
        log "round $round/$ROUNDS: unix sockets, 90/10, no pipelining, pipeline 16, open loop at $RATE req/s"
        for sys in memcached_unix memshift_unix; do
            run "$sys" np "$round" "${shape[@]}" --pipeline 1
            run "$sys" p16 "$round" "${shape[@]}" --pipeline 16
            run "$sys" rate50 "$round" "${shape[@]}" --rate "$RATE"
            if [ "$EVENT_LOOP" -eq 1 ]; then
                run "$sys" el-np "$round" "${shape[@]}" --pipeline 1 --shape event-loop
                run "$sys" el-p16 "$round" "${shape[@]}" --pipeline 16 --shape event-loop
            fi
        done
    done
fi

# Latency vs load: each system at CURVE_STEPS percent of its own maximum.
if [ -n "$CURVE_STEPS" ]; then
    declare -A MAX_OPS
    for sys in "${SYSTEMS[@]}"; do
        MAX_OPS[$sys]=$(python3 - "$RESULTS" "$sys" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(int(statistics.median(r["report"]["ops_per_sec"] for r in rows
                            if r["system"] == sys.argv[2] and r["scenario"] == "np")))
PY
)
    done
    for pct in $CURVE_STEPS; do
        wait_quiet
        log "latency vs load: $pct% of each system's own maximum, ${CURVE_DUR}s each"
        for sys in "${SYSTEMS[@]}"; do
            r=$(( MAX_OPS[$sys] * pct / 100 )); [ "$r" -ge 1 ] || r=1
            run "$sys" "curve$pct" 1 "${shape[@]}" --duration "$CURVE_DUR" --rate "$r"
        done
    done
fi

log "multi-get: 100 keys per get, 1 connection"
mg_calls() {
    local p total=0 c
    for p in "${R_PORTS[@]}"; do
        c=$(redis-cli -p "$p" INFO commandstats | tr -d '\r' | awk -F'[:,=]' \
            '/^cmdstat_/ && $1 != "cmdstat_info" && $1 != "cmdstat_ping" {s += $3} END {print s + 0}')
        total=$(( total + c ))
    done
    echo "$total"
}
for round in $(seq 1 "$ROUNDS"); do
    for sys in "${SYSTEMS[@]}"; do
        [ "$sys" = memshift ] && before=$(mg_calls)
        run "$sys" mget100 "$round" --conns 1 --ratio 100:0 --keys "$KEYS" --value-size "$VALUE" \
            --multiget 100 --duration "$(( DUR / 2 ))"
        if [ "$sys" = memshift ]; then
            after=$(mg_calls)
            python3 - "$RESULTS" "$before" "$after" "$round" >>"$RESULTS" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
r = [x for x in rows if x["system"] == "memshift" and x["scenario"] == "mget100"][-1]["report"]
n = r["requests"]
# INFO itself is excluded; the other data commands are the multi-gets'.
print(json.dumps({"system": "memshift", "scenario": "mget100-commands", "round": int(sys.argv[4]),
                  "report": {"commands_per_multiget": (int(sys.argv[3]) - int(sys.argv[2])) / max(n, 1)}}))
PY
        fi
    done
done

# --- scenario "cluster": memshift -> 3-master Redis Cluster vs memshift -> 3 shards ----
# Self-contained: 3 cluster-enabled redis-servers (no replicas, like the
# standalone shards), joined by redis-cli --cluster create, and a second
# memshift in mode = "cluster" with the same settings, pinned like the rest.
# Each round runs both memshifts back to back (scenarios cl-np, cl-p16), so
# the ratio compares like with like. CLUSTER_BENCH=0 skips it.
# A cluster node also listens on its port + 10000 (the cluster bus).
cluster_port() {
    local p
    while :; do
        p=$(free_port)
        port_in_use $(( p + 10000 )) || { echo "$p"; return; }
    done
}
if [ "${CLUSTER_BENCH:-1}" = 1 ]; then
    C_PORTS=("$(cluster_port)" "$(cluster_port)" "$(cluster_port)"); MSC_PORT=$(free_port)
    for i in 0 1 2; do
        mkdir -p "$WORK/cnode$i"
        start "cnode$i" "${C_PORTS[$i]}" redis-server --port "${C_PORTS[$i]}" --bind 127.0.0.1 \
            --cluster-enabled yes --cluster-config-file nodes.conf --save "" --appendonly no \
            --daemonize no --dir "$WORK/cnode$i" --maxclients "$MAXCONN"
    done
    redis-cli --cluster create "127.0.0.1:${C_PORTS[0]}" "127.0.0.1:${C_PORTS[1]}" \
        "127.0.0.1:${C_PORTS[2]}" --cluster-replicas 0 --cluster-yes >"$OUT/cluster-create.log" 2>&1 \
        || die "redis-cli --cluster create failed (see $OUT/cluster-create.log)"
    for p in "${C_PORTS[@]}"; do
        tries=300
        until redis-cli -p "$p" cluster info 2>/dev/null | grep -q 'cluster_state:ok'; do
            tries=$(( tries - 1 )); [ "$tries" -gt 0 ] || die "cluster node :$p not ok after 30 s"
            sleep 0.1
        done
    done
    # (no RESP listener: the first memshift holds that port)
    sed -e "s|^listen = \\[.*|listen = \"127.0.0.1:$MSC_PORT\"|" -e '/^resp_listen = /d' \
        -e "s|^shards = .*|mode = \"cluster\"\ncluster_nodes = [\"127.0.0.1:${C_PORTS[0]}\", \"127.0.0.1:${C_PORTS[1]}\"]|" \
        "$WORK/memshift.toml" >"$WORK/memshift-cluster.toml"
    cp "$WORK/memshift-cluster.toml" "$OUT/memshift-cluster.toml"
    start memshift_cluster "$MSC_PORT" "$MEMSHIFT" --config "$WORK/memshift-cluster.toml"
    ADDR[memshift_cluster]=127.0.0.1:$MSC_PORT
    PROTO[memshift_cluster]=memcache
    # shellcheck disable=SC2154 # PID_* are set by start() through eval
    SUT_PIDS_memshift_cluster="$PID_memshift_cluster $PID_cnode0 $PID_cnode1 $PID_cnode2"
    log "cluster: prefilling $KEYS keys through memshift in cluster mode"
    run memshift_cluster prefill 0 --warmup --requests 0 --keys "$KEYS" --value-size "$VALUE" --conns 16
    for round in $(seq 1 "$ROUNDS"); do
        wait_quiet
        log "round $round/$ROUNDS: cluster vs shards, 90/10, $CONNS conns (load average $(cut -d' ' -f1 /proc/loadavg))"
        for pipe in 1 16; do
            scen=cl-np; [ "$pipe" = 16 ] && scen=cl-p16
            for sys in memshift memshift_cluster; do
                run "$sys" "$scen" "$round" "${shape[@]}" --pipeline "$pipe"
            done
        done
    done
fi

# Memory per idle connection: RSS with IDLE idle connections minus RSS with none.
idle_rss() { # SYSTEM PID COUNT SCENARIO [extra memshift-load args]
    local sys=$1 pid=$2 count=$3 scen=$4; shift 4
    local before during log=$WORK/idle-$sys.err
    sleep 1
    before=$(rss_kb "$pid")
    "${LOADGEN[@]}" "$LOAD" --addr "${ADDR[$sys]}" --idle "$count" --idle-hold 3 --json "$@" \
        >"$WORK/idle-$sys.json" 2>"$log" &
    local lpid=$!
    PIDS+=("$lpid")
    local tries=600
    until grep -q "idle connections open" "$log" 2>/dev/null; do
        sleep 0.1; tries=$(( tries - 1 ))
        [ "$tries" -gt 0 ] || die "idle connections to $sys did not open in 60 s"
        kill -0 "$lpid" 2>/dev/null || { cat "$log" >&2; die "memshift-load (idle) exited early"; }
    done
    sleep 2
    during=$(rss_kb "$pid")
    wait "$lpid" || die "memshift-load (idle) failed: $(cat "$log")"
    printf '{"system":"%s","scenario":"%s","round":1,"report":%s,"rss_before_kb":%s,"rss_during_kb":%s,"idle":%s}\n' \
        "$sys" "$scen" "$(cat "$WORK/idle-$sys.json")" "$before" "$during" "$count" >>"$RESULTS"
    python3 -c 'import sys; b, d, n = map(int, sys.argv[2:5]); print("    %-10s %d idle: RSS %d -> %d KiB, %.2f KiB per connection" % (sys.argv[1], n, b, d, (d - b) / n), file=sys.stderr)' \
        "$sys" "$before" "$during" "$count"
}
log "memory: $IDLE idle connections"
# shellcheck disable=SC2154 # PID_* are set by start() through eval
{
    idle_rss memshift "$PID_memshift" "$IDLE" idle --conns 0
    idle_rss memcached "$PID_memcached" "$IDLE" idle --conns 0
    idle_rss twemproxy "$PID_twemproxy" "$IDLE" idle --conns 0
}

if [ "$QUICK" -eq 0 ]; then
    # The 50,000-connection goal, as far as the fd limit goes (memshift and the
    # load generator each hold one fd per connection).
    BIG=$(( NOFILE - 1000 )); [ "$BIG" -gt 50000 ] && BIG=50000
    log "memory: $BIG idle connections with a $CONNS-connection 90/10 load running"
    # shellcheck disable=SC2154
    idle_rss memshift "$PID_memshift" "$BIG" idle-load "${shape[@]}"
fi

if [ "$PROFILE" -eq 1 ] && command -v perf >/dev/null 2>&1; then
    log "profile: perf record -g on memshift under the no-pipelining load"
    # shellcheck disable=SC2154
    perf record -g -F 2000 -p "$PID_memshift" -o "$OUT/perf-memshift.data" -- sleep "$DUR" \
        >"$OUT/perf.log" 2>&1 &
    ppid=$!
    sleep 0.5
    run memshift np-profiled 0 "${shape[@]}" --pipeline 1
    wait "$ppid" || true
    perf report -i "$OUT/perf-memshift.data" --no-children --percent-limit 0.7 --stdio \
        --sort symbol 2>/dev/null | grep -v '^$' | head -150 >"$OUT/perf-memshift.txt" || true
    perf report -i "$OUT/perf-memshift.data" --no-children --sort dso --stdio 2>/dev/null \
        | grep -v '^#' | grep -v '^$' | head -20 >"$OUT/perf-memshift-dso.txt" || true
    log "profile: $OUT/perf-memshift.txt"
fi

# --- near cache -------------------------------------------------------------------
# A second memshift over the same (prefilled) shards with the near cache on;
# zipf 0.99 keys, no pipelining, against memcached and the plain memshift.
MSNC_PORT=$(free_port)
# (memshift.toml's listen array: TCP and, with UNIX_BENCH, its socket; this
# one listens on TCP only.)
sed -e "s|^listen = \\[.*|listen = \"127.0.0.1:$MSNC_PORT\"|" -e '/^resp_listen = /d' \
    "$WORK/memshift.toml" >"$WORK/memshift-nc.toml"
NC_SETTINGS=${NC_SETTINGS-"admit_reads = 1\nmax_ttl_ms = 10000"}
printf '\n[near_cache]\nenabled = true\n%b\n' "$NC_SETTINGS" >>"$WORK/memshift-nc.toml"
cp "$WORK/memshift-nc.toml" "$OUT/memshift-nc.toml"
start memshiftnc "$MSNC_PORT" "$MEMSHIFT" --config "$WORK/memshift-nc.toml"
ADDR[memshiftnc]=127.0.0.1:$MSNC_PORT
PROTO[memshiftnc]=memcache
# shellcheck disable=SC2154 # PID_* are set by start() through eval
SUT_PIDS_memshiftnc="$PID_memshiftnc ${SHARD_PIDS[*]}"
# near_cache_stats ROUND: the near cache's `stats` lines as one JSON line.
near_cache_stats() {
    near_cache_stats_lines "$MSNC_PORT" | python3 -c '
import json, sys
stats = {"near_cache_" + name: int(n) for name, n in (l.split() for l in sys.stdin)}
print(json.dumps({"system": "memshiftnc", "scenario": "zipf-nc-stats", "round": int(sys.argv[1]), "report": stats}))
' "$1" >>"$RESULTS"
}
zipf_shape=(--conns "$CONNS" --ratio "$RATIO" --keys "$KEYS" --value-size "$VALUE" --dist zipf:0.99 --pipeline 1)
NC_WARM=${NC_WARM:-$DUR}
# Right before its measured run: the plain memshift's sets (same shards)
# invalidate what the near cache holds.
warm_nc() {
    "${LOADGEN[@]}" "$LOAD" --addr "${ADDR[memshiftnc]}" --protocol memcache --json "${zipf_shape[@]}" \
        --duration "$NC_WARM" >/dev/null 2>>"$OUT/load.err" || die "memshift-load failed warming memshiftnc"
}
zipf_runs=("${zipf_shape[@]}" --duration "$DUR")
for round in $(seq 1 "$ROUNDS"); do
    wait_quiet
    log "round $round/$ROUNDS: near cache, zipf 0.99, $CONNS conns, no pipelining (load average $(cut -d' ' -f1 /proc/loadavg)); memshiftnc warmed ${NC_WARM}s first (not measured)"
    for sys in memcached memshift; do run "$sys" zipf-nc "$round" "${zipf_runs[@]}"; done
    warm_nc
    run memshiftnc zipf-nc "$round" "${zipf_runs[@]}"
    near_cache_stats "$round"
    if [ "$EVENT_LOOP" -eq 1 ]; then
        for sys in memcached memshift; do
            run "$sys" zipf-nc-el "$round" "${zipf_runs[@]}" --shape event-loop
        done
        # Warmed again: the plain memshift's sets just invalidated much of
        # what the near cache held (the per-conn run is warmed the same way).
        warm_nc
        run memshiftnc zipf-nc-el "$round" "${zipf_runs[@]}" --shape event-loop
    fi
done

# --- RESP listener -------------------------------------------------------------------
# redis-benchmark through memshift's RESP port (3 shards) and against one
# Redis directly, same settings: GET, SET, and MGET of 10 random keys, without
# pipelining and with 16 requests per pipeline. Goal (issue 17): memshift >=
# 0.8x Redis direct at -P 1, >= 1.5x at -P 16 (its 3 shards in parallel).
# Keys: `-r $KEYS` (key:000000000000 .. 99,999). Without -r, redis-benchmark's
# `key:__rand_int__` is ONE key: every request would go to one shard, which
# measures one shard behind a proxy, not memshift's ring. With -r the keys
# spread over the 3 shards as a real workload's do, and MGET's 10 keys are
# split across them (what the RESP listener has to do).
# CPU per request: each test runs alone, and the CPU time of memshift, of its
# shards and of Redis direct is divided by the requests. With every server on
# one core (SUT_CPU), throughput is bounded by the sum: memshift's ratio to
# Redis direct is at most direct / (memshift + shards) per request.
if [ "${RESP:-1}" -eq 1 ]; then
    RESP_N=${RESP_N:-$(( QUICK == 1 ? 50000 : 200000 ))}
    log "RESP: redis-benchmark -P 1 / -P 16, memshift's RESP port vs Redis direct ($RESP_N requests per run)"
    mget_keys=()
    for _ in 1 2 3 4 5 6 7 8 9 10; do mget_keys+=("key:__rand_int__"); done
    resp_bench() { # SYSTEM PORT PIPELINE ROUND
        local sys=$1 port=$2 p=$3 round=$4 t csv proxy_pids backend_pids a0 b0 a1 b1 rows=""
        if [ "$sys" = memshift ]; then
            proxy_pids=$PID_memshift; backend_pids="${SHARD_PIDS[*]}"
        else
            proxy_pids=""; backend_pids=$PID_redis
        fi
        for t in get set mget; do
            # redis-benchmark stops at the first error reply (a backend
            # timeout on an overloaded machine): that test has no figure.
            # shellcheck disable=SC2086 # pid lists
            a0=$(ticks $proxy_pids); b0=$(ticks $backend_pids)
            if [ "$t" = mget ]; then
                csv=$("${LOADGEN[@]}" redis-benchmark -h 127.0.0.1 -p "$port" -c "$CONNS" -n "$RESP_N" \
                    -r "$KEYS" -P "$p" --csv MGET "${mget_keys[@]}" 2>/dev/null | sed 's/^"MGET[^"]*"/"MGET"/' || true)
            else
                csv=$("${LOADGEN[@]}" redis-benchmark -h 127.0.0.1 -p "$port" -c "$CONNS" -n "$RESP_N" \
                    -d "$VALUE" -r "$KEYS" -P "$p" -t "$t" --csv 2>/dev/null || true)
            fi
            # shellcheck disable=SC2086 # pid lists
            a1=$(ticks $proxy_pids); b1=$(ticks $backend_pids)
            rows+="$t $((a1 - a0)) $((b1 - b0)) $(printf '%s\n' "$csv" | tail -1)"$'\n'
        done
        python3 - "$sys" "$p" "$round" "$RESP_N" "$CLK_TCK" "$rows" >>"$RESULTS" <<'PY'
import json, sys
sys_, p, rnd, n, tck, text = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
rps, cpu = {}, {}
for line in text.splitlines():
    if not line.strip():
        continue
    test, proxy, backend, row = line.split(" ", 3)
    fields = [f.strip('"') for f in row.split(",")]
    try:
        rps[test] = float(fields[1])
    except (IndexError, ValueError):
        continue
    cpu[test] = {"proxy_us": int(proxy) / tck / n * 1e6, "backend_us": int(backend) / tck / n * 1e6}
print(json.dumps({"system": "resp-" + sys_, "scenario": "resp-P%d" % p, "round": rnd, "report": rps, "cpu": cpu}))
PY
    }
    for round in $(seq 1 "$ROUNDS"); do
        for p in 1 16; do
            resp_bench memshift "$MS_RESP_PORT" "$p" "$round"
            resp_bench redis "$RD_PORT" "$p" "$round"
        done
    done
    python3 - "$RESULTS" >"$OUT/resp.md" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def pick(sys_, p):
    return [r for r in rows if r["system"] == sys_ and r["scenario"] == "resp-P%d" % p]
def med(sys_, p, test):
    v = [r["report"].get(test) for r in pick(sys_, p)]
    v = [x for x in v if x]
    return statistics.median(v) if v else None
def cpu(sys_, p, test, part):
    v = [r.get("cpu", {}).get(test, {}).get(part) for r in pick(sys_, p)]
    v = [x for x in v if x is not None]
    return statistics.median(v) if v else None
def f(x):
    return "-" if x is None else f"{x:.2f}"
print("## RESP listener: redis-benchmark requests/s and CPU µs per request (medians)\n")
print("| test | pipeline | memshift RESP | Redis direct | ratio | goal | memshift µs/req | its shards µs/req | Redis direct µs/req | CPU bound: direct / (memshift + shards) |")
print("|---|---|---|---|---|---|---|---|---|---|")
for p, goal in ((1, 0.8), (16, 1.5)):
    for t in ("get", "set", "mget"):
        m, r = med("resp-memshift", p, t), med("resp-redis", p, t)
        ratio = m / r if m and r else None
        ok = "" if ratio is None else ("met" if ratio >= goal else "not met")
        mp, ms, rd = cpu("resp-memshift", p, t, "proxy_us"), cpu("resp-memshift", p, t, "backend_us"), cpu("resp-redis", p, t, "backend_us")
        bound = rd / (mp + ms) if mp and ms is not None and rd else None
        print(f"| {t.upper()} | {p} | {m or 0:,.0f} | {r or 0:,.0f} | {ratio or 0:.2f}x | >= {goal}x {ok} "
              f"| {f(mp)} | {f(ms)} | {f(rd)} | {f(bound)}x |")
PY
    cat "$OUT/resp.md" >&2
fi

echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/machine.txt"
echo "measurement time: ${SECONDS}s (build excluded)" >>"$OUT/machine.txt"

# --- summary ----------------------------------------------------------------------------
summarize "$OUT" "$*" >"$OUT/summary.md"
[ -f "$OUT/resp.md" ] && { echo; cat "$OUT/resp.md"; } >>"$OUT/summary.md"
{ echo; python3 benches/compare_report.py "$OUT"; } >>"$OUT/summary.md"
cat "$OUT/summary.md"
log "results in $OUT"
