//! Redis Sentinel topologies for the tests: each shard a primary and a
//! replica (`redis-server`), watched by three sentinels (`redis-server
//! --sentinel`, what Debian's `redis-sentinel` runs) with quorum 2, a short
//! `down-after-milliseconds` and `failover-timeout`. Every process is a guard
//! killed on drop; a test stops or pauses one by its PID.

use std::fs;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::thread::sleep;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::env::free_port;
use crate::process::{
    kill_and_reap, read_lossy, redis_answers_as, spawn, temp_dir, wait_ready, RedisServer,
};
use crate::resp::{RedisClient, Resp};

/// Sentinel's `down-after-milliseconds`: how long a silent primary takes
/// to count as down.
pub const DOWN_AFTER_MS: u64 = 1000;
/// `failover-timeout`: bounds a failover attempt (and the wait before a
/// retry when one stalls).
pub const FAILOVER_TIMEOUT_MS: u64 = 3000;
const SENTINELS: usize = 3;
const QUORUM: usize = 2;

/// One `redis-server --sentinel`.
pub struct Sentinel {
    port: u16,
    dir: TempDir,
    child: Option<Child>,
}

impl Sentinel {
    fn start(masters: &[(String, String)], down_after_ms: u64) -> Result<Sentinel, String> {
        let port = free_port();
        let dir = temp_dir("memshift-sentinel-");
        let mut conf = format!(
            "port {port}\nbind 127.0.0.1\ndaemonize no\ndir {}\n",
            dir.path().display()
        );
        for (name, addr) in masters {
            let (host, p) = addr.rsplit_once(':').ok_or("bad address")?;
            conf.push_str(&format!(
                "sentinel monitor {name} {host} {p} {QUORUM}\n\
                 sentinel down-after-milliseconds {name} {down_after_ms}\n\
                 sentinel failover-timeout {name} {FAILOVER_TIMEOUT_MS}\n\
                 sentinel parallel-syncs {name} 1\n"
            ));
        }
        // Sentinel rewrites its config file: it must be its own, writable.
        let conf_path = dir.path().join("sentinel.conf");
        fs::write(&conf_path, conf).map_err(|e| e.to_string())?;
        let mut cmd = Command::new("redis-server");
        cmd.arg(&conf_path).arg("--sentinel");
        let log = dir.path().join("sentinel.log");
        let mut child = spawn(cmd, &log, &log).map_err(|e| format!("spawn sentinel: {e}"))?;
        let addr = format!("127.0.0.1:{port}");
        let log_fn = || read_lossy(&log);
        let pid = child.id();
        let ready = wait_ready(&mut child, "redis-sentinel", &log_fn, || {
            redis_answers_as(&addr, pid)
        });
        let mut s = Sentinel {
            port,
            dir,
            child: Some(child),
        };
        if let Err(e) = ready {
            kill_and_reap(&mut s.child);
            return Err(e);
        }
        Ok(s)
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn log(&self) -> String {
        read_lossy(&self.dir.path().join("sentinel.log"))
    }

    /// SIGKILL.
    pub fn kill(&mut self) {
        kill_and_reap(&mut self.child);
    }

    pub fn cmd(&self, args: &[&[u8]]) -> Option<Resp> {
        RedisClient::connect(&self.addr(), Duration::from_secs(2))
            .and_then(|mut c| c.cmd(args))
            .ok()
    }

    /// The primary this sentinel names for `master`.
    pub fn primary_of(&self, master: &str) -> Option<String> {
        let reply = self.cmd(&[b"SENTINEL", b"get-master-addr-by-name", master.as_bytes()])?;
        let parts = reply.as_bulk_list()?;
        let [ip, port] = &parts[..] else {
            return None;
        };
        Some(format!(
            "{}:{}",
            String::from_utf8_lossy(ip),
            String::from_utf8_lossy(port)
        ))
    }

    fn count(&self, what: &[u8], master: &str) -> usize {
        match self.cmd(&[b"SENTINEL", what, master.as_bytes()]) {
            Some(Resp::Array(Some(items))) => items.len(),
            _ => 0,
        }
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        kill_and_reap(&mut self.child);
    }
}

/// One Sentinel master: `nodes[0]` starts as its primary, `nodes[1]` as
/// its replica.
pub struct SentinelShard {
    pub name: String,
    pub nodes: Vec<RedisServer>,
}

impl SentinelShard {
    /// The node listening on `addr`.
    pub fn node(&self, addr: &str) -> &RedisServer {
        self.nodes
            .iter()
            .find(|n| n.addr() == addr)
            .unwrap_or_else(|| panic!("{addr} is no node of {}", self.name))
    }

    pub fn node_index(&self, addr: &str) -> usize {
        self.nodes
            .iter()
            .position(|n| n.addr() == addr)
            .unwrap_or_else(|| panic!("{addr} is no node of {}", self.name))
    }
}

/// `shards` masters `s1`, `s2`, … each a primary and a replica, and three
/// sentinels that know all of them.
pub struct SentinelTopology {
    pub shards: Vec<SentinelShard>,
    pub sentinels: Vec<Sentinel>,
}

impl SentinelTopology {
    pub fn start(shards: usize) -> SentinelTopology {
        SentinelTopology::start_with(shards, DOWN_AFTER_MS)
    }

