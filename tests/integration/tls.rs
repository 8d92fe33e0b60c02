//! Native TLS 1.3 (issue 5), with real processes only: `openssl s_client`,
//! pymemcache over an `ssl.SSLContext`, a rustls client, memshift, and
//! `redis-server` serving TLS. Certificates are generated per test (rcgen).
//!
//! - the TLS listener serves set/get to `openssl s_client -tls1_3`, refuses
//!   `-tls1_2`, and closes a plaintext client without harm;
//! - pymemcache over TLS: set/get/get_many/cas, and a large value;
//! - mTLS: no certificate / a foreign CA refused, the right CA served, and
//!   `memshift_tls_handshakes_total{result}` counts each;
//! - SIGHUP swaps the certificate for new connections (fingerprint checked)
//!   while an open connection keeps working; a bad certificate is refused;
//! - a handshake that never finishes times out without blocking others;
//! - memshift over 3 TLS-only Redis shards (client certificate required)
//!   answers a command mix exactly like a real memcached.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use memshift_tests::process::{start_memshift_on_free_ports, toml_list};
use memshift_tests::tls::{wait_for_port, CertFiles, ClientOpts, Pki, TlsConn, TlsRedis};
use memshift_tests::{
    escape, free_port, pymemcache_python, require_tools, run_with_timeout, McClient, Memcached,
    Memshift, RedisServer,
};

const STEP: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------
// helpers

/// memshift with a plaintext and a TLS listener over `shards`.
struct TlsProxy {
    memshift: Memshift,
    tls_addr: String,
    admin_port: u16,
}

fn start_proxy(shards: &[String], tls_table: &str, redis_extra: &str) -> TlsProxy {
    let shard_list = toml_list(shards);
    let mut tls_port = 0;
    let (memshift, admin_port, _) = start_memshift_on_free_ports(|port, admin_port| {
        tls_port = free_port();
        format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\ntls_listen = \"127.0.0.1:{tls_port}\"\n\n\
             [admin]\nlisten = \"127.0.0.1:{admin_port}\"\n\n\
             [tls]\n{tls_table}\n\n\
             [redis]\nshards = [{shard_list}]\n{redis_extra}\n\n\
             [migration]\nphase = \"redis\"\n"
        )
    });
    let tls_addr = format!("127.0.0.1:{tls_port}");
    assert!(
        wait_for_port(&tls_addr, Duration::from_secs(10)),
        "TLS listener {tls_addr} never accepted; stderr:\n{}",
        memshift.stderr()
    );
    TlsProxy {
        memshift,
        tls_addr,
        admin_port,
    }
}

fn tls_table(cert: &CertFiles, client_ca: Option<&Path>, extra: &str) -> String {
    let mut t = format!(
        "cert = \"{}\"\nkey = \"{}\"\n",
        cert.cert.display(),
        cert.key.display()
    );
    if let Some(ca) = client_ca {
        t.push_str(&format!("client_ca = \"{}\"\n", ca.display()));
    }
    t.push_str(extra);
    t
}

/// Runs `sh -c script` (for stdin redirection and pipes) with a timeout.
fn sh(script: &str) -> memshift_tests::CommandOutput {
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(script);
    run_with_timeout(cmd, STEP).unwrap_or_else(|e| panic!("{e}"))
}

/// `memshift_tls_handshakes_total{result}` from `/metrics`.
fn handshakes(admin_port: u16, result: &str) -> u64 {
    let mut s = TcpStream::connect(("127.0.0.1", admin_port)).expect("connect to the admin port");
    s.set_read_timeout(Some(Duration::from_secs(5))).ok();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .expect("send");
    let mut body = String::new();
    s.read_to_string(&mut body).expect("read /metrics");
    let series = format!("memshift_tls_handshakes_total{{result=\"{result}\"}} ");
    body.lines()
        .find_map(|l| l.strip_prefix(&series))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
        .unwrap_or_else(|| panic!("no {series} in /metrics:\n{body}"))
}

