# Shared helpers for memshift's scripts (sourced, not run).

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# Runs a command as root: directly when root, else through sudo.
as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        die "need root to run: $* (install sudo or run as root)"
    fi
}

APT_UPDATED=0
# apt_install PKG...: apt-get update (once) then install the packages.
apt_install() {
    [ "$#" -gt 0 ] || return 0
    command -v apt-get >/dev/null 2>&1 \
        || die "missing: $* (no apt-get here; install them with your package manager)"
    if [ "$APT_UPDATED" -eq 0 ]; then
        log "apt-get update"
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
        APT_UPDATED=1
    fi
    log "apt-get install -y $*"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"
}

# Debian starts a service for redis-server and memcached when they are
# installed; on a systemd machine it would hold 6379 / 11211, which
# `make run` needs. Only call this for packages this script just installed.
stop_packaged_service() {
    local unit=$1
    if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet "$unit" 2>/dev/null; then
        log "stopping and disabling the $unit service the package just started"
        as_root systemctl disable --now "$unit" >/dev/null 2>&1 || true
    fi
}

# port_in_use PORT: true when something accepts on 127.0.0.1:PORT.
port_in_use() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# wait_for_port PORT SECONDS
wait_for_port() {
    local port=$1 tries=$(( $2 * 10 ))
    while [ "$tries" -gt 0 ]; do
        port_in_use "$port" && return 0
        sleep 0.1
        tries=$(( tries - 1 ))
    done
    return 1
}

# near_cache_stats_lines PORT: the `STAT near_cache_<name> <n>` lines of the
# memcached-protocol server on 127.0.0.1:PORT, as "<name> <n>" lines.
near_cache_stats_lines() {
    python3 - "$1" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
s.sendall(b"stats\r\n")
buf = b""
while not buf.endswith(b"END\r\n"):
    chunk = s.recv(65536)
    if not chunk:
        break
    buf += chunk
for line in buf.decode().splitlines():
    parts = line.split(" ")
    if len(parts) == 3 and parts[1].startswith("near_cache_"):
        print(parts[1][len("near_cache_"):], parts[2])
PY
}

# Writes twemproxy's (nutcracker's) benchmark config to FILE: listen on
# LISTEN_PORT, one connection to the one memcached on MEMCACHED_PORT, the
# setup benches/compare.sh and benches/hop.sh both compare memshift with.
nutcracker_config() {
    local file=$1 listen_port=$2 memcached_port=$3
    cat >"$file" <<EOC
bench:
  listen: 127.0.0.1:$listen_port
  hash: fnv1a_64
  distribution: ketama
  timeout: 2000
  preconnect: true
  auto_eject_hosts: false
  server_connections: 1
  servers:
    - 127.0.0.1:$memcached_port:1
EOC
}

# local_run_setup PREFIX PORT...: for the `make run` variants: build memshift
# (release) into $bin, refuse ports already in use, make the temp dir $TMP,
# and on exit stop every process in $pids and remove $TMP.
local_run_setup() {
    local prefix=$1 port
    shift
    log "cargo build --release -p memshift-proxy"
    cargo build --release -p memshift-proxy
    bin=${CARGO_TARGET_DIR:-target}/release/memshift
    for port in "$@"; do
        port_in_use "$port" && die "127.0.0.1:$port is already in use"
    done
    TMP=$(mktemp -d -t "$prefix.XXXXXX")
    pids=()
    trap stop_local_run INT TERM EXIT
}

stop_local_run() {
    trap - INT TERM EXIT
    local pid
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$TMP"
    log "stopped; removed $TMP"
}

# write_memshift_toml: $TMP/memshift.toml for the `make run` variants:
# memcached port 11211, admin 9121, phase `redis`, and stdin as the keys of
# its [redis] section.
write_memshift_toml() {
    {
        printf '[server]\nlisten = "127.0.0.1:11211"\n[admin]\nlisten = "127.0.0.1:9121"\n[redis]\n'
        cat
        printf '[migration]\nphase = "redis"\n'
    } >"$TMP/memshift.toml"
}

# run_memshift_foreground: memshift with $TMP/memshift.toml until it exits
# (or Ctrl-C); exits with its status.
run_memshift_foreground() {
    log "memshift --config $TMP/memshift.toml (Ctrl-C to stop everything)"
    "$bin" --config "$TMP/memshift.toml" &
    pids+=("$!")
    local status=0
    wait "$!" || status=$?
    exit "$status"
}
