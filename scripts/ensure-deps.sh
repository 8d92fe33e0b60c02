#!/usr/bin/env bash
# Installs what `make test` needs and is missing: redis-server, memcached,
# memccapable (libmemcached-tools), python3 with venv, PHP with the memcached
# extension (php-cli, php-memcached: the unix-socket client test), a C
# toolchain, and the Rust toolchain (rustup stable with rustfmt and clippy).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

pkgs=()
# Also the sentinels of the Sentinel tests and `SENTINEL=1 make run`:
# `redis-server --sentinel` (Debian's redis-sentinel package only wraps it).
command -v redis-server >/dev/null 2>&1 || pkgs+=(redis-server)
command -v memcached >/dev/null 2>&1 || pkgs+=(memcached)
command -v memccapable >/dev/null 2>&1 || pkgs+=(libmemcached-tools)
command -v openssl >/dev/null 2>&1 || pkgs+=(openssl)
command -v memcstat >/dev/null 2>&1 || pkgs+=(libmemcached-tools)
command -v cc >/dev/null 2>&1 || pkgs+=(build-essential)
command -v python3 >/dev/null 2>&1 || pkgs+=(python3)
command -v php >/dev/null 2>&1 || pkgs+=(php-cli)
if ! php -r 'exit(class_exists("Memcached") ? 0 : 1);' >/dev/null 2>&1; then
    pkgs+=(php-memcached)
fi
if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c 'import ensurepip' >/dev/null 2>&1; then
    pkgs+=(python3-venv)
fi
if ! command -v cargo >/dev/null 2>&1 && ! [ -x "$HOME/.cargo/bin/cargo" ]; then
    command -v curl >/dev/null 2>&1 || pkgs+=(curl)
    [ -e /etc/ssl/certs/ca-certificates.crt ] || pkgs+=(ca-certificates)
fi
if [ "${#pkgs[@]}" -gt 0 ]; then
    apt_install "${pkgs[@]}"
fi

# Rust: rustup's stable toolchain.
export PATH="$HOME/.cargo/bin:$PATH"
if ! command -v cargo >/dev/null 2>&1; then
    log "installing the Rust toolchain with rustup (stable, minimal + rustfmt + clippy)"
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs \
        | sh -s -- -y --profile minimal --default-toolchain stable -c rustfmt -c clippy
fi
if command -v rustup >/dev/null 2>&1; then
    cargo fmt --version >/dev/null 2>&1 || rustup component add rustfmt
    cargo clippy --version >/dev/null 2>&1 || rustup component add clippy
fi
log "dependencies OK: $(redis-server --version | cut -d' ' -f3), $(memcached -V), $(cargo --version)"