/// Waits until the handshake counters equal `want` (result, count); the
/// panic shows the actual counts.
fn wait_handshakes(admin_port: u16, want: &[(&str, u64)]) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let got: Vec<(&str, u64)> = want
            .iter()
            .map(|(r, _)| (*r, handshakes(admin_port, r)))
            .collect();
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "memshift_tls_handshakes_total: want {want:?}, got {got:?}"
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Polls until `f` holds (metrics are updated by another task).
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// A TLS connection is refused when the handshake or the first exchange
/// fails (TLS 1.3 servers reject a client certificate after the client
/// considers the handshake done).
fn refused(addr: &str, opts: &ClientOpts<'_>) -> bool {
    match TlsConn::connect(addr, opts) {
        Err(_) => true,
        Ok(mut c) => c.request(b"version\r\n", b"\r\n").is_err(),
    }
}

fn served(addr: &str, opts: &ClientOpts<'_>) -> bool {
    TlsConn::connect(addr, opts)
        .and_then(|mut c| c.request(b"version\r\n", b"\r\n"))
        .map(|r| r.starts_with(b"VERSION "))
        .unwrap_or(false)
}

fn sha256_of_cert_file(path: &Path) -> String {
    let out = sh(&format!(
        "openssl x509 -in '{}' -noout -fingerprint -sha256",
        path.display()
    ));
    assert!(out.status.success(), "openssl x509: {}", out.stderr);
    out.stdout.trim().to_string()
}

/// The SHA-256 fingerprint of the certificate `addr` serves, per openssl.
fn served_sha256(addr: &str, ca: &Path) -> String {
    let out = sh(&format!(
        "openssl s_client -tls1_3 -connect {addr} -CAfile '{}' -verify_return_error </dev/null 2>/dev/null \
         | openssl x509 -noout -fingerprint -sha256",
        ca.display()
    ));
    assert!(
        out.status.success(),
        "s_client | x509 failed: {}",
        out.stderr
    );
    out.stdout.trim().to_string()
}

// ---------------------------------------------------------------------------
// tests

#[test]
fn tls_openssl_s_client_plaintext_and_versions() {
    if !require_tools("tls_openssl_s_client", &["redis-server", "openssl"]) {
        return;
    }
    let redis = RedisServer::start();
    let pki = Pki::new("srv");
    let cert = pki.issue("memshift", &["127.0.0.1", "localhost"]);
    let mut proxy = start_proxy(&[redis.addr()], &tls_table(&cert, None, ""), "");
    let addr = proxy.tls_addr.clone();

    // TLS 1.3 with the certificate verified, then set/get through it.
    let input = pki.dir().join("s_client.in");
    std::fs::write(
        &input,
        b"set tls:k 5 0 5\r\nhello\r\nget tls:k\r\nquit\r\n" as &[u8],
    )
    .unwrap();
    let out = sh(&format!(
        "openssl s_client -tls1_3 -quiet -connect {addr} -CAfile '{}' -verify_return_error -verify_ip 127.0.0.1 <'{}'",
        pki.ca_cert().display(),
        input.display()
    ));
    assert!(
        out.stdout
            .contains("STORED\r\nVALUE tls:k 5 5\r\nhello\r\nEND\r\n"),
        "s_client -tls1_3 set/get: status {}\nstdout: {}\nstderr: {}",
        out.status,
        escape(out.stdout.as_bytes(), 500),
        out.stderr
    );
    // The value really went through to the shard.
    assert_eq!(
        proxy.memshift.client().get("tls:k").unwrap().as_deref(),
        Some(&b"hello"[..])
    );

    // TLS 1.2 is refused in the handshake.
    let out = sh(&format!(
        "openssl s_client -tls1_2 -connect {addr} -CAfile '{}' </dev/null",
        pki.ca_cert().display()
    ));
    assert!(
        !out.status.success(),
        "s_client -tls1_2 was accepted:\n{}\n{}",
        out.stdout,
        out.stderr
    );
    assert!(
        out.stdout.contains("Cipher is (NONE)")
            || out.stderr.to_ascii_lowercase().contains("alert"),
        "no sign of a refused handshake:\n{}\n{}",
        out.stdout,
        out.stderr
    );

    // A plaintext memcached client on the TLS port: closed, nothing else.
    let mut plain = McClient::connect(&addr).expect("TCP connect to the TLS port");
    plain.send(b"get tls:k\r\n").expect("send");
    let (bytes, closed) =
        plain.read_until_closed_or_idle(Duration::from_secs(3), Duration::from_secs(10));
    assert!(
        closed,
        "plaintext client not closed; got {}",
        escape(&bytes, 200)
    );
    assert!(
        !bytes.windows(5).any(|w| w == b"hello"),
        "data leaked in plaintext"
    );

    // memshift keeps serving, both listeners.
    assert!(proxy.memshift.is_running(), "memshift died");
    let ca = pki.ca_cert();
    let opts = ClientOpts {
        ca: Some(&ca),
        ..ClientOpts::default()
    };
    let mut c = TlsConn::connect(&addr, &opts).expect("TLS after the bad clients");
    assert_eq!(
        c.request_str(b"get tls:k\r\n", b"END\r\n").unwrap(),
        "VALUE tls:k 5 5\r\nhello\r\nEND\r\n"
    );
    assert_eq!(c.peer_cert().as_deref(), Some(&cert.der[..]));
    assert_eq!(
        proxy.memshift.client().request_str(b"version\r\n").unwrap()[..8],
        *"VERSION "
    );
    eventually("ok and error handshakes counted", || {
        handshakes(proxy.admin_port, "ok") >= 2 && handshakes(proxy.admin_port, "error") >= 2
    });
}

