//! Real clients over memshift's unix socket: pymemcache, PHP `Memcached`
//! (libmemcached), gomemcache, and redis-py on the RESP socket.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use memshift_tests::{
    pymemcache_python, redis_py_python, require_tools, run_with_timeout, tool_available,
};

use super::{unix, UnixProxy};

/// Runs `cmd`; it must succeed and print `done`.
fn run_client(what: &str, cmd: Command, done: &str) {
    let out = run_with_timeout(cmd, Duration::from_secs(180)).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        out.status.success() && out.stdout.contains(done),
        "{what} over the unix socket failed ({}):\n{}\n{}",
        out.status,
        out.stdout,
        out.stderr
    );
}

const PYMEMCACHE_SCRIPT: &str = r#"
import sys
from pymemcache.client.base import Client
# A str server is a unix socket path.
c = Client(sys.argv[1], connect_timeout=5, timeout=5, default_noreply=False)
assert c.set("py:k", "v") is True
assert c.get("py:k") == b"v"
assert c.get("py:missing") is None
keys = ["py:%d" % i for i in range(20)]
assert c.set_many({k: k for k in keys}) == []
assert c.get_many(keys) == {k: k.encode() for k in keys}
v, cas = c.gets("py:k")
assert c.cas("py:k", "w", cas) is True
assert c.cas("py:k", "x", cas) is False
assert c.set("py:n", "10") is True
assert c.incr("py:n", 5) == 15
assert c.delete("py:k") is True
print("PYMEMCACHE DONE")
"#;

#[test]
fn pymemcache_over_the_unix_socket() {
    if !require_tools("pymemcache_unix", &["redis-server", "python3"]) {
        return;
    }
    let python = pymemcache_python();
    let proxy = UnixProxy::start("");
    let mut cmd = Command::new(python);
    cmd.args(["-c", PYMEMCACHE_SCRIPT]).arg(&proxy.path);
    run_client("pymemcache", cmd, "PYMEMCACHE DONE");
}

const PHP_SCRIPT: &str = r#"<?php
function check($ok, $what) { if (!$ok) { echo "FAIL: $what\n"; exit(1); } }
$m = new Memcached();
// libmemcached: a host starting with '/' is a unix socket, port 0.
check($m->addServer($argv[1], 0), "addServer");
check($m->set("php:k", "v"), "set: " . $m->getResultMessage());
check($m->get("php:k") === "v", "get");
check($m->get("php:missing") === false && $m->getResultCode() == Memcached::RES_NOTFOUND, "miss");
$items = [];
for ($i = 0; $i < 20; $i++) { $items["php:$i"] = "value-$i"; }
check($m->setMulti($items), "setMulti");
check($m->getMulti(array_keys($items)) == $items, "getMulti");
check($m->set("php:n", 10), "set counter");
check($m->increment("php:n", 5) === 15, "increment");
check($m->delete("php:k"), "delete");
echo "PHP DONE\n";
"#;

