//! A real Redis Cluster on loopback: 6 `redis-server --cluster-enabled yes`
//! processes on free ports, joined by `redis-cli --cluster create` into 3
//! masters with one replica each, stopped by PID on drop.

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::env::free_cluster_port;
use crate::ops_support::poll_until;
use crate::process::{
    kill_and_reap, redis_answers_as, run_with_timeout, spawn, start_memshift_on_free_ports,
    temp_dir, Memshift,
};
use crate::resp::{RedisClient, Resp};

const READY: Duration = Duration::from_secs(60);

pub struct RedisClusterNodes {
    ports: Vec<u16>,
    children: Vec<Option<Child>>,
    dir: TempDir,
    options: NodeOptions,
}

/// How every node of the cluster runs.
#[derive(Debug, Clone)]
pub struct NodeOptions {
    /// `cluster-node-timeout`: how long before a silent node counts as
    /// failed (and its replica takes over).
    pub node_timeout_ms: u64,
    /// `cluster-require-full-coverage`: with `false`, the masters still up
    /// keep serving while a failed master's slots have no owner.
    pub require_full_coverage: bool,
}

impl Default for NodeOptions {
    fn default() -> Self {
        NodeOptions {
            node_timeout_ms: 2000,
            require_full_coverage: true,
        }
    }
}

impl RedisClusterNodes {
    /// Starts 6 nodes and waits for `cluster_state:ok` on every one.
    pub fn start() -> Self {
        Self::start_with(NodeOptions::default())
    }

