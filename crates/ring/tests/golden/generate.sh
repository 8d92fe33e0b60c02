#!/usr/bin/env bash
# Regenerate crates/ring/tests/fixtures/legacy/*.txt by running the real
# memcached client libraries against real memcached servers. See README.md.
#
# usage: crates/ring/tests/golden/generate.sh [ketama|rendezvous|modula|spymemcached]...
#        (no argument: all four)
#
# Needs: memcached; gcc + libmemcached-dev; go (fetches gomemcache from the
# module proxy); python3 (makes a venv with pymemcache==4.0.0 in $VENV);
# java + mvn for the spymemcached cross-check.
#
# Starts its own memcached servers (on 127.0.0.1:312xx, 127.0.0.2:11211,
# 127.0.0.3:11211, localhost:31213) and stops exactly those on exit.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
fixtures="$(cd "$here/../fixtures/legacy" && pwd)"
keys="$here/keys.txt"
work="${WORK:-/tmp/memshift-golden}"
VENV="${VENV:-/tmp/memshift-golden-venv}"
SPY_VERSION=2.12.3
mkdir -p "$work"

pids=()
stop_servers() {
    local pid
    for pid in "${pids[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${pids[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    pids=()
}
trap stop_servers EXIT

# start_servers host:port... : a fresh memcached per address, UDP off.
start_servers() {
    local addr host port tries
    for addr in "$@"; do
        host="${addr%:*}"
        port="${addr##*:}"
        memcached -u root -l "$host" -p "$port" -U 0 -m 16 &
        pids+=("$!")
    done
    for addr in "$@"; do
        host="${addr%:*}"
        port="${addr##*:}"
        tries=0
        until (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; do
            tries=$((tries + 1))
            if [ "$tries" -gt 100 ]; then
                echo "memcached on $addr did not start" >&2
                exit 1
            fi
            sleep 0.05
        done
    done
}

# addresses "host:port:weight"... -> "host:port"...
strip_weights() {
    local a
    for a in "$@"; do echo "${a%:*}"; done
}

run_ketama() {
    gcc -Wall -Wextra -O1 -o "$work/gen_ketama" "$here/libmemcached/gen_ketama.c" -lmemcached
    local sets=(
        "ketama_4.txt|127.0.0.2:11211:1 127.0.0.1:31212:1 localhost:31213:1 127.0.0.3:11211:1"
        "ketama_weighted_4.txt|127.0.0.2:11211:1 127.0.0.1:31212:2 localhost:31213:3 127.0.0.3:11211:5"
        "ketama_weighted_3.txt|127.0.0.1:31214:100 127.0.0.1:31215:100 127.0.0.1:31216:250"
    )
    local big="" p
    for p in $(seq 31221 31245); do big+="127.0.0.1:$p:1 "; done
    sets+=("ketama_25.txt|$big")
    local set name servers
    for set in "${sets[@]}"; do
        name="${set%%|*}"
        read -r -a servers <<<"${set#*|}"
        start_servers $(strip_weights "${servers[@]}")
        "$work/gen_ketama" "$fixtures/$name" "$keys" "${servers[@]}"
        stop_servers
    done
}

run_rendezvous() {
    if [ ! -x "$VENV/bin/python" ]; then
        python3 -m venv "$VENV"
    fi
    "$VENV/bin/pip" install -q pymemcache==4.0.0
    local sets=(
        "rendezvous_5.txt|str|127.0.0.1:31231 127.0.0.1:31232 localhost:31233 127.0.0.2:11211 127.0.0.1:31235"
        "rendezvous_3.txt|str|127.0.0.1:31236 127.0.0.1:31237 127.0.0.1:31238"
        "rendezvous_bytes_3.txt|bytes|127.0.0.1:31236 127.0.0.1:31237 127.0.0.1:31238"
    )
    local set name rest mode servers
    for set in "${sets[@]}"; do
        name="${set%%|*}"
        rest="${set#*|}"
        mode="${rest%%|*}"
        read -r -a servers <<<"${rest#*|}"
        start_servers "${servers[@]}"
        "$VENV/bin/python" "$here/pymemcache/gen_rendezvous.py" "$fixtures/$name" "$keys" "$mode" "${servers[@]}"
        stop_servers
    done
}

run_modula() {
    (cd "$here/gomemcache" && go build -o "$work/gen_modula" .)
    local sets=(
        "modula_3.txt|127.0.0.1:31241 127.0.0.1:31242 127.0.0.1:31243"
        "modula_5.txt|127.0.0.1:31241 127.0.0.1:31242 localhost:31246 127.0.0.2:11211 127.0.0.1:31247"
    )
    local set name servers
    for set in "${sets[@]}"; do
        name="${set%%|*}"
        read -r -a servers <<<"${set#*|}"
        start_servers "${servers[@]}"
        "$work/gen_modula" "$fixtures/$name" "$keys" "${servers[@]}"
        stop_servers
    done
}

run_spymemcached() {
    local jar="$HOME/.m2/repository/net/spy/spymemcached/$SPY_VERSION/spymemcached-$SPY_VERSION.jar"
    if [ ! -f "$jar" ]; then
        mvn -q dependency:get -Dartifact="net.spy:spymemcached:$SPY_VERSION"
    fi
    mkdir -p "$work/spymemcached"
    javac -cp "$jar" -d "$work/spymemcached" "$here/spymemcached/GenKetama.java"
    local servers=(127.0.0.1:31251 127.0.0.1:31252 127.0.0.1:31253 127.0.0.1:31254)
    start_servers "${servers[@]}"
    # spymemcached logs connection events on stderr; keep only ours.
    java -cp "$jar:$work/spymemcached" GenKetama "$fixtures/spymemcached_ketama_4.txt" "$keys" "${servers[@]}" \
        2> >(grep -v -e '^[0-9-]* [0-9:.]* INFO ' -e '^WARNING' -e '^INFO' >&2)
    stop_servers
}

targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
    targets=(ketama rendezvous modula spymemcached)
fi
for t in "${targets[@]}"; do
    case "$t" in
    ketama | rendezvous | modula | spymemcached) "run_$t" ;;
    *)
        echo "unknown target $t" >&2
        exit 2
        ;;
    esac
done