#[test]
fn tls_large_values_and_pipelining() {
    if !require_tools("tls_large_values", &["redis-server"]) {
        return;
    }
    let redis = RedisServer::start();
    let pki = Pki::new("big");
    let cert = pki.issue("memshift", &["127.0.0.1"]);
    let proxy = start_proxy(&[redis.addr()], &tls_table(&cert, None, ""), "");
    let ca = pki.ca_cert();
    let opts = ClientOpts {
        ca: Some(&ca),
        ..ClientOpts::default()
    };
    let mut c = TlsConn::connect(&proxy.tls_addr, &opts).expect("connect");
    // Replies much larger than rustls' buffers must arrive whole, with no
    // further request to push them out.
    let value: Vec<u8> = (0..900_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let mut req = format!("set big 0 0 {}\r\n", value.len()).into_bytes();
    req.extend_from_slice(&value);
    req.extend_from_slice(b"\r\n");
    assert_eq!(c.request(&req, b"\r\n").unwrap(), b"STORED\r\n");
    for _ in 0..3 {
        let reply = c.request(b"get big\r\n", b"END\r\n").unwrap();
        let header = format!("VALUE big 0 {}\r\n", value.len());
        assert!(reply.starts_with(header.as_bytes()));
        assert_eq!(&reply[header.len()..header.len() + value.len()], &value[..]);
    }
    // A client that pipelines many large reads and only then reads: the
    // socket fills, so the last reply's tail is still queued in rustls when
    // the session has nothing more to write. It must arrive all the same.
    let n = 8;
    let want_len = n * (format!("VALUE big 0 {}\r\n", value.len()).len() + value.len() + 7);
    c.send("get big\r\n".repeat(n).as_bytes()).unwrap();
    let got = c
        .read_paced(|got| got.len() >= want_len, Duration::from_millis(2))
        .unwrap_or_else(|e| panic!("pipelined large replies: {e}"));
    assert_eq!(got.len(), want_len);
    assert!(got.ends_with(b"\r\nEND\r\n"));
    // 200 pipelined commands in one write.
    let mut batch = Vec::new();
    for i in 0..100 {
        batch.extend_from_slice(format!("set p{i} 0 0 3\r\nv{i:02}\r\nget p{i}\r\n").as_bytes());
    }
    let reply = c
        .request(&batch, b"VALUE p99 0 3\r\nv99\r\nEND\r\n")
        .unwrap();
    let text = String::from_utf8_lossy(&reply);
    assert_eq!(text.matches("STORED\r\n").count(), 100, "{text}");
    assert_eq!(text.matches("END\r\n").count(), 100, "{text}");
}

#[test]
fn tls_pymemcache_ssl_context() {
    if !require_tools("tls_pymemcache", &["python3", "redis-server"]) {
        return;
    }
    let python = pymemcache_python();
    let redis = RedisServer::start();
    let pki = Pki::new("py");
    let cert = pki.issue("memshift", &["127.0.0.1", "localhost"]);
    let proxy = start_proxy(&[redis.addr()], &tls_table(&cert, None, ""), "");
    let script = pki.dir().join("tls_pymemcache.py");
    std::fs::write(&script, PY_SCRIPT).unwrap();
    let port = proxy.tls_addr.rsplit(':').next().unwrap().to_string();
    let mut cmd = Command::new(&python);
    cmd.arg(&script).arg(port).arg(pki.ca_cert());
    let out = run_with_timeout(cmd, Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        out.status.success() && out.stdout.contains("PYMEMCACHE TLS OK"),
        "pymemcache over TLS failed ({}):\n{}\n{}\nmemshift stderr:\n{}",
        out.status,
        out.stdout,
        out.stderr,
        proxy.memshift.stderr()
    );
}

const PY_SCRIPT: &str = r#"
import ssl, sys
from pymemcache.client.base import Client

port, ca = int(sys.argv[1]), sys.argv[2]

def check(cond, what):
    if not cond:
        print("FAIL:", what, flush=True)
        sys.exit(1)
    print("ok:", what, flush=True)

ctx = ssl.create_default_context(cafile=ca)
ctx.minimum_version = ssl.TLSVersion.TLSv1_3
c = Client(("127.0.0.1", port), tls_context=ctx, connect_timeout=5, timeout=5,
           default_noreply=False)
check(c.set("py:a", b"alpha") is True, "set")
check(c.get("py:a") == b"alpha", "get")
check(c.get("py:missing") is None, "get missing")
keys = ["py:k%02d" % i for i in range(20)]
check(c.set_many({k: k.encode() for k in keys}) == [], "set_many")
check(c.get_many(keys + ["py:missing"]) == {k: k.encode() for k in keys}, "get_many")
v, unique = c.gets("py:a")
check(v == b"alpha" and unique is not None, "gets")
check(c.cas("py:a", b"beta", unique) is True, "cas fresh")
check(c.cas("py:a", b"gamma", unique) is False, "cas stale")
check(c.get("py:a") == b"beta", "value after cas")
big = bytes(range(256)) * 2000
check(c.set("py:big", big) is True, "set 512000 bytes")
check(c.get("py:big") == big, "get 512000 bytes")
check(c.delete("py:a") is True, "delete")
check(c.version().startswith(b"1."), "version")
c.close()

ctx12 = ssl.create_default_context(cafile=ca)
ctx12.maximum_version = ssl.TLSVersion.TLSv1_2
try:
    Client(("127.0.0.1", port), tls_context=ctx12, connect_timeout=5, timeout=5).get("py:a")
    check(False, "a TLS 1.2-only client is refused")
except (ssl.SSLError, OSError) as e:
    check(True, "a TLS 1.2-only client is refused (%s)" % type(e).__name__)
print("PYMEMCACHE TLS OK", flush=True)
"#;

#[test]
fn tls_mutual_auth() {
    if !require_tools("tls_mutual_auth", &["redis-server", "openssl"]) {
        return;
    }
    let redis = RedisServer::start();
    let server_pki = Pki::new("server");
    let clients = Pki::new("clients");
    let other = Pki::new("other");
    let cert = server_pki.issue("memshift", &["127.0.0.1"]);
    let good = clients.issue("app", &["app.internal"]);
    let foreign = other.issue("intruder", &["app.internal"]);
    let proxy = start_proxy(
        &[redis.addr()],
        &tls_table(&cert, Some(&clients.ca_cert()), ""),
        "",
    );
    let addr = proxy.tls_addr.as_str();
    let ca = server_pki.ca_cert();
    let base = ClientOpts {
        ca: Some(&ca),
        ..ClientOpts::default()
    };

    assert!(
        refused(addr, &base),
        "a client without a certificate was served"
    );
    wait_handshakes(
        proxy.admin_port,
        &[("ok", 0), ("error", 0), ("no_client_cert", 1)],
    );

    let with_good = ClientOpts {
        client: Some(&good),
        ..base.clone()
    };
    assert!(
        served(addr, &with_good),
        "a client certificate from client_ca was refused; stderr:\n{}",
        proxy.memshift.stderr()
    );
    wait_handshakes(
        proxy.admin_port,
        &[("ok", 1), ("error", 0), ("no_client_cert", 1)],
    );

    let with_foreign = ClientOpts {
        client: Some(&foreign),
        ..base.clone()
    };
    assert!(
        refused(addr, &with_foreign),
        "a client certificate from another CA was served"
    );
    wait_handshakes(
        proxy.admin_port,
        &[("ok", 1), ("error", 1), ("no_client_cert", 1)],
    );

    // openssl agrees: with the right certificate set/get works, without it
    // the server aborts the handshake.
    let input = server_pki.dir().join("in");
    std::fs::write(&input, b"set m 0 0 2\r\nok\r\nget m\r\nquit\r\n" as &[u8]).unwrap();
    let out = sh(&format!(
        "openssl s_client -tls1_3 -quiet -connect {addr} -CAfile '{}' -cert '{}' -key '{}' <'{}'",
        ca.display(),
        good.cert.display(),
        good.key.display(),
        input.display()
    ));
    assert!(
        out.stdout
            .contains("STORED\r\nVALUE m 0 2\r\nok\r\nEND\r\n"),
        "s_client with a client certificate: {}\n{}",
        escape(out.stdout.as_bytes(), 300),
        out.stderr
    );
    let out = sh(&format!(
        "openssl s_client -tls1_3 -quiet -connect {addr} -CAfile '{}' <'{}'",
        ca.display(),
        input.display()
    ));
    assert!(
        !out.stdout.contains("STORED"),
        "s_client without a client certificate was served: {}",
        out.stdout
    );
    wait_handshakes(
        proxy.admin_port,
        &[
            ("ok", 2),
            ("error", 1),
            ("no_client_cert", 2),
            ("timeout", 0),
        ],
    );
}

#[test]
fn tls_certificate_reload_on_sighup() {
    if !require_tools("tls_certificate_reload", &["redis-server", "openssl"]) {
        return;
    }
    let redis = RedisServer::start();
    let pki = Pki::new("rot");
    let first = pki.issue("first", &["127.0.0.1"]);
    let second = pki.issue("second", &["127.0.0.1"]);
    // The config points at fixed paths; rotation rewrites the files.
    let live = CertFiles {
        cert: pki.dir().join("live.crt"),
        key: pki.dir().join("live.key"),
        der: first.der.clone(),
    };
    std::fs::copy(&first.cert, &live.cert).unwrap();
    std::fs::copy(&first.key, &live.key).unwrap();
    let proxy = start_proxy(&[redis.addr()], &tls_table(&live, None, ""), "");
    let addr = proxy.tls_addr.as_str();
    let ca = pki.ca_cert();
    let opts = ClientOpts {
        ca: Some(&ca),
        ..ClientOpts::default()
    };

    let mut before = TlsConn::connect(addr, &opts).expect("connect");
    assert_eq!(before.peer_cert().as_deref(), Some(&first.der[..]));
    assert_eq!(served_sha256(addr, &ca), sha256_of_cert_file(&first.cert));
    assert_eq!(
        before
            .request(b"set r 0 0 6\r\nbefore\r\n", b"\r\n")
            .unwrap(),
        b"STORED\r\n"
    );

    std::fs::copy(&second.cert, &live.cert).unwrap();
    std::fs::copy(&second.key, &live.key).unwrap();
    proxy.memshift.sighup();
    eventually("new connections get the second certificate", || {
        TlsConn::connect(addr, &opts)
            .ok()
            .and_then(|c| c.peer_cert())
            .as_deref()
            == Some(&second.der[..])
    });
    assert_eq!(served_sha256(addr, &ca), sha256_of_cert_file(&second.cert));
    assert_ne!(
        sha256_of_cert_file(&first.cert),
        sha256_of_cert_file(&second.cert)
    );
    // The connection opened before the reload keeps working.
    assert_eq!(
        before.request_str(b"get r\r\n", b"END\r\n").unwrap(),
        "VALUE r 0 6\r\nbefore\r\nEND\r\n"
    );

    // A bad certificate is refused; the second stays in service.
    std::fs::write(
        &live.cert,
        b"-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n" as &[u8],
    )
    .unwrap();
    proxy.memshift.sighup();
    eventually("the refused reload is logged", || {
        proxy.memshift.stderr().contains("TLS reload refused")
    });
    // And a valid certificate with the wrong key likewise.
    std::fs::copy(&first.cert, &live.cert).unwrap();
    proxy.memshift.sighup();
    eventually("the mismatched key is refused", || {
        proxy
            .memshift
            .stderr()
            .matches("TLS reload refused")
            .count()
            >= 2
    });
    let after = TlsConn::connect(addr, &opts).expect("connect after bad reloads");
    assert_eq!(after.peer_cert().as_deref(), Some(&second.der[..]));
    assert_eq!(
        before.request_str(b"get r\r\n", b"END\r\n").unwrap(),
        "VALUE r 0 6\r\nbefore\r\nEND\r\n"
    );
}

#[test]
fn tls_handshake_timeout_does_not_block_others() {
    if !require_tools("tls_handshake_timeout", &["redis-server"]) {
        return;
    }
    let redis = RedisServer::start();
    let pki = Pki::new("slow");
    let cert = pki.issue("memshift", &["127.0.0.1"]);
    let proxy = start_proxy(
        &[redis.addr()],
        &tls_table(&cert, None, "handshake_timeout_ms = 2000\n"),
        "",
    );
    let ca = pki.ca_cert();
    let opts = ClientOpts {
        ca: Some(&ca),
        ..ClientOpts::default()
    };
    // Silent clients, and one that stops mid-ClientHello.
    let mut silent: Vec<McClient> = (0..5)
        .map(|_| McClient::connect(&proxy.tls_addr).expect("connect"))
        .collect();
    silent[0].send(&[0x16, 0x03, 0x01, 0x02, 0x00]).unwrap();
    // Meanwhile a real client is served at once.
    let started = Instant::now();
    assert!(served(&proxy.tls_addr, &opts));
    // Well before the silent ones time out: they do not hold it up.
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "served after {:?}",
        started.elapsed()
    );
    for (i, c) in silent.iter_mut().enumerate() {
        let (_, closed) =
            c.read_until_closed_or_idle(Duration::from_secs(5), Duration::from_secs(10));
        assert!(
            closed,
            "silent client {i} not closed after the handshake timeout"
        );
    }
    wait_handshakes(proxy.admin_port, &[("ok", 1), ("timeout", 5)]);
}

