//! Backends on this host over their own unix sockets: a Redis shard with
//! `unixsocket` (redis.conf) next to a TCP one on the same ring, and a
//! legacy memcached started with `-s`.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use memshift_tests::{free_port, require_tools, McClient, Memshift, RedisServer};

use super::{socket_dir, unix};

/// A server process listening only on a unix socket; killed on drop.
struct SocketServer {
    child: Child,
    path: PathBuf,
}

impl SocketServer {
    fn start(mut cmd: Command, path: &Path, ready: impl Fn(&Path) -> bool) -> SocketServer {
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
        let server = SocketServer {
            child,
            path: path.to_owned(),
        };
        let deadline = Instant::now() + Duration::from_secs(15);
        while !ready(path) {
            assert!(
                Instant::now() < deadline,
                "{cmd:?} never answered on {}",
                path.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    /// `redis-server` on `path` only (`port 0`), mode 700.
    fn redis(path: &Path) -> SocketServer {
        let mut cmd = Command::new("redis-server");
        cmd.args(["--port", "0", "--save", "", "--appendonly", "no"])
            .arg("--unixsocket")
            .arg(path)
            .args(["--unixsocketperm", "700"]);
        SocketServer::start(cmd, path, |p| redis_cmd(p, &[b"PING"]) == b"+PONG\r\n")
    }

    /// `memcached -s path -a 0700`.
    fn memcached(path: &Path) -> SocketServer {
        let mut cmd = Command::new("memcached");
        cmd.arg("-s").arg(path).args(["-a", "0700"]);
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            cmd.args(["-u", "root"]);
        }
        SocketServer::start(cmd, path, |p| {
            McClient::connect(&unix(p))
                .and_then(|mut c| c.request(b"version\r\n"))
                .is_ok_and(|r| r.starts_with(b"VERSION "))
        })
    }
}

impl Drop for SocketServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// One RESP command over the unix socket at `path`; the raw reply (empty
/// when the server is not there yet).
fn redis_cmd(path: &Path, args: &[&[u8]]) -> Vec<u8> {
    let Ok(mut s) = UnixStream::connect(path) else {
        return Vec::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let mut req = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        req.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        req.extend_from_slice(a);
        req.extend_from_slice(b"\r\n");
    }
    if s.write_all(&req).is_err() {
        return Vec::new();
    }
    let mut buf = [0u8; 512];
    let n = s.read(&mut buf).unwrap_or(0);
    buf[..n].to_vec()
}

#[test]
fn a_redis_shard_over_a_unix_socket_shares_the_ring_with_a_tcp_one() {
    if !require_tools("redis_unix_shard", &["redis-server"]) {
        return;
    }
    let dir = socket_dir();
    let sock = dir.path().join("redis.sock");
    let local = SocketServer::redis(&sock);
    let tcp = RedisServer::start();
    let shards = [tcp.addr(), unix(&sock)];
    let admin_port = free_port();
    let memshift = Memshift::start(&super::config(
        &format!("127.0.0.1:{}", free_port()),
        admin_port,
        &shards,
        "",
    ));
    let mut c = memshift.client();
    let keys: Vec<String> = (0..40).map(|i| format!("ring:{i}")).collect();
    for k in &keys {
        c.set(k, k.as_bytes()).expect("set");
    }
    let mut on_unix = 0;
    for k in &keys {
        assert_eq!(c.get(k).expect("get"), Some(k.as_bytes().to_vec()), "{k}");
        if redis_cmd(&local.path, &[b"EXISTS", k.as_bytes()]) == b":1\r\n" {
            on_unix += 1;
        }
    }
    assert!(
        (1..keys.len()).contains(&on_unix),
        "{on_unix} of {} keys on the unix shard: the ring should place keys on both",
        keys.len()
    );
    let up = memshift_tests::ops_support::metric(
        admin_port,
        &format!(
            "memshift_backend_up{{backend=\"redis\",shard=\"{}\"}}",
            unix(&sock)
        ),
    );
    assert_eq!(up, 1.0, "the unix shard is up");
}

#[test]
fn a_legacy_memcached_over_a_unix_socket() {
    if !require_tools("memcached_unix_server", &["redis-server", "memcached"]) {
        return;
    }
    let dir = socket_dir();
    let sock = dir.path().join("memcached.sock");
    let legacy = SocketServer::memcached(&sock);
    let shard = RedisServer::start();
    let config = super::config(
        &format!("127.0.0.1:{}", free_port()),
        free_port(),
        &[shard.addr()],
        "",
    )
    .replace("phase = \"redis\"", "phase = \"memcached\"")
        + &format!("\n[memcached]\nservers = [\"{}\"]\n", unix(&sock));
    let memshift = Memshift::start(&config);
    let mut c = memshift.client();
    c.set("legacy:k", b"through the socket").expect("set");
    assert_eq!(
        c.get("legacy:k").expect("get"),
        Some(b"through the socket".to_vec())
    );
    // Stored in the legacy memcached itself, not in Redis.
    let mut direct = McClient::connect(&unix(&legacy.path)).expect("connect to memcached -s");
    assert_eq!(
        direct.get("legacy:k").expect("direct get"),
        Some(b"through the socket".to_vec())
    );
    assert_eq!(shard.cmd(&[b"DBSIZE"]).as_int(), Some(0));
}
