#!/usr/bin/env bash
# `make run-tls`: like `make run`, plus the memcached protocol over TLS 1.3 on
# 127.0.0.1:11212. A throwaway CA, a server certificate (127.0.0.1,
# localhost) and a client certificate are generated with openssl into a temp
# dir, removed on exit. MTLS=1 also requires client certificates (mTLS).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

TLS_PORT=${TLS_PORT:-11212}
command -v openssl >/dev/null 2>&1 || apt_install openssl
port_in_use "$TLS_PORT" && die "127.0.0.1:$TLS_PORT is already in use"

DIR=$(mktemp -d -t memshift-tls.XXXXXX)
cleanup() {
    rm -rf "$DIR"
}
trap cleanup INT TERM EXIT

# ECDSA P-256 keys; the leaves are X.509 v3 (rustls refuses v1 certificates).
newkey=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes)
openssl req -x509 "${newkey[@]}" -days 30 -subj "/CN=memshift local CA" \
    -keyout "$DIR/ca.key" -out "$DIR/ca.crt" 2>/dev/null
issue() { # issue NAME SUBJECT EXTENSIONS
    openssl req "${newkey[@]}" -subj "$2" -keyout "$DIR/$1.key" -out "$DIR/$1.csr" 2>/dev/null
    printf '%s\n' "$3" >"$DIR/$1.ext"
    openssl x509 -req -in "$DIR/$1.csr" -CA "$DIR/ca.crt" -CAkey "$DIR/ca.key" \
        -CAcreateserial -days 30 -extfile "$DIR/$1.ext" -out "$DIR/$1.crt" 2>/dev/null
}
issue server "/CN=localhost" "subjectAltName=IP:127.0.0.1,DNS:localhost
basicConstraints=CA:FALSE
extendedKeyUsage=serverAuth"
issue client "/CN=memshift local client" "basicConstraints=CA:FALSE
extendedKeyUsage=clientAuth"
chmod 600 "$DIR"/*.key

# config/local.toml plus tls_listen and a [tls] table.
CONFIG="$DIR/memshift-tls.toml"
awk -v tls="tls_listen = \"127.0.0.1:$TLS_PORT\"" '
    /^\[/ { section = $0 }
    { print }
    section == "[server]" && /^listen *=/ { print tls }
' config/local.toml >"$CONFIG"
{
    printf '\n[tls]\ncert = "%s"\nkey = "%s"\n' "$DIR/server.crt" "$DIR/server.key"
    if [ "${MTLS:-0}" = 1 ]; then
        printf 'client_ca = "%s"\n' "$DIR/ca.crt"
    fi
} >>"$CONFIG"

log "TLS 1.3 on 127.0.0.1:$TLS_PORT; certificates in $DIR (CA: $DIR/ca.crt)"
log "try: openssl s_client -tls1_3 -quiet -crlf -connect 127.0.0.1:$TLS_PORT -CAfile $DIR/ca.crt$([ "${MTLS:-0}" = 1 ] && printf ' -cert %s -key %s' "$DIR/client.crt" "$DIR/client.key")"
MEMSHIFT_CONFIG="$CONFIG" ./scripts/run-local.sh
