//! A store refused as too large: memcached 1.6.18 drops the key's old item
//! for `set` and `ms` (any mode), and keeps it for the other commands and
//! for lines rejected before the size check. Each reproduction goes to a
//! real memcached and to memshift on fresh connections; the replies must be
//! byte-identical (the `VERSION` sentinel aside).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use memshift_tests::{escape, require_tools, Cluster, ClusterOptions, Memcached};

/// `memcached -I` and memshift's `[server] max_item_size`.
const MAX_ITEM: usize = 1 << 20;

/// `line`, then `len` data bytes and `\r\n`.
fn with_data(line: &str, len: usize) -> Vec<u8> {
    let mut out = line.as_bytes().to_vec();
    out.resize(out.len() + len, b'x');
    out.extend(b"\r\n");
    out
}

/// (name, bytes): each stores `sk` first, then is refused, then reads back.
fn cases() -> Vec<(&'static str, Vec<u8>)> {
    let store = |k: &str| format!("set {k} 0 0 1\r\na\r\n").into_bytes();
    let get = |k: &str| format!("get {k}\r\n").into_bytes();
    let refused = |line: &str| [store("sk"), with_data(line, 1_048_577), get("sk")].concat();
    vec![
        (
            "7 tokens: ERROR, kept",
            [
                store("sk"),
                b"set sk 0 0 2000000 noreply junk\r\n".to_vec(),
                get("sk"),
            ]
            .concat(),
        ),
        (
            "length above INT_MAX - 2: bad format, kept",
            [
                store("sk"),
                b"set sk 0 0 2147483646\r\n".to_vec(),
                get("sk"),
            ]
            .concat(),
        ),
        (
            "negative length: bad format, kept",
            [store("sk"), b"set sk 0 0 -1\r\n".to_vec(), get("sk")].concat(),
        ),
        (
            "key with a CR: the other key kept",
            [
                b"set key\r 0 0 1\r\na\r\nset key 0 0 1\r\nb\r\n".to_vec(),
                with_data("set key\r 0 0 1048577\r\n", 1_048_577),
                b"get key\r\r\nget key\r\n".to_vec(),
            ]
            .concat(),
        ),
        ("set: dropped", refused("set sk 0 0 1048577\r\n")),
        (
            "set noreply: dropped",
            refused("set sk 0 0 1048577 noreply\r\n"),
        ),
        (
            "set junk token: dropped",
            refused("set sk 0 0 1048577 junk\r\n"),
        ),
        (
            "flags wrap to 0: dropped",
            refused("set sk 4294967296 0 1048577\r\n"),
        ),
        (
            "negative exptime: dropped",
            refused("set sk 0 -1 1048577\r\n"),
        ),
        ("add: kept", refused("add sk 0 0 1048577\r\n")),
        ("replace: kept", refused("replace sk 0 0 1048577\r\n")),
        ("append: kept", refused("append sk 0 0 1048577\r\n")),
        ("prepend: kept", refused("prepend sk 0 0 1048577\r\n")),
        ("cas: kept", refused("cas sk 0 0 1048577 1\r\n")),
        ("ms: dropped", refused("ms sk 1048577\r\n")),
        ("ms q ME: dropped", refused("ms sk 1048577 q ME\r\n")),
        ("ms MA: dropped", refused("ms sk 1048577 MA\r\n")),
        ("ms I C: dropped", refused("ms sk 1048577 I C1\r\n")),
        ("ms base64 key: dropped", refused("ms c2s= 1048577 b\r\n")),
        ("ms bad mode: kept", refused("ms sk 1048577 MX\r\n")),
    ]
}

/// Replies to `input` up to the `version` sentinel appended to it, without
/// the sentinel's line.
fn replies(addr: &str, input: &[u8]) -> Vec<u8> {
    let mut conn = TcpStream::connect(addr).expect("connect");
    conn.set_read_timeout(Some(Duration::from_secs(10))).ok();
    conn.write_all(b"flush_all\r\n").expect("send");
    conn.write_all(input).expect("send");
    conn.write_all(b"version\r\n").expect("send");
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut out = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    while Instant::now() < deadline {
        if let Some(at) = sentinel_at(&out) {
            out.truncate(at);
            return out;
        }
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&chunk[..n]),
        }
    }
    panic!("no VERSION reply from {addr}: got {}", escape(&out, 400));
}

/// Where the last line, a complete `VERSION ...` line, starts.
fn sentinel_at(out: &[u8]) -> Option<usize> {
    let body = out.strip_suffix(b"\r\n")?;
    let start = body.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    body[start..].starts_with(b"VERSION ").then_some(start)
}

#[test]
fn oversize_refusal_matches_memcached() {
    if !require_tools("oversize_refusal", &["memcached", "redis-server"]) {
        return;
    }
    let reference = Memcached::start_with_args(&["-I", "1m"]);
    let target = Cluster::start_with(ClusterOptions {
        server_extra: format!("max_item_size = {MAX_ITEM}\n"),
        ..ClusterOptions::default()
    });
    let mut diffs = Vec::new();
    for (name, input) in cases() {
        let want = replies(&reference.addr(), &input);
        let got = replies(target.addr(), &input);
        if want != got {
            diffs.push(format!(
                "{name}\n  memcached: {}\n  memshift:  {}",
                escape(&want, 300),
                escape(&got, 300)
            ));
        }
    }
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}
