#!/usr/bin/env python3
"""compare_report.py RUN_DIR: the parts of a benches/compare.sh run's summary
that compare load shapes and draw plots.

Reads RUN_DIR/results.jsonl; prints markdown on stdout (the load-shape table,
the latency-vs-load table, links to the plots) and, when gnuplot is
installed, draws into RUN_DIR:
  throughput-<scenario>.png  one bar per system, median ops/s of the rounds
  latency-vs-load.png        p50 / p99 / p99.9 against the offered load, in %
                             of each system's own closed-loop maximum
compare.sh appends the output to summary.md; the tables and the image links
paste into BENCHMARKS.md as they are (copy the PNGs to docs/benchmarks/).
"""
import json
import os
import shutil
import statistics
import subprocess
import sys

RUN = sys.argv[1]
ROWS = [json.loads(line) for line in open(os.path.join(RUN, "results.jsonl"))]

NAMES = {
    "memcached": "memcached direct",
    "twemproxy": "twemproxy -> memcached",
    "memshift": "memshift -> Redis shards",
    "redis": "Redis direct",
    "redis-benchmark": "Redis direct (redis-benchmark)",
    "memshift_binary": "memshift, binary protocol",
    "memshiftnc": "memshift + near cache",
    "memshift_cluster": "memshift -> Redis Cluster",
}
SYSTEMS = ["memcached", "twemproxy", "memshift", "redis"]
# (scenario, title of its throughput plot), in the order of the page.
SCENARIOS = [
    ("np", "90/10, 50 connections, no pipelining, task per connection"),
    ("el-np", "90/10, 50 connections, no pipelining, one event loop"),
    ("p16", "90/10, 50 connections, pipeline 16, task per connection"),
    ("el-p16", "90/10, 50 connections, pipeline 16, one event loop"),
    ("zipf-nc", "near cache: zipf 0.99, 90/10, no pipelining, task per connection"),
    ("zipf-nc-el", "near cache: zipf 0.99, 90/10, no pipelining, one event loop"),
    ("mget100", "100-key multi-get, 1 connection"),
    ("cl-np", "Redis Cluster vs shards, no pipelining"),
    ("cl-p16", "Redis Cluster vs shards, pipeline 16"),
]


def values(system, scen, f):
    out = []
    for r in ROWS:
        if r["system"] == system and r["scenario"] == scen:
            try:
                v = f(r["report"])
            except (KeyError, TypeError):
                continue
            if v is not None:
                out.append(v)
    return out


def med(system, scen, f=lambda r: r["ops_per_sec"]):
    v = values(system, scen, f)
    return statistics.median(v) if v else None


def q(k):
    return lambda r: r["latency_us"][k]


def fmt(v, d=0):
    return "-" if v is None else f"{v:,.{d}f}"


def systems_in(scen):
    seen = []
    for r in ROWS:
        if r["scenario"] == scen and r["system"] not in seen and "ops_per_sec" in r["report"]:
            seen.append(r["system"])
    return seen


def curve_steps():
    pcts = sorted({int(r["scenario"][5:]) for r in ROWS if r["scenario"].startswith("curve")})
    return pcts


def run_label():
    """Names the run in every plot: its date and commit, from machine.txt."""
    info = {}
    try:
        for line in open(os.path.join(RUN, "machine.txt")):
            k, _, v = line.partition(":")
            info[k.strip()] = v.strip()
    except OSError:
        return os.path.basename(os.path.normpath(RUN))
    parts = [info.get("date", ""), info.get("commit", "")]
    return "run " + ", ".join(p for p in parts if p)


LABEL = run_label()
out = []