    /// `start` with another `down-after-milliseconds` (a long one: a
    /// paused primary stays the primary, no failover).
    pub fn start_with(shards: usize, down_after_ms: u64) -> SentinelTopology {
        let shards: Vec<SentinelShard> = (1..=shards)
            .map(|i| {
                let primary = RedisServer::start();
                let replica = RedisServer::start();
                let port = primary.port().to_string();
                replica.cmd(&[b"REPLICAOF", b"127.0.0.1", port.as_bytes()]);
                SentinelShard {
                    name: format!("s{i}"),
                    nodes: vec![primary, replica],
                }
            })
            .collect();
        for s in &shards {
            wait_replica_synced(&s.nodes[1]);
        }
        let masters: Vec<(String, String)> = shards
            .iter()
            .map(|s| (s.name.clone(), s.nodes[0].addr()))
            .collect();
        let sentinels: Vec<Sentinel> = (0..SENTINELS)
            .map(|_| Sentinel::start(&masters, down_after_ms).unwrap_or_else(|e| panic!("{e}")))
            .collect();
        let topo = SentinelTopology { shards, sentinels };
        topo.wait_settled();
        topo
    }

    /// `"a:1", "b:2"` for `[redis] sentinels`.
    pub fn sentinel_list(&self) -> String {
        crate::process::toml_list(
            &self
                .sentinels
                .iter()
                .map(Sentinel::addr)
                .collect::<Vec<_>>(),
        )
    }

    /// `{ master = "s1" }, …` for `[redis] shards`.
    pub fn shard_list(&self) -> String {
        self.shards
            .iter()
            .map(|s| format!("{{ master = \"{}\" }}", s.name))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Every sentinel sees every replica and the other sentinels (a
    /// failover needs both).
    pub fn wait_settled(&self) {
        let deadline = Instant::now() + Duration::from_secs(40);
        loop {
            let settled = self
                .sentinels
                .iter()
                .filter(|s| s.child.is_some())
                .all(|s| {
                    self.shards.iter().all(|sh| {
                        s.count(b"replicas", &sh.name) >= 1
                            && s.count(b"sentinels", &sh.name) >= SENTINELS - 1
                    })
                });
            if settled {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "sentinels did not discover the replicas and each other; first log:\n{}",
                self.sentinels[0].log()
            );
            sleep(Duration::from_millis(100));
        }
    }

    /// The primary a running sentinel names for `master`.
    pub fn primary_of(&self, master: &str) -> String {
        self.sentinels
            .iter()
            .filter(|s| s.child.is_some())
            .find_map(|s| s.primary_of(master))
            .unwrap_or_else(|| panic!("no sentinel names a primary for {master}"))
    }

    /// Waits until a running sentinel names a primary other than `old`
    /// for `master`; returns it and when it was seen.
    pub fn wait_switch(&self, master: &str, old: &str, timeout: Duration) -> (String, Instant) {
        let deadline = Instant::now() + timeout;
        loop {
            let now_primary = self
                .sentinels
                .iter()
                .filter(|s| s.child.is_some())
                .find_map(|s| s.primary_of(master).filter(|p| p != old));
            if let Some(p) = now_primary {
                return (p, Instant::now());
            }
            assert!(
                Instant::now() < deadline,
                "{master}: no failover from {old} within {timeout:?}; sentinel log:\n{}",
                self.sentinels[0].log()
            );
            sleep(Duration::from_millis(20));
        }
    }

    /// Where the sentinels' files are (for a failing test's output).
    pub fn dirs(&self) -> Vec<PathBuf> {
        self.sentinels
            .iter()
            .map(|s| s.dir.path().to_path_buf())
            .collect()
    }
}

/// `ROLE` of a node: "master" or "slave" (else what it answered, or why
/// it did not). Sentinel ends each reconfiguration of a node with `CLIENT
/// KILL TYPE normal`, which can reset this very connection mid-request:
/// that is a "not yet" to a caller polling for a role, not a failure.
pub fn role(node: &RedisServer) -> String {
    match node.client().cmd(&[b"ROLE"]) {
        Ok(Resp::Array(Some(items))) => match items.first() {
            Some(Resp::Bulk(Some(r))) => String::from_utf8_lossy(r).into_owned(),
            other => format!("{other:?}"),
        },
        Ok(other) => format!("{other:?}"),
        Err(e) => format!("ROLE failed: {e}"),
    }
}

fn wait_replica_synced(replica: &RedisServer) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Resp::Bulk(Some(info)) = replica.cmd(&[b"INFO", b"replication"]) {
            if String::from_utf8_lossy(&info).contains("master_link_status:up") {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "replica {} did not sync",
            replica.addr()
        );
        sleep(Duration::from_millis(50));
    }
}