#[test]
fn tls_to_redis_shards_matches_memcached() {
    if !require_tools("tls_to_redis_shards", &["redis-server", "memcached"]) {
        return;
    }
    let pki = Pki::new("redis");
    let shards: Vec<TlsRedis> = (0..3).map(|_| TlsRedis::start(&pki, "yes")).collect();
    let client = &shards[0].client;
    let front = pki.issue("front", &["127.0.0.1"]);
    let redis_extra = format!(
        "tls = true\ntls_ca = \"{}\"\ntls_cert = \"{}\"\ntls_key = \"{}\"\n",
        pki.ca_cert().display(),
        client.cert.display(),
        client.key.display()
    );
    let addrs: Vec<String> = shards.iter().map(TlsRedis::addr).collect();
    let proxy = start_proxy(&addrs, &tls_table(&front, None, ""), &redis_extra);
    let reference = Memcached::start();

    let mut target = proxy.memshift.client();
    let mut want = reference.client();
    let mut cas_target = std::collections::HashMap::new();
    let mut cas_want = std::collections::HashMap::new();
    let steps = differential_steps();
    for (i, step) in steps.iter().enumerate() {
        let (a, b) = match step {
            Step::Raw(req) => (
                target.request(req).unwrap_or_else(|e| {
                    panic!(
                        "step {i}: {e}\nmemshift stderr:\n{}",
                        proxy.memshift.stderr()
                    )
                }),
                want.request(req).unwrap(),
            ),
            Step::Gets(key) => {
                let req = format!("gets {key}\r\n").into_bytes();
                let a = target.request(&req).unwrap();
                let b = want.request(&req).unwrap();
                (
                    remember_cas(&a, key, &mut cas_target),
                    remember_cas(&b, key, &mut cas_want),
                )
            }
            Step::Cas(key, value) => {
                let req = |unique: u64| {
                    format!("cas {key} 0 0 {} {unique}\r\n{value}\r\n", value.len()).into_bytes()
                };
                // A key never read with gets: any unique (NOT_FOUND on both).
                let ta = cas_target.get(key.as_str()).copied().unwrap_or(1);
                let tb = cas_want.get(key.as_str()).copied().unwrap_or(1);
                (
                    target.request(&req(ta)).unwrap(),
                    want.request(&req(tb)).unwrap(),
                )
            }
        };
        assert_eq!(
            escape(&a, 400),
            escape(&b, 400),
            "step {i} ({step:?}): memshift over TLS Redis differs from memcached"
        );
    }
    // Every shard got keys, so every TLS connection carried traffic.
    let sizes: Vec<i64> = shards.iter().map(TlsRedis::dbsize).collect();
    assert!(
        sizes.iter().all(|&n| n > 0),
        "keys not on all 3 TLS shards: {sizes:?}"
    );
}