def shape_table():
    if not any(r["scenario"] in ("el-np", "el-p16") for r in ROWS):
        return
    out.append("### Load shapes: a task per connection vs one event loop\n")
    out.append("Same systems, same 90/10 load (100 B values, 100,000 uniform keys, 50 connections), "
               "closed loop; `per-conn`: memshift-load's tokio task per connection, `event-loop`: one "
               "epoll loop over all 50 (`--shape event-loop`), whose requests reach the server in "
               "bursts as an event-loop client's do. Median ops/s of the rounds, p99 in µs:\n")
    out.append("| system | per-conn, no pipelining | p99 | event-loop, no pipelining | p99 "
               "| per-conn, pipeline 16 | p99 | event-loop, pipeline 16 | p99 |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for s in SYSTEMS:
        cells = []
        for scen in ("np", "el-np", "p16", "el-p16"):
            cells += [fmt(med(s, scen)), fmt(med(s, scen, q("p99")), 1)]
        out.append(f"| {NAMES[s]} | " + " | ".join(cells) + " |")
    ms, tw = med("memshift", "el-np"), med("twemproxy", "el-np")
    if ms and tw:
        out.append(f"\nEvent-loop shape, no pipelining: memshift / twemproxy = {ms / tw:.2f}x.")
    out.append("")


def curve_table():
    steps = curve_steps()
    if not steps:
        return
    systems = [s for s in SYSTEMS if any(r["system"] == s for r in ROWS if r["scenario"].startswith("curve"))]
    out.append("### Latency vs load (open loop)\n")
    out.append("Each system at a fixed request rate of 10 %…90 % of its own closed-loop maximum "
               "(its median ops/s with no pipelining, task per connection); latency from each request's "
               "intended send time (no coordinated omission). Cells: p50 / p99 / p99.9 in µs; "
               "achieved ops/s below the offered rate means the system (or the generator) fell behind:\n")
    out.append("| offered load | " + " | ".join(NAMES[s] for s in systems) + " |")
    out.append("|---|" + "---:|" * len(systems))
    out.append("| 100 % = closed-loop max, ops/s | " + " | ".join(fmt(med(s, "np")) for s in systems) + " |")
    for pct in steps:
        scen = f"curve{pct}"
        cells = []
        for s in systems:
            p50, p99, p999 = med(s, scen, q("p50")), med(s, scen, q("p99")), med(s, scen, q("p99_9"))
            errs = med(s, scen, lambda r: r["errors"]["total"])
            cell = f"{fmt(p50)} / {fmt(p99)} / {fmt(p999)}"
            rate, got = med(s, scen, lambda r: r["rate"]), med(s, scen)
            if rate and got is not None and got < 0.97 * rate:
                cell += f" (achieved {fmt(got)} of {fmt(rate)})"
            if errs:
                cell += f" ({fmt(errs)} errors)"
            cells.append(cell)
        out.append(f"| {pct} % | " + " | ".join(cells) + " |")
    out.append("")


# --- plots ---------------------------------------------------------------------


def terminal():
    """pngcairo when this gnuplot has it (antialiased), else libgd's png."""
    try:
        r = subprocess.run(["gnuplot", "-e", "set terminal"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    listing = r.stdout + r.stderr
    if "pngcairo" in listing:
        return "pngcairo noenhanced font 'sans,10'"
    return "png noenhanced"


def gnuplot(script, name):
    path = os.path.join(RUN, name + ".gp")
    with open(path, "w") as f:
        f.write(script)
    r = subprocess.run(["gnuplot", name + ".gp"], cwd=RUN, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        sys.stderr.write(f"gnuplot {name}: {r.stderr}\n")
        return False
    return True


def bar_plot(term, scen, title):
    systems = systems_in(scen)
    data = [(NAMES.get(s, s), med(s, scen)) for s in systems]
    data = [(n, v) for n, v in data if v]
    if not data:
        return None
    dat = f"throughput-{scen}.dat"
    with open(os.path.join(RUN, dat), "w") as f:
        for n, v in data:
            f.write(f'"{n}"\t{v:.0f}\n')
    png = f"throughput-{scen}.png"
    ok = gnuplot(f"""set terminal {term} size 900,420
set output '{png}'
set title "{title}\\n{LABEL}"
set style data histogram
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.7
set ylabel "ops/s (median of the rounds)"
set yrange [0:*]
set grid ytics
set xtics nomirror rotate by 20 right
set bmargin 6
set key off
plot '{dat}' using 2:xtic(1) lc rgb '#4472c4', \\
     '' using 0:2:(sprintf("%.0fk", $2 / 1000)) with labels offset 0,0.8
""", f"throughput-{scen}")
    return png if ok else None


def curve_plot(term):
    steps = curve_steps()
    if not steps:
        return None
    systems = [s for s in SYSTEMS if any(r["system"] == s for r in ROWS if r["scenario"].startswith("curve"))]
    for s in systems:
        with open(os.path.join(RUN, f"curve-{s}.dat"), "w") as f:
            for pct in steps:
                scen = f"curve{pct}"
                v = [med(s, scen, q(k)) for k in ("p50", "p99", "p99_9")]
                if None not in v:
                    f.write(f"{pct}\t{v[0]:.1f}\t{v[1]:.1f}\t{v[2]:.1f}\n")
    panels = []
    for col, label in ((2, "p50"), (3, "p99"), (4, "p99.9")):
        plots = ", ".join(f"'curve-{s}.dat' using 1:{col} with linespoints lw 2 title \"{NAMES[s]}\"" for s in systems)
        panels.append(f'set title "{label} latency"\nplot {plots}\n')
    png = "latency-vs-load.png"
    ok = gnuplot(f"""set terminal {term} size 1500,520
set output '{png}'
set multiplot layout 1,3 title "Open loop: latency vs offered load (% of each system's own closed-loop maximum)\\n{LABEL}"
set logscale y
set xlabel "offered load, % of the system's max"
set ylabel "µs (log scale)"
set xrange [0:100]
set grid
set key below maxrows 2
""" + "".join(panels) + "unset multiplot\n", "latency-vs-load")
    return png if ok else None


def plots():
    if not shutil.which("gnuplot"):
        out.append("(gnuplot not installed: no plots)\n")
        return
    term = terminal()
    if term is None:
        out.append("(gnuplot did not run: no plots)\n")
        return
    drawn = []
    for scen, title in SCENARIOS:
        png = bar_plot(term, scen, title)
        if png:
            drawn.append((title, png))
    png = curve_plot(term)
    if png:
        drawn.append(("latency vs load", png))
    if drawn:
        out.append("### Plots\n")
        out.append(f"Drawn by gnuplot into `{os.path.relpath(RUN)}/`:\n")
        for title, png in drawn:
            out.append(f"![{title}]({png})")
        out.append("")


shape_table()
curve_table()
plots()
print("\n".join(out))