    /// `start` with these node settings.
    pub fn start_with(options: NodeOptions) -> Self {
        let dir = temp_dir("memshift-rcluster-");
        let mut nodes = RedisClusterNodes {
            ports: Vec::new(),
            children: Vec::new(),
            dir,
            options,
        };
        for i in 0..6 {
            nodes.spawn_on_free_port(i);
        }
        let mut cmd = Command::new("redis-cli");
        cmd.arg("--cluster").arg("create");
        for a in nodes.addrs() {
            cmd.arg(a);
        }
        cmd.args(["--cluster-replicas", "1", "--cluster-yes"]);
        let out = run_with_timeout(cmd, READY)
            .unwrap_or_else(|e| panic!("redis-cli --cluster create: {e}"));
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed:\n{}\n{}",
            out.stdout,
            out.stderr
        );
        nodes.wait_ok();
        nodes.wait_replicas_synced();
        nodes
    }

    /// Waits until every running replica has finished its sync with its
    /// master (a replica that never synced refuses to fail over).
    pub fn wait_replicas_synced(&self) {
        self.wait_for("every replica in sync with its master", || {
            self.running().all(|i| {
                RedisClient::connect(&self.addrs()[i], Duration::from_millis(500))
                    .and_then(|mut c| c.cmd(&[b"INFO", b"replication"]))
                    .map(|r| match r {
                        Resp::Bulk(Some(b)) => {
                            let info = String::from_utf8_lossy(&b);
                            !info.contains("role:slave") || info.contains("master_link_status:up")
                        }
                        _ => false,
                    })
                    .unwrap_or(false)
            })
        });
    }

    /// Start node `i` on a free port; returns its index.
    fn spawn_on_free_port(&mut self, i: usize) -> usize {
        // A port taken between free_port() and bind: try another.
        for _ in 0..5 {
            let port = free_cluster_port();
            if let Ok(child) = self.spawn_node(i, port) {
                self.ports.push(port);
                self.children.push(Some(child));
                return self.ports.len() - 1;
            }
        }
        panic!("could not start cluster node {i}");
    }

    /// Start one more (empty) node, join it to the cluster as a master
    /// with no slots (`redis-cli --cluster add-node`) and wait until every
    /// node knows it. Returns its index.
    pub fn add_master(&mut self) -> usize {
        let i = self.spawn_on_free_port(self.ports.len());
        let live = self.live_node();
        self.redis_cli(&["add-node", &self.addrs()[i], &self.addrs()[live]]);
        let deadline = Instant::now() + READY;
        while !self.running().all(|n| self.knows_all(n)) {
            if Instant::now() > deadline {
                let tables: Vec<String> = self
                    .running()
                    .map(|n| format!("node {n}:\n{}", self.cluster_nodes(n).unwrap_or_default()))
                    .collect();
                panic!(
                    "every node to know the new one: not after {READY:?}\n{}",
                    tables.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.wait_ok();
        i
    }

    /// `redis-cli --cluster <args…>`, which must succeed (bounded).
    pub fn redis_cli(&self, args: &[&str]) -> String {
        let mut cmd = Command::new("redis-cli");
        cmd.arg("--cluster").args(args);
        let out = run_with_timeout(cmd, Duration::from_secs(300))
            .unwrap_or_else(|e| panic!("redis-cli --cluster {args:?}: {e}"));
        assert!(
            out.status.success(),
            "redis-cli --cluster {args:?} failed:\n{}\n{}",
            out.stdout,
            out.stderr
        );
        out.stdout
    }

    /// Indexes of the nodes not stopped.
    fn running(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.ports.len()).filter(|&i| self.children[i].is_some())
    }

    /// The first running node.
    pub fn live_node(&self) -> usize {
        self.running().next().expect("a running node")
    }

    /// `CLUSTER NODES` on node `i` (None: no answer).
    fn cluster_nodes(&self, i: usize) -> Option<String> {
        let r = RedisClient::connect(&self.addrs()[i], Duration::from_millis(500))
            .and_then(|mut c| c.cmd(&[b"CLUSTER", b"NODES"]))
            .ok()?;
        match r {
            Resp::Bulk(Some(b)) => Some(String::from_utf8_lossy(&b).into_owned()),
            _ => None,
        }
    }

    /// Whether node `i` knows every running node, with no handshake still
    /// under way (what `redis-cli --cluster rebalance` checks first).
    fn knows_all(&self, i: usize) -> bool {
        let Some(table) = self.cluster_nodes(i) else {
            return false;
        };
        let settled = !table.contains("handshake") && !table.contains("noaddr");
        settled
            && self.running().all(|n| {
                let addr = format!(" {}@", self.addrs()[n]);
                table.lines().any(|l| l.contains(&addr))
            })
    }

    fn wait_for(&self, what: &str, mut ok: impl FnMut() -> bool) {
        let deadline = Instant::now() + READY;
        while !ok() {
            assert!(Instant::now() < deadline, "{what}: not after {READY:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until no running node maps a slot to the stopped node
    /// `dead` (its replica was promoted) and the cluster is ok again.
    pub fn wait_failed_over(&self, dead: usize, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let moved = self.running().all(|n| {
                self.slot_ranges_from(n)
                    .is_some_and(|r| !r.is_empty() && r.iter().all(|&(_, _, m)| m != dead))
            });
            if moved {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "node {dead}'s slots not failed over after {within:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        self.wait_ok();
    }

    fn spawn_node(&self, i: usize, port: u16) -> Result<Child, String> {
        let node_dir = self.dir.path().join(format!("n{i}-{port}"));
        std::fs::create_dir_all(&node_dir).map_err(|e| e.to_string())?;
        let mut cmd = Command::new("redis-server");
        cmd.args(["--port", &port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--cluster-enabled", "yes"])
            .args(["--cluster-config-file", "nodes.conf"])
            .args([
                "--cluster-node-timeout",
                &self.options.node_timeout_ms.to_string(),
            ])
            .args([
                "--cluster-require-full-coverage",
                if self.options.require_full_coverage {
                    "yes"
                } else {
                    "no"
                },
            ])
            .args(["--save", ""])
            // Replicas sync at once (the default waits 5 s for more).
            .args(["--repl-diskless-sync-delay", "0"])
            .args(["--appendonly", "no"])
            .arg("--dir")
            .arg(&node_dir);
        let log = node_dir.join("redis.log");
        let mut child = spawn(cmd, &log, &log).map_err(|e| e.to_string())?;
        let deadline = Instant::now() + Duration::from_secs(10);
        let addr = format!("127.0.0.1:{port}");
        loop {
            if let Ok(Some(_)) = child.try_wait() {
                return Err(std::fs::read_to_string(&log).unwrap_or_default());
            }
            if redis_answers_as(&addr, child.id()) {
                return Ok(child);
            }
            if Instant::now() > deadline {
                let mut c = Some(child);
                kill_and_reap(&mut c);
                return Err("not ready".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn addrs(&self) -> Vec<String> {
        self.ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect()
    }

    /// One command on node `i`.
    pub fn cmd(&self, i: usize, args: &[&[u8]]) -> Resp {
        RedisClient::connect(&self.addrs()[i], Duration::from_secs(2))
            .and_then(|mut c| c.cmd(args))
            .unwrap_or_else(|e| panic!("node {i}: {e}"))
    }

    /// Waits until every running node says `cluster_state:ok` and agrees
    /// on the slot owners.
    pub fn wait_ok(&self) {
        let deadline = Instant::now() + READY;
        loop {
            let ok = (0..self.ports.len())
                .filter(|&i| self.children[i].is_some())
                .all(|i| {
                    RedisClient::connect(&self.addrs()[i], Duration::from_millis(500))
                        .and_then(|mut c| c.cmd(&[b"CLUSTER", b"INFO"]))
                        .map(|r| match r {
                            Resp::Bulk(Some(b)) => {
                                String::from_utf8_lossy(&b).contains("cluster_state:ok")
                            }
                            _ => false,
                        })
                        .unwrap_or(false)
                });
            if ok {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "redis cluster not ok after {READY:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// (first slot, last slot, master node index) per range, from the
    /// first running node. A node that does not answer within its 500 ms (a busy box) is
    /// asked again, for up to 10 s.
    pub fn slot_ranges(&self) -> Vec<(u16, u16, usize)> {
        let ranges = poll_until(Duration::from_secs(10), Duration::from_millis(50), || {
            self.slot_ranges_from(self.live_node())
        });
        ranges.unwrap_or_else(|| {
            let n = self.live_node();
            panic!(
                "CLUSTER SLOTS from node {n}: {:?} (ports {:?})",
                RedisClient::connect(&self.addrs()[n], Duration::from_millis(500))
                    .and_then(|mut c| c.cmd(&[b"CLUSTER", b"SLOTS"])),
                self.ports
            )
        })
    }

    /// `slot_ranges` as node `n` sees them (None: no answer, or a master
    /// this harness did not start).
    pub fn slot_ranges_from(&self, n: usize) -> Option<Vec<(u16, u16, usize)>> {
        let r = RedisClient::connect(&self.addrs()[n], Duration::from_millis(500))
            .and_then(|mut c| c.cmd(&[b"CLUSTER", b"SLOTS"]))
            .ok()?;
        let Resp::Array(Some(ranges)) = r else {
            return None;
        };
        let mut out = Vec::new();
        for range in ranges {
            let Resp::Array(Some(items)) = range else {
                continue;
            };
            if let (Some(Resp::Int(a)), Some(Resp::Int(b)), Some(Resp::Array(Some(m)))) =
                (items.first(), items.get(1), items.get(2))
            {
                if let Some(Resp::Int(port)) = m.get(1) {
                    let node = self.ports.iter().position(|&p| i64::from(p) == *port)?;
                    out.push((*a as u16, *b as u16, node));
                }
            }
        }
        Some(out)
    }

    /// The node (index) that is master for `slot`.
    pub fn master_of(&self, slot: u16) -> usize {
        self.slot_ranges()
            .into_iter()
            .find(|&(a, b, _)| (a..=b).contains(&slot))
            .map(|r| r.2)
            .unwrap_or_else(|| panic!("slot {slot} has no master"))
    }

    /// `CLUSTER KEYSLOT key`.
    pub fn keyslot(&self, key: &str) -> u16 {
        match self.cmd(self.live_node(), &[b"CLUSTER", b"KEYSLOT", key.as_bytes()]) {
            Resp::Int(s) => u16::try_from(s).expect("slot"),
            r => panic!("CLUSTER KEYSLOT: {r:?}"),
        }
    }

    /// Nodes that are masters serving slots.
    pub fn masters(&self) -> Vec<usize> {
        let mut m: Vec<usize> = self.slot_ranges().into_iter().map(|r| r.2).collect();
        m.sort_unstable();
        m.dedup();
        m
    }

    pub fn node_id(&self, i: usize) -> Vec<u8> {
        match self.cmd(i, &[b"CLUSTER", b"MYID"]) {
            Resp::Bulk(Some(id)) => id,
            r => panic!("CLUSTER MYID: {r:?}"),
        }
    }

    /// Stop node `i` (SIGKILL by its PID).
    pub fn stop(&mut self, i: usize) {
        kill_and_reap(&mut self.children[i]);
    }

    /// memshift in cluster mode over these nodes (two seeds).
    pub fn memshift(&self, server_extra: &str) -> (Memshift, String) {
        self.memshift_with(
            server_extra,
            "timeout_ms = 1000\ncluster_refresh_ms = 500\n",
        )
    }

    /// [`Self::memshift`] with these `[redis]` lines instead of its
    /// `timeout_ms` and `cluster_refresh_ms`.
    pub fn memshift_with(&self, server_extra: &str, redis_lines: &str) -> (Memshift, String) {
        let seeds = self.addrs()[..2]
            .iter()
            .map(|a| format!("\"{a}\""))
            .collect::<Vec<_>>()
            .join(", ");
        let (m, _, config) = start_memshift_on_free_ports(|port, admin| {
            format!(
                "[server]\nlisten = \"127.0.0.1:{port}\"\n{server_extra}\n\
                 [admin]\nlisten = \"127.0.0.1:{admin}\"\n\n\
                 [redis]\nmode = \"cluster\"\ncluster_nodes = [{seeds}]\n{redis_lines}\n\
                 [migration]\nphase = \"redis\"\n"
            )
        });
        (m, config)
    }
}

impl Drop for RedisClusterNodes {
    fn drop(&mut self) {
        for c in &mut self.children {
            kill_and_reap(c);
        }
    }
}