/// `--tls-auth-clients no`: no client certificate needed; the shard's name
/// is still verified (`tls_server_name`), and a wrong name never connects.
#[test]
fn tls_to_redis_server_name_is_verified() {
    if !require_tools("tls_to_redis_server_name", &["redis-server"]) {
        return;
    }
    let pki = Pki::new("redis-name");
    let shard = TlsRedis::start(&pki, "no");
    let front = pki.issue("front", &["127.0.0.1"]);
    let start = |name: &str| {
        let extra = format!(
            "tls = true\ntls_ca = \"{}\"\ntls_server_name = \"{name}\"\ntimeout_ms = 300\n",
            pki.ca_cert().display()
        );
        start_proxy(&[shard.addr()], &tls_table(&front, None, ""), &extra)
    };

    let good = start("localhost");
    let mut c = good.memshift.client();
    c.set("n", b"v")
        .unwrap_or_else(|e| panic!("set over TLS: {e}\n{}", good.memshift.stderr()));
    assert_eq!(c.get("n").unwrap().as_deref(), Some(&b"v"[..]));
    assert_eq!(shard.dbsize(), 1);

    let wrong = start("not-the-shard.example");
    // A write (a read would be a miss: redis.read_errors_as_misses).
    let reply = wrong
        .memshift
        .client()
        .request_str(b"set n 0 0 1\r\nx\r\n")
        .unwrap();
    assert!(reply.starts_with("SERVER_ERROR"), "{reply}");
    eventually("the name mismatch is logged", || {
        wrong.memshift.stderr().contains("not-the-shard.example")
            || wrong.memshift.stderr().contains("NotValidForName")
    });
}