/// `php` with the memcached extension; installs Debian's `php-cli` and
/// `php-memcached` when missing and allowed (root with apt-get).
fn php_with_memcached() -> bool {
    let has_ext = || {
        let mut c = Command::new("php");
        c.args(["-r", "exit(class_exists('Memcached') ? 0 : 1);"]);
        run_with_timeout(c, Duration::from_secs(30)).is_ok_and(|o| o.status.success())
    };
    if tool_available("php") && has_ext() {
        return true;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !tool_available("apt-get") {
        return false;
    }
    let mut apt = Command::new("apt-get");
    apt.args([
        "install",
        "-y",
        "--no-install-recommends",
        "php-cli",
        "php-memcached",
    ])
    .env("DEBIAN_FRONTEND", "noninteractive");
    let _ = run_with_timeout(apt, Duration::from_secs(600));
    tool_available("php") && has_ext()
}

#[test]
fn php_memcached_over_the_unix_socket() {
    if !require_tools("php_memcached_unix", &["redis-server"]) {
        return;
    }
    if !php_with_memcached() {
        let msg = "php_memcached_unix needs php with the memcached extension (scripts/ensure-deps.sh installs php-cli php-memcached)";
        assert!(!memshift_tests::in_ci(), "{msg}");
        eprintln!("skipping: {msg}");
        return;
    }
    let proxy = UnixProxy::start("");
    let dir = tempfile::tempdir().expect("temp dir");
    let script = dir.path().join("client.php");
    std::fs::write(&script, PHP_SCRIPT).expect("write the PHP script");
    let mut cmd = Command::new("php");
    cmd.arg(&script).arg(&proxy.path);
    run_client("PHP Memcached", cmd, "PHP DONE");
}

#[test]
fn gomemcache_over_the_unix_socket() {
    if !require_tools("gomemcache_unix", &["redis-server", "go"]) {
        return;
    }
    let bin = memshift_tests::go::go_build("tests/integration/unix/gomemcache", "gomemcache-unix");
    let proxy = UnixProxy::start("");
    let mut cmd = Command::new(bin);
    cmd.arg(&proxy.path);
    run_client("gomemcache", cmd, "GOMEMCACHE DONE");
}

const REDIS_PY_SCRIPT: &str = r#"
import sys
import redis
r = redis.Redis(unix_socket_path=sys.argv[1], protocol=int(sys.argv[2]), socket_timeout=5)
assert r.ping() is True
r.delete("rp:n")
assert r.set("rp:k", "v") is True
assert r.get("rp:k") == b"v"
assert r.mset({"rp:a": "1", "rp:b": "2"}) is True
assert r.mget(["rp:a", "rp:b", "rp:missing"]) == [b"1", b"2", None]
assert r.incrby("rp:n", 5) == 5
assert r.delete("rp:k", "rp:a") == 2
print("REDIS-PY DONE")
"#;

#[test]
fn redis_py_over_the_resp_unix_socket() {
    if !require_tools("redis_py_unix", &["redis-server", "python3"]) {
        return;
    }
    let python = redis_py_python();
    let dir = super::socket_dir();
    let resp = dir.path().join("resp.sock");
    let proxy = UnixProxy::start(&format!("resp_listen = \"{}\"\n", unix(&resp)));
    wait_for(&resp);
    for proto in ["2", "3"] {
        let mut cmd = Command::new(&python);
        cmd.args(["-c", REDIS_PY_SCRIPT]).arg(&resp).arg(proto);
        run_client(&format!("redis-py RESP{proto}"), cmd, "REDIS-PY DONE");
    }
    drop(proxy);
}

/// The RESP listener binds right after the memcached one the start waited for.
fn wait_for(path: &Path) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::os::unix::net::UnixStream::connect(path).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "{} never accepted",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `tls_listen` on a unix socket: the TLS 1.3 handshake and requests run
/// over it as over TCP.
#[test]
fn tls_over_the_unix_socket() {
    use memshift_tests::tls::{ClientOpts, Pki, TlsConn};
    if !require_tools("tls_unix", &["redis-server"]) {
        return;
    }
    let pki = Pki::new("unix");
    let cert = pki.issue("memshift", &["127.0.0.1"]);
    let dir = super::socket_dir();
    let tls_sock = dir.path().join("tls.sock");
    let shard = memshift_tests::RedisServer::start();
    let config = super::config(
        &unix(&dir.path().join("plain.sock")),
        memshift_tests::free_port(),
        &[shard.addr()],
        &format!("tls_listen = \"{}\"\n", unix(&tls_sock)),
    ) + &format!(
        "\n[tls]\ncert = \"{}\"\nkey = \"{}\"\n",
        cert.cert.display(),
        cert.key.display()
    );
    let memshift = memshift_tests::Memshift::start(&config);
    wait_for(&tls_sock);
    let ca = pki.ca_cert();
    let opts = ClientOpts {
        ca: Some(&ca),
        ..ClientOpts::default()
    };
    let mut c = TlsConn::connect(&unix(&tls_sock), &opts).expect("TLS over the socket");
    let stored = c
        .request_str(b"set tls:k 0 0 1\r\nv\r\n", b"\r\n")
        .expect("set");
    assert_eq!(stored, "STORED\r\n", "{}", memshift.stderr());
    let got = c.request_str(b"get tls:k\r\n", b"END\r\n").expect("get");
    assert_eq!(got, "VALUE tls:k 0 1\r\nv\r\nEND\r\n");
}