#[derive(Debug)]
enum Step {
    Raw(Vec<u8>),
    /// `gets key`, remembering each side's unique (replaced by `<cas>`).
    Gets(String),
    /// `cas key 0 0 len <the remembered unique>`.
    Cas(String, String),
}

fn differential_steps() -> Vec<Step> {
    let mut steps = Vec::new();
    let raw = |s: String| Step::Raw(s.into_bytes());
    for i in 0..40 {
        steps.push(raw(format!(
            "set k{i} {i} 0 {}\r\nvalue-{i}\r\n",
            6 + digits(i)
        )));
    }
    let all: Vec<String> = (0..40).map(|i| format!("k{i}")).collect();
    steps.push(raw(format!("get {} nokey\r\n", all.join(" "))));
    steps.push(raw("get k1 k1 k2\r\n".into()));
    steps.push(raw("set n 0 0 2\r\n10\r\n".into()));
    steps.push(raw("incr n 5\r\n".into()));
    steps.push(raw("decr n 100\r\n".into()));
    steps.push(raw("incr nokey 1\r\n".into()));
    steps.push(raw("incr k1 1\r\n".into()));
    steps.push(raw("get n\r\n".into()));
    steps.push(Step::Gets("k3".into()));
    steps.push(Step::Cas("k3".into(), "swapped".into()));
    steps.push(Step::Cas("k3".into(), "stale".into()));
    steps.push(raw("get k3\r\n".into()));
    steps.push(Step::Cas("nokey".into(), "x".into()));
    steps.push(raw("delete k4\r\n".into()));
    steps.push(raw("delete k4\r\n".into()));
    steps.push(raw("get k4 k5\r\n".into()));
    steps.push(raw("add k5 0 0 1\r\nx\r\n".into()));
    steps.push(raw("add fresh 0 0 1\r\nx\r\n".into()));
    steps.push(raw("append fresh 0 0 2\r\nyz\r\n".into()));
    steps.push(raw("get fresh\r\n".into()));
    steps.push(raw(format!("get {}\r\n", all.join(" "))));
    steps
}

fn digits(i: usize) -> usize {
    i.to_string().len()
}

/// Records the unique of a `gets` reply and hides it for the comparison.
fn remember_cas(
    reply: &[u8],
    key: &str,
    seen: &mut std::collections::HashMap<String, u64>,
) -> Vec<u8> {
    let text = String::from_utf8_lossy(reply).into_owned();
    let Some((header, rest)) = text.split_once("\r\n") else {
        return reply.to_vec();
    };
    let parts: Vec<&str> = header.split(' ').collect();
    if parts.len() == 5 && parts[0] == "VALUE" {
        if let Ok(unique) = parts[4].parse::<u64>() {
            seen.insert(key.to_string(), unique);
        }
        return format!(
            "{} {} {} {} <cas>\r\n{rest}",
            parts[0], parts[1], parts[2], parts[3]
        )
        .into_bytes();
    }
    reply.to_vec()
}
